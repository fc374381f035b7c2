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

// Facts are what kforge needs to know about a host before changing it.
type Facts struct {
	Hostname      string
	OSID          string // os-release ID, e.g. debian, ubuntu, rhel
	OSVersionID   string // os-release VERSION_ID, e.g. 12
	Arch          string // uname -m, e.g. x86_64, aarch64
	Kernel        string // uname -r
	CgroupVersion int    // 1 or 2
	Systemd       bool   // PID 1 is systemd
}

// FactsCommand is the one command ReadFacts runs; the fake Host in remotetest answers it.
const FactsCommand = `printf 'hostname=%s\n' "$(hostname)"; printf 'arch=%s\nkernel=%s\n' "$(uname -m)" "$(uname -r)"; ` +
	`if [ -f /sys/fs/cgroup/cgroup.controllers ]; then echo cgroup=2; else echo cgroup=1; fi; ` +
	`if [ -d /run/systemd/system ]; then echo systemd=yes; else echo systemd=no; fi; ` +
	`. /etc/os-release 2>/dev/null; printf 'id=%s\nversion_id=%s\n' "$ID" "$VERSION_ID"`

// ReadFacts reads Facts from h with one command.
func ReadFacts(ctx context.Context, h Host) (Facts, error) {
	out, err := Output(ctx, h, FactsCommand)
	if err != nil {
		return Facts{}, err
	}
	return ParseFacts(out)
}

// ParseFacts parses FactsCommand's output.
func ParseFacts(out []byte) (Facts, error) {
	var f Facts
	seen := 0
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		seen++
		switch k {
		case "hostname":
			f.Hostname = v
		case "arch":
			f.Arch = v
		case "kernel":
			f.Kernel = v
		case "cgroup":
			if v == "2" {
				f.CgroupVersion = 2
			} else {
				f.CgroupVersion = 1
			}
		case "systemd":
			f.Systemd = v == "yes"
		case "id":
			f.OSID = v
		case "version_id":
			f.OSVersionID = v
		default:
			seen--
		}
	}
	if seen < 7 {
		return f, fmt.Errorf("unexpected facts output (%d of 7 fields): %q", seen, out)
	}
	return f, nil
}
