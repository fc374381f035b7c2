package tasks

import (
	"context"
	"fmt"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
)

// Scheduled etcd snapshots (etcdSnapshots): every master runs kforge-etcd-snapshot (built into
// the bundle from bundle/internal/etcdsnap) from a systemd timer; it snapshots the master's own
// member into hostpath.EtcdSnapshotDir, verified, and keeps the newest. The step
// etcd-snapshots starts the timer once the program has shipped; retire removes it when the
// inventory turns the snapshots off (the snapshots stay); `etcd snapshot --fetch` copies the
// newest to the workstation and `etcd status` says how old each master's last one is.

// startSnapshots enables and starts the timer on every master, restarting it (after systemd
// reloads) when its unit or timer was written.
func startSnapshots(ctx context.Context, t *hop, st *staging, r progress.Reporter) error {
	if err := st.waitShipments(ctx); err != nil { // the program ships after the control plane
		return err
	}
	return t.rc.fleet.Each(ctx, inventory.RoleMaster, func(ctx context.Context, n inventory.Node, h remote.Host) error {
		restart := t.files.wrote(n.Name, func(p string) bool {
			return p == hostpath.EtcdSnapshotTimerPath || p == hostpath.EtcdSnapshotUnitPath
		})
		if _, err := remote.Output(ctx, h, startUnitScript(hostpath.EtcdSnapshotTimer, restart)); err != nil {
			return err
		}
		what := "timer running"
		if restart {
			what = "timer (re)started"
		}
		r(progress.Event{Kind: progress.HostDone, Host: n.Name, Message: fmt.Sprintf("%s: the first snapshot a minute after it started, then every %s", what, t.inv.EtcdSnapshots.Every)})
		return nil
	})
}
