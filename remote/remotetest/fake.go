// Package remotetest is an in-memory remote.Host for unit tests of code that drives hosts
// (apply tasks, facts checks). It records every command and upload, answers commands from
// handlers the test registers, and keeps uploaded files in memory.
package remotetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/kforge/kforge/remote"
)

// File is a file on the fake host.
type File struct {
	Data     []byte
	Mode     fs.FileMode
	UID, GID int
}

// Result is a canned answer to a command.
type Result struct {
	Stdout, Stderr string
	Exit           int
}

// Host is an in-memory remote.Host. The zero value is not usable; call New.
type Host struct {
	name string

	mu        sync.Mutex
	files     map[string]File
	dirs      map[string]bool
	handlers  []handler
	commands  []string
	uploads   []string // paths actually written
	skipped   []string // uploads skipped because the file was already there
	uploadErr error
}

type handler struct {
	match func(string) bool
	fn    func(ctx context.Context, c remote.Cmd) error
}

// New returns a fake host named name: a Debian 12 amd64 machine with systemd and cgroup v2,
// an empty file system and no command handlers.
func New(name string) *Host {
	return &Host{
		name:  name,
		files: map[string]File{},
		dirs:  map[string]bool{"/": true},
	}
}

// Name implements remote.Host.
func (h *Host) Name() string { return h.name }

// On answers the exact command line command with r.
func (h *Host) On(command string, r Result) {
	h.Handle(func(c string) bool { return c == command }, r.answer(h.name))
}

// OnPrefix answers every command line starting with prefix with r.
func (h *Host) OnPrefix(prefix string, r Result) {
	h.Handle(func(c string) bool { return strings.HasPrefix(c, prefix) }, r.answer(h.name))
}

// Handle registers fn for command lines match accepts. Later handlers win over earlier ones. fn
// writes to c.Stdout/c.Stderr (never nil inside fn) and returns nil or an error; Exit returns
// the error a failing command produces.
func (h *Host) Handle(match func(command string) bool, fn func(ctx context.Context, c remote.Cmd) error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.handlers = append(h.handlers, handler{match, fn})
}

// FailUploads makes every later Upload return err (nil restores).
func (h *Host) FailUploads(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.uploadErr = err
}

// Commands returns the command lines run so far, in order.
func (h *Host) Commands() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.commands...)
}

// Uploads returns the paths written so far (skipped uploads are not included), in order.
func (h *Host) Uploads() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.uploads...)
}

// Skipped returns the paths whose upload was skipped because they were already up to date.
func (h *Host) Skipped() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.skipped...)
}

// File returns the file at p.
func (h *Host) File(p string) (File, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f, ok := h.files[p]
	if ok {
		f.Data = append([]byte(nil), f.Data...)
	}
	return f, ok
}

// Files returns the paths of all files, sorted.
func (h *Host) Files() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ps []string
	for p := range h.files {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return ps
}

// SetFile puts a file on the host (owned by root), creating its parents.
func (h *Host) SetFile(p string, data []byte, mode fs.FileMode) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mkdirAll(path.Dir(p))
	h.files[p] = File{Data: append([]byte(nil), data...), Mode: mode}
}

// RemoveFile deletes the file at p, if any.
func (h *Host) RemoveFile(p string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.files, p)
}

// IsDir reports whether dir exists.
func (h *Host) IsDir(dir string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dirs[path.Clean(dir)]
}

func (h *Host) mkdirAll(dir string) {
	for d := path.Clean(dir); !h.dirs[d]; d = path.Dir(d) {
		h.dirs[d] = true
	}
}

// Exit returns the error a command exiting with code and stderr produces on h, the same type the
// SSH implementation returns.
func (h *Host) Exit(command string, code int, stderr string) error {
	return &remote.CommandError{Host: h.name, Command: command, ExitCode: code, Stderr: []byte(stderr)}
}

