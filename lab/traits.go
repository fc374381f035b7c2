package lab

import (
	"context"
	_ "embed"
	"fmt"
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
	_, err = l.Exec(ctx, name, "sh", "-c", noLegacyIptables)
	return err
}
