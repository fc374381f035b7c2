package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
)

// The control plane's virtual IP (controlPlaneVIP; kforge-vip, built into the bundle from
// bundle/internal/vip): every master runs kforge-vip, which holds the address while it holds
// the Lease kube-system/kforge-vip and announces it by ARP. The step vip starts it once the
// Lease's RBAC exists (bootstrap) and waits until one master holds the address; the retire
// step removes it when the inventory no longer has a VIP.

// vipWait is how long the vip step waits for a master to hold the address: a new Lease is
// taken within a second of kforge-vip starting, a stale one after its 5 s duration.
const vipWait = time.Minute

// startVIP enables and starts kforge-vip on every master (restarting it for a new unit, binary
// or configuration), then waits until one master says it holds the virtual IP.
func startVIP(ctx context.Context, t *hop, st *staging, r progress.Reporter) error {
	if err := st.waitShipments(ctx); err != nil { // kforge-vip ships after the control plane
		return err
	}
	err := t.rc.fleet.Each(ctx, inventory.RoleMaster, func(ctx context.Context, n inventory.Node, h remote.Host) error {
		restart := vipRestarts(func(pred func(string) bool) bool { return t.files.wrote(n.Name, pred) })
		_, err := remote.Output(ctx, h, startUnitScript(hostpath.VIPUnit, restart))
		return err
	})
	if err != nil {
		return err
	}
	holder, err := waitVIPHeld(ctx, t.rc.fleet.Each, t.inv.ControlPlaneVIP, vipWait)
	if err != nil {
		return err
	}
	r(progress.Event{Kind: progress.HostDone, Host: holder.Node, Message: fmt.Sprintf("holds %s on %s (the others stand by)", t.inv.ControlPlaneVIP, holder.Interface)})
	return nil
}

// vipRestarts says whether kforge-vip restarts on a master: when its unit, configuration or
// binary was written. (It follows its kubeconfig's renewed certificates by itself.)
func vipRestarts(wrote func(pred func(string) bool) bool) bool {
	return wrote(func(p string) bool {
		return p == hostpath.VIPUnitPath || p == hostpath.VIPConfig || p == hostpath.VIPPath
	})
}

// vipState is what kforge-vip writes to hostpath.VIPState.
type vipState struct {
	Node      string `json:"-"`
	Address   string `json:"address"`
	Interface string `json:"interface"`
	Holder    string `json:"holder"`
	Leading   bool   `json:"leading"`
}

// eachFunc is Fleet.Each.
type eachFunc func(ctx context.Context, role inventory.Role, fn func(ctx context.Context, n inventory.Node, h remote.Host) error) error

// readVIPStates reads kforge-vip's state on every master; a master without one (not started
// yet) has a zero state.
func readVIPStates(ctx context.Context, each eachFunc) ([]vipState, error) {
	var mu sync.Mutex
	var out []vipState
	err := each(ctx, inventory.RoleMaster, func(ctx context.Context, n inventory.Node, h remote.Host) error {
		data, err := remote.Output(ctx, h, "cat "+hostpath.VIPState+" 2>/dev/null || true")
		if err != nil {
			return err
		}
		s := vipState{Node: n.Name}
		if len(strings.TrimSpace(string(data))) > 0 {
			if err := json.Unmarshal(data, &s); err != nil {
				return fmt.Errorf("%s: %w", hostpath.VIPState, err)
			}
			s.Node = n.Name
		}
		mu.Lock()
		out = append(out, s)
		mu.Unlock()
		return nil
	})
	slices.SortFunc(out, func(a, b vipState) int { return strings.Compare(a.Node, b.Node) })
	return out, err
}

// waitVIPHeld waits until exactly one master holds vip, and returns its state. It fails after
// wait with what each master said, and where to look.
func waitVIPHeld(ctx context.Context, each eachFunc, vip string, wait time.Duration) (vipState, error) {
	deadline := time.Now().Add(wait)
	for {
		states, err := readVIPStates(ctx, each)
		if err != nil {
			return vipState{}, err
		}
		var holders []vipState
		for _, s := range states {
			if s.Leading && s.Address == vip {
				holders = append(holders, s)
			}
		}
		if len(holders) == 1 {
			return holders[0], nil
		}
		if time.Now().After(deadline) {
			var said []string
			for _, s := range states {
				switch {
				case s.Address == "":
					said = append(said, s.Node+": no state yet")
				case s.Leading:
					said = append(said, s.Node+": holds it")
				default:
					said = append(said, fmt.Sprintf("%s: stands by (Lease holder %q)", s.Node, s.Holder))
				}
			}
			return vipState{}, fmt.Errorf("after %s, %d masters hold the virtual IP %s (%s); want exactly one: see journalctl -u %s on the masters", wait, len(holders), vip, strings.Join(said, "; "), hostpath.VIPUnit)
		}
		select {
		case <-ctx.Done():
			return vipState{}, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
