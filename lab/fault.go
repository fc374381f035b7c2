package lab

import (
	"context"
	"fmt"
	"strconv"
)

// Faults for tests. Each names one failure a real network or machine has; the matching call
// undoes it. They need root like everything else here, and act on one host.

// CutLink takes the host's link to the bridge down (the bridge-side veth): packets to and from
// it vanish, new connections time out and open sessions hang.
func (l *Lab) CutLink(ctx context.Context, host string) error { return l.setLink(ctx, host, "down") }

// RestoreLink undoes CutLink.
func (l *Lab) RestoreLink(ctx context.Context, host string) error { return l.setLink(ctx, host, "up") }

func (l *Lab) setLink(ctx context.Context, host, state string) error {
	h, err := l.host(host)
	if err != nil {
		return err
	}
	if !l.Running(host) {
		return fmt.Errorf("lab host %s is stopped: its link exists only while it runs", host)
	}
	if err := run(ctx, "ip", "link", "set", h.Veth, state); err != nil {
		return fmt.Errorf("lab host %s: %w", host, err)
	}
	return nil
}

// dropComment marks the iptables rule DropPackets inserts, so it can be found and removed.
const dropComment = "kforge-lab-fault-drop"

// DropPackets makes the host silently drop the given fraction (0..1] of the packets it receives,
// with an iptables rule in the host's own network namespace; 1 drops everything (a black hole:
// connections time out), 0 removes the rule.
func (l *Lab) DropPackets(ctx context.Context, host string, fraction float64) error {
	if fraction < 0 || fraction > 1 {
		return fmt.Errorf("lab host %s: drop fraction %v is not between 0 and 1", host, fraction)
	}
	// Remove an earlier rule first, whatever its fraction.
	for {
		out, err := l.Exec(ctx, host, "iptables", "-S", "INPUT")
		if err != nil {
			return err
		}
		rule := findRule(string(out), dropComment)
		if rule == nil {
			break
		}
		rule[0] = "-D"
		if _, err := l.Exec(ctx, host, append([]string{"iptables"}, rule...)...); err != nil {
			return err
		}
	}
	if fraction == 0 {
		return nil
	}
	args := []string{"iptables", "-I", "INPUT", "-m", "comment", "--comment", dropComment}
	if fraction < 1 {
		args = append(args, "-m", "statistic", "--mode", "random", "--probability", strconv.FormatFloat(fraction, 'f', -1, 64))
	}
	_, err := l.Exec(ctx, host, append(args, "-j", "DROP")...)
	return err
}

// findRule returns the `iptables -S` rule carrying comment, split into arguments, or nil.
func findRule(listing, comment string) []string {
	for _, line := range splitLines(listing) {
		args := splitRule(line)
		for i := range args {
			if args[i] == "--comment" && i+1 < len(args) && args[i+1] == comment {
				return args
			}
		}
	}
	return nil
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// splitRule splits an `iptables -S` line into arguments, honouring double quotes.
func splitRule(line string) []string {
	var out []string
	var cur []byte
	inQ, has := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '"':
			inQ, has = !inQ, true
		case c == ' ' && !inQ:
			if has {
				out = append(out, string(cur))
				cur, has = cur[:0], false
			}
		default:
			cur, has = append(cur, c), true
		}
	}
	if has {
		out = append(out, string(cur))
	}
	return out
}

// StopSSHD stops the host's sshd (systemctl stop ssh): new connections are refused at once;
// open sessions live on.
func (l *Lab) StopSSHD(ctx context.Context, host string) error {
	_, err := l.Exec(ctx, host, "systemctl", "stop", "ssh.service")
	return err
}

// StartSSHD undoes StopSSHD.
func (l *Lab) StartSSHD(ctx context.Context, host string) error {
	_, err := l.Exec(ctx, host, "systemctl", "start", "ssh.service")
	return err
}

// KillSSHD SIGKILLs every sshd process of the host, the listener and every session's: open
// connections get EOF. systemd restarts the listener (Restart=on-failure) a moment later.
func (l *Lab) KillSSHD(ctx context.Context, host string) error {
	_, err := l.Exec(ctx, host, "sh", "-c", `p=$(pidof sshd) || exit 0; kill -KILL $p`)
	return err
}
