package lab

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
)

// Traits of the hosts users have (issue #31, docs/hosts.md), given to lab hosts after Up. Each
// is a script of lab/traits run on the host as root.

//go:embed traits/no-legacy-iptables.sh
var noLegacyIptables string

// WithoutLegacyIptables makes VM host name a host whose kernel has no legacy iptables, as
// RHEL 10's (lab/traits/no-legacy-iptables.sh). An nspawn host shares this machine's kernel,
// which keeps its modules: it is refused.
func (l *Lab) WithoutLegacyIptables(ctx context.Context, name string) error {
	h, err := l.host(name)
	if err != nil {
		return err
	}
	if !h.VM {
		return fmt.Errorf("lab host %s shares this machine's kernel: only a VM host can lose legacy iptables", name)
	}
	return l.trait(ctx, name, noLegacyIptables)
}

// trait runs a trait's script on host name, its stderr in the error.
func (l *Lab) trait(ctx context.Context, name, script string) error {
	_, err := l.Exec(ctx, name, "sh", "-c", script)
	var ee *ExecError
	if errors.As(err, &ee) {
		return fmt.Errorf("lab host %s: a trait's script failed (%v): %s", name, ee.Err, strings.TrimSpace(ee.Stderr))
	}
	return err
}
