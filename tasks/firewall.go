package tasks

import (
	"context"
	"strings"

	"github.com/kforge/kforge/firewall"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
)

// openFirewalls is apply's firewall step (firewall: open): on every host whose firewall
// (firewalld, ufw) blocks a port its role needs, or does not let in the pod and Service subnets
// (firewall.Untrusted), it opens them for good (scripts/firewall-open.sh).
// Hosts without a firewall, or whose firewall already lets them in, are left alone.
func (rc *runContext) openFirewalls(ctx context.Context, r progress.Reporter) error {
	return rc.fleet.Each(ctx, "", func(ctx context.Context, n inventory.Node, h remote.Host) error {
		f := rc.fleet.Facts(n.Name)
		if f == nil {
			return nil
		}
		ports := firewall.Blocked(f.Firewall, firewall.For(rc.inv, n.Role))
		sources := firewall.Untrusted(f.Firewall, firewall.Sources(rc.inv, n.Role))
		if len(ports) == 0 && len(sources) == 0 {
			return nil
		}
		out, err := remote.Output(ctx, h, firewall.Open(f.Firewall, ports, sources))
		if err != nil {
			return err
		}
		r(progress.Event{Kind: progress.Info, Host: n.Name, Message: f.Firewall.Kind + ": " + strings.Join(strings.Split(strings.TrimSpace(string(out)), "\n"), ", ")})
		return nil
	})
}
