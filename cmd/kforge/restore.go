package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/kforge/kforge/preflight"
	"github.com/kforge/kforge/tasks"
)

// RestoreCmd rebuilds the control plane from an etcd snapshot on the inventory's masters (or etcd hosts).
type RestoreCmd struct {
	Snapshot              string        `required:"" type:"existingfile" placeholder:"FILE" help:"The etcd snapshot (kforge etcd snapshot keeps them in the state dir's snapshots/)."`
	Force                 bool          `help:"Restore although etcd still has quorum: what it holds since the snapshot is lost."`
	AcceptNewHostKeys     bool          `help:"Trust hosts whose SSH key is not yet in known_hosts, and record their keys (trust on first use)."`
	IgnorePreflightErrors []string      `sep:"," placeholder:"CHECK,..." help:"Turn these preflight errors into warnings (names as printed, or 'all')."`
	Timeout               time.Duration `default:"5m" help:"How long to wait for the API server, the nodes and the pods."`
}

func (c *RestoreCmd) Run(ctx context.Context, s *streams, g *Globals, log *slog.Logger, dl *debugLog) (err error) {
	ignore, err := preflight.ParseIgnore(c.IgnorePreflightErrors)
	if err != nil {
		return usageError{err}
	}
	run, err := startClusterRun(ctx, "restore", s, g, log, dl)
	if err != nil {
		return err
	}
	defer run.close(ctx, &err)
	// The lost masters are hosts of the last apply that the inventory no longer lists; an
	// inventory of all-new masters is the point of a restore, not an error.
	removed, err := removedEvenIfNoMasterLeft(run.inv, run.state)
	if err != nil {
		return err
	}
	o := run.options(g, log)
	o.AcceptNewHostKeys, o.Ignore, o.Timeout, o.Removed = c.AcceptNewHostKeys, ignore, c.Timeout, removed
	a := tasks.NewRestore(run.inv, o, tasks.RestoreOptions{Snapshot: c.Snapshot, Force: c.Force})
	defer a.Close()
	timings, err := run.run(ctx, a.Steps())
	if err != nil {
		return a.Explain(err)
	}
	run.printer.Summary(fmt.Sprintf("cluster %s restored from %s onto %d masters: %d nodes; admin kubeconfig %s", run.inv.Name, c.Snapshot, len(run.inv.Masters), len(run.inv.Nodes()), run.state.AdminKubeconfig()), time.Since(run.start), timings)
	return nil
}
