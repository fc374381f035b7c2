package lab

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"
)

// Traits of the hosts users have (issue #31, docs/hosts.md), given to lab hosts after Up. Each
// is a script of lab/traits run on the host as root, its arguments after it; the packages they
// need (systemd-resolved, firewalld, ufw, sudo) are in the base rootfs, disabled.

//go:embed traits/*.sh
var traitScripts embed.FS

// NATAddr is the address every host's NAT NIC gets (WithNATNIC), as Vagrant's 10.0.2.15 is on
// every box: one of the lab's range that no lab host is given.
const NATAddr = "198.51.100.250"

// WithoutLegacyIptables makes VM host name a host whose kernel has no legacy iptables, as
// RHEL 10's (traits/no-legacy-iptables.sh). An nspawn host shares this machine's kernel, which
// keeps its modules: it is refused.
func (l *Lab) WithoutLegacyIptables(ctx context.Context, name string) error {
	h, err := l.host(name)
	if err != nil {
		return err
	}
	if !h.VM {
		return fmt.Errorf("lab host %s shares this machine's kernel: only a VM host can lose legacy iptables", name)
	}
	return l.trait(ctx, name, "no-legacy-iptables")
}

// WithResolved gives host name Ubuntu's resolver: systemd-resolved's stub in /etc/resolv.conf,
// upstream (a DNS server's address) in /run/systemd/resolve/resolv.conf.
func (l *Lab) WithResolved(ctx context.Context, name, upstream string) error {
	return l.trait(ctx, name, "resolved", upstream)
}

// WithFirewalld gives host name RHEL's firewall: firewalld in its default zone, public.
func (l *Lab) WithFirewalld(ctx context.Context, name string) error {
	return l.trait(ctx, name, "firewalld")
}

// WithUFW gives host name Ubuntu's firewall: ufw enabled, SSH let in.
func (l *Lab) WithUFW(ctx context.Context, name string) error {
	return l.trait(ctx, name, "ufw")
}

// WithHostname gives host name another OS hostname.
func (l *Lab) WithHostname(ctx context.Context, name, hostname string) error {
	return l.trait(ctx, name, "hostname", hostname)
}

// WithSudoUser gives host name a login user with the lab's key, whose sudo asks no password and
// has RHEL's secure_path (no /usr/local/bin).
func (l *Lab) WithSudoUser(ctx context.Context, name, user string) error {
	return l.trait(ctx, name, "sudo-user", user)
}

// WithNATNIC gives host name a second interface, nat0, holding NATAddr and the default route,
// as Vagrant's first NIC does; the inventory's address stays on the lab NIC.
func (l *Lab) WithNATNIC(ctx context.Context, name string) error {
	return l.trait(ctx, name, "nat-nic", NATAddr)
}

// trait runs traits/script.sh on host name with args, its stderr in the error.
func (l *Lab) trait(ctx context.Context, name, script string, args ...string) error {
	body, err := traitScripts.ReadFile("traits/" + script + ".sh")
	if err != nil {
		return err
	}
	_, err = l.Exec(ctx, name, append([]string{"sh", "-c", string(body), script}, args...)...)
	var ee *ExecError
	if errors.As(err, &ee) {
		return fmt.Errorf("lab host %s: trait %s failed (%v): %s", name, script, ee.Err, strings.TrimSpace(ee.Stderr))
	}
	return err
}
