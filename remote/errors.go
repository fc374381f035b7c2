package remote

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The error types below each implement Details() []string: the lines kforge's error printer
// shows, headline first, then captured output, then a hint saying what to do.

// CommandError is a remote command that ran and failed (non-zero exit, killed by a signal, or the
// connection dropped under it).
type CommandError struct {
	Host     string
	Command  string // as given, before the sudo wrapper; secrets never appear in commands
	ExitCode int    // -1 when there is none (signal, connection lost)
	Signal   string // set when the command was killed by a signal
	Reason   string // set when there is no exit status, e.g. "connection lost"
	Stderr   []byte // the last lines of stderr
	Hint     string
}

func (e *CommandError) Error() string {
	switch {
	case e.Signal != "":
		return fmt.Sprintf("%s: command %s killed by signal %s", e.Host, short(e.Command), e.Signal)
	case e.Reason != "":
		return fmt.Sprintf("%s: command %s: %s", e.Host, short(e.Command), e.Reason)
	}
	return fmt.Sprintf("%s: command %s exited with status %d", e.Host, short(e.Command), e.ExitCode)
}

// Details returns the message, the full command, the tail of stderr and the hint.
func (e *CommandError) Details() []string {
	lines := []string{e.Error()}
	if short(e.Command) != quoteForMessage(e.Command) {
		lines = append(lines, "  command: "+e.Command)
	}
	lines = append(lines, stderrLines(e.Stderr)...)
	if e.Hint != "" {
		lines = append(lines, "  hint: "+e.Hint)
	}
	return lines
}

// RemoteHost names the host the error happened on.
func (e *CommandError) RemoteHost() string { return e.Host }

// DialError is a failure to reach a host's SSH server (refused, unreachable, timed out, the
// connection closed during the handshake).
type DialError struct {
	Host     string
	Addr     string // host:port dialled, or the bastion chain
	Attempts int
	Err      error
	Hint     string
}

func (e *DialError) Error() string {
	att := ""
	if e.Attempts > 1 {
		att = fmt.Sprintf(" (%d attempts)", e.Attempts)
	}
	return fmt.Sprintf("%s: cannot connect to %s%s: %v", e.Host, e.Addr, att, e.Err)
}
func (e *DialError) Unwrap() error      { return e.Err }
func (e *DialError) Details() []string  { return withHint(e.Error(), e.Hint) }
func (e *DialError) RemoteHost() string { return e.Host }

// AuthError is the SSH server refusing every credential offered.
type AuthError struct {
	Host    string
	Addr    string
	User    string
	Methods []string // what was offered, e.g. "publickey (agent: 1 key)", "password (KFORGE_PW)"
	Err     error
	Hint    string
}

func (e *AuthError) Error() string {
	return fmt.Sprintf("%s: SSH authentication as %q at %s failed (offered: %s)", e.Host, e.User, e.Addr, strings.Join(e.Methods, ", "))
}
func (e *AuthError) Unwrap() error      { return e.Err }
func (e *AuthError) Details() []string  { return withHint(e.Error(), e.Hint) }
func (e *AuthError) RemoteHost() string { return e.Host }

// HostKeyError is a host key that is unknown, differs from the known or pinned one, or is revoked.
type HostKeyError struct {
	Host       string
	Addr       string
	Unknown    bool     // no key known for this address
	Revoked    bool     // the key is marked @revoked
	Got        string   // SHA256 fingerprint (and type) of the key the server presented
	Want       []string // fingerprints of the keys expected (pinned or in known_hosts, with file:line)
	KnownHosts string   // known_hosts file consulted
	Hint       string
}

func (e *HostKeyError) Error() string {
	switch {
	case e.Unknown:
		return fmt.Sprintf("%s: host key of %s is unknown: %s", e.Host, e.Addr, e.Got)
	case e.Revoked:
		return fmt.Sprintf("%s: host key of %s is revoked: %s", e.Host, e.Addr, e.Got)
	}
	return fmt.Sprintf("%s: HOST KEY MISMATCH for %s: server presented %s, expected %s (possible man-in-the-middle; refused)", e.Host, e.Addr, e.Got, strings.Join(e.Want, " or "))
}
func (e *HostKeyError) Details() []string  { return withHint(e.Error(), e.Hint) }
func (e *HostKeyError) RemoteHost() string { return e.Host }