// Run implements remote.Host: it records the command, then the latest matching handler answers;
// without one, the built-ins (cat, mkdir -p, the facts command) do; otherwise the command fails
// with status 127.
func (h *Host) Run(ctx context.Context, c remote.Cmd) error {
	if err := h.ctxErr(ctx, "command "+c.Command); err != nil {
		return err
	}
	if c.Stdout == nil {
		c.Stdout = io.Discard
	}
	var stderr strings.Builder
	if c.Stderr == nil {
		c.Stderr = &stderr
	} else {
		c.Stderr = io.MultiWriter(c.Stderr, &stderr)
	}
	if c.Stdin == nil {
		c.Stdin = strings.NewReader("")
	}
	h.mu.Lock()
	h.commands = append(h.commands, c.Command)
	var fn func(context.Context, remote.Cmd) error
	for i := len(h.handlers) - 1; i >= 0; i-- {
		if h.handlers[i].match(c.Command) {
			fn = h.handlers[i].fn
			break
		}
	}
	h.mu.Unlock()
	if fn != nil {
		return fn(ctx, c)
	}
	return h.builtin(c)
}

func (r Result) answer(host string) func(context.Context, remote.Cmd) error {
	return func(_ context.Context, c remote.Cmd) error {
		io.WriteString(c.Stdout, r.Stdout)
		io.WriteString(c.Stderr, r.Stderr)
		if r.Exit != 0 {
			return &remote.CommandError{Host: host, Command: c.Command, ExitCode: r.Exit, Stderr: []byte(r.Stderr)}
		}
		return nil
	}
}

func (h *Host) builtin(c remote.Cmd) error {
	fail := func(code int, msg string) error {
		io.WriteString(c.Stderr, msg+"\n")
		return &remote.CommandError{Host: h.name, Command: c.Command, ExitCode: code, Stderr: []byte(msg + "\n")}
	}
	if p, ok := strings.CutPrefix(c.Command, "cat -- "); ok {
		p = unquote(p)
		f, ok := h.File(p)
		if !ok {
			return fail(1, "cat: "+p+": No such file or directory")
		}
		c.Stdout.Write(f.Data)
		return nil
	}
	if rest, ok := strings.CutPrefix(c.Command, "mkdir -p -m "); ok {
		if _, dir, ok := strings.Cut(rest, " -- "); ok {
			h.mu.Lock()
			h.mkdirAll(unquote(dir))
			h.mu.Unlock()
			return nil
		}
	}
	return fail(127, "remotetest: no handler for command "+c.Command)
}

// unquote undoes remote.Quote for one argument.
func unquote(s string) string {
	if len(s) >= 2 && s[0] == '\'' && s[len(s)-1] == '\'' {
		return strings.ReplaceAll(s[1:len(s)-1], `'\''`, "'")
	}
	return s
}

// Upload implements remote.Host: it stores the file, or records a skip when content, mode and
// owner already match.
func (h *Host) Upload(ctx context.Context, f remote.File) error {
	if err := h.ctxErr(ctx, "upload "+f.Path); err != nil {
		return err
	}
	if !path.IsAbs(f.Path) {
		return fmt.Errorf("%s: upload %s: path is not absolute", h.name, f.Path)
	}
	var data []byte
	if f.Body != nil {
		var err error
		if data, err = io.ReadAll(f.Body); err != nil {
			return fmt.Errorf("%s: upload %s: read content: %w", h.name, f.Path, err)
		}
	}
	if f.Mode == 0 {
		f.Mode = 0o644
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.uploadErr != nil {
		return h.uploadErr
	}
	nf := File{Data: data, Mode: f.Mode.Perm(), UID: f.UID, GID: f.GID}
	if old, ok := h.files[f.Path]; ok {
		if f.UID < 0 {
			nf.UID = old.UID
		}
		if f.GID < 0 {
			nf.GID = old.GID
		}
		if string(old.Data) == string(data) && old.Mode == nf.Mode && old.UID == nf.UID && old.GID == nf.GID {
			h.skipped = append(h.skipped, f.Path)
			return nil
		}
	}
	h.mkdirAll(path.Dir(f.Path))
	h.files[f.Path] = nf
	h.uploads = append(h.uploads, f.Path)
	return nil
}

// ctxErr is what the SSH implementation returns for a done context: a *remote.TimeoutError
// past the deadline, the cancellation wrapped with the host otherwise.
func (h *Host) ctxErr(ctx context.Context, op string) error {
	switch {
	case ctx.Err() == nil:
		return nil
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &remote.TimeoutError{Host: h.name, Op: op}
	}
	return &remote.HostError{Host: h.name, Err: fmt.Errorf("%s: %w", op, ctx.Err())}
}

var _ remote.Host = (*Host)(nil)
