package remote

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"strings"
)

// Quote quotes s for a POSIX shell command line.
func Quote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Command joins args into a command line, quoting each.
func Command(args ...string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = Quote(a)
	}
	return strings.Join(q, " ")
}

// Output runs command on h and returns its stdout.
func Output(ctx context.Context, h Host, command string) ([]byte, error) {
	var out bytes.Buffer
	err := h.Run(ctx, Cmd{Command: command, Stdout: &out})
	return out.Bytes(), err
}

// MkdirAll creates dir and its parents with mode (as root).
func MkdirAll(ctx context.Context, h Host, dir string, mode fs.FileMode) error {
	return h.Run(ctx, Cmd{Command: fmt.Sprintf("mkdir -p -m %o -- %s", mode.Perm(), Quote(dir))})
}

// ReadFile returns the content of path on h. A missing file is a *CommandError.
func ReadFile(ctx context.Context, h Host, path string) ([]byte, error) {
	return Output(ctx, h, "cat -- "+Quote(path))
}

// Systemctl runs systemctl with args on h, e.g. Systemctl(ctx, h, "enable", "--now", "kubelet").
func Systemctl(ctx context.Context, h Host, args ...string) error {
	return h.Run(ctx, Cmd{Command: Command(append([]string{"systemctl"}, args...)...)})
}