// TimeoutError is an operation ended by its deadline.
type TimeoutError struct {
	Host   string
	Op     string // "connect", "command <cmd>", "upload <path>"
	After  time.Duration
	Stderr []byte // tail of stderr of a command, if any
	Hint   string
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("%s: %s timed out after %s", e.Host, e.Op, e.After.Round(time.Millisecond))
}
func (e *TimeoutError) Details() []string {
	lines := []string{e.Error()}
	lines = append(lines, stderrLines(e.Stderr)...)
	if e.Hint != "" {
		lines = append(lines, "  hint: "+e.Hint)
	}
	return lines
}
func (e *TimeoutError) RemoteHost() string { return e.Host }

// Timeout reports true, so the error matches os.ErrDeadlineExceeded-style checks.
func (e *TimeoutError) Timeout() bool { return true }

// HostError wraps an error that does not already say which host it came from.
type HostError struct {
	Host string
	Err  error
}

func (e *HostError) Error() string      { return e.Host + ": " + e.Err.Error() }
func (e *HostError) Unwrap() error      { return e.Err }
func (e *HostError) RemoteHost() string { return e.Host }

// Details prefixes the wrapped error's details with the host when it has any.
func (e *HostError) Details() []string {
	var d interface{ Details() []string }
	if errors.As(e.Err, &d) {
		lines := d.Details()
		if len(lines) > 0 && !strings.HasPrefix(lines[0], e.Host+":") {
			lines = append([]string{e.Host + ": " + lines[0]}, lines[1:]...)
		}
		return lines
	}
	return []string{e.Error()}
}

// WithHost wraps err with host unless err already names that host (one of this package's typed
// errors or an earlier WithHost). nil stays nil.
func WithHost(host string, err error) error {
	if err == nil {
		return nil
	}
	var h interface{ RemoteHost() string }
	if errors.As(err, &h) && h.RemoteHost() == host {
		return err
	}
	return &HostError{Host: host, Err: err}
}

// Errors is several hosts' errors. It unwraps to all of them, so errors.As and errors.Is look
// into each; Details lists every error's details.
type Errors []error

func (e Errors) Error() string {
	if len(e) == 1 {
		return e[0].Error()
	}
	parts := make([]string, len(e))
	for i, err := range e {
		parts[i] = err.Error()
	}
	return fmt.Sprintf("%d hosts failed: %s", len(e), strings.Join(parts, "; "))
}
func (e Errors) Unwrap() []error { return e }

// Details concatenates every error's details (or message).
func (e Errors) Details() []string {
	var lines []string
	if len(e) > 1 {
		lines = append(lines, fmt.Sprintf("%d hosts failed:", len(e)))
	}
	for _, err := range e {
		var d interface{ Details() []string }
		if errors.As(err, &d) {
			lines = append(lines, d.Details()...)
		} else {
			lines = append(lines, err.Error())
		}
	}
	return lines
}

func withHint(msg, hint string) []string {
	if hint == "" {
		return []string{msg}
	}
	return []string{msg, "  hint: " + hint}
}

// short is the command as shown in one-line messages: quoted, cut at 80 characters.
func short(cmd string) string {
	c := strings.Join(strings.Fields(cmd), " ")
	if len(c) > 80 {
		c = c[:77] + "..."
	}
	return quoteForMessage(c)
}

func quoteForMessage(s string) string { return fmt.Sprintf("%q", s) }

// tailBuffer keeps the last max bytes written to it, cut to whole lines when it overflowed.
type tailBuffer struct {
	max  int
	buf  []byte
	lost bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0:0], t.buf[len(t.buf)-t.max:]...)
		t.lost = true
	}
	return len(p), nil
}

// Bytes returns at most max bytes and at most 20 lines of the end of what was written.
func (t *tailBuffer) Bytes() []byte {
	b := t.buf
	if len(b) > t.max {
		b = b[len(b)-t.max:]
		t.lost = true
	}
	if t.lost {
		if i := bytes.IndexByte(b, '\n'); i >= 0 && i < len(b)-1 {
			b = b[i+1:]
		}
	}
	trimmed := bytes.TrimRight(b, "\n")
	if n := bytes.Count(trimmed, []byte("\n")); n >= 20 {
		idx := len(trimmed)
		for i := 0; i < 20; i++ {
			idx = bytes.LastIndexByte(trimmed[:idx], '\n')
		}
		b = b[idx+1:]
	}
	return append([]byte(nil), b...)
}

// stderrLines shows the captured tail of a command's stderr under an error.
func stderrLines(stderr []byte) []string {
	tail := bytes.TrimRight(stderr, "\n")
	if len(tail) == 0 {
		return nil
	}
	lines := []string{"  stderr (last lines):"}
	for _, l := range strings.Split(string(tail), "\n") {
		lines = append(lines, "    "+l)
	}
	return lines
}
