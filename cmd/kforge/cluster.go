package main

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/state"
	"github.com/kforge/kforge/tasks"
)

// loadInventory loads the -i inventory; an invalid one exits with exitInvalid.
func loadInventory(g *Globals) (*inventory.Cluster, error) {
	c, err := inventory.Load(g.Inventory)
	if es, ok := err.(inventory.Errors); ok {
		return nil, invalidInventory{es}
	}
	return c, err
}

// loadCluster loads the -i inventory and opens its state dir (--state-dir, or the default for
// the cluster's name) for a command that only reads it, unless lock; close it when done.
// With -i kube://NAMESPACE/NAME the inventory is that KforgeCluster's spec and credentials
// (objectInventory), and the state dir, unless given, its state in the management cluster.
func loadCluster(ctx context.Context, g *Globals, lock bool) (*inventory.Cluster, *clusterState, error) {
	if ns, name, ok, err := kubeRef("-i", g.Inventory); err != nil {
		return nil, nil, usageError{err}
	} else if ok {
		return objectInventory(ctx, g, ns, name, lock)
	}
	c, err := loadInventory(g)
	if err != nil {
		return nil, nil, err
	}
	d, err := openState(ctx, g, c, lock)
	if err == nil {
		d.inventoryDir = filepath.Dir(g.Inventory)
	}
	return c, d, err
}

// clusterRun is a command that changes a cluster (apply, reset): it holds the state dir's lock
// from start to end, logs into the state dir, prints its steps' events and records the run.
type clusterRun struct {
	inv     *inventory.Cluster
	state   state.Dir
	held    *clusterState
	printer *progress.Printer
	record  *state.Run
	start   time.Time
}

// startClusterRun loads the inventory and takes its state dir for command.
func startClusterRun(ctx context.Context, command string, s *streams, g *Globals, log *slog.Logger, dl *debugLog) (*clusterRun, error) {
	inv, d, err := loadCluster(ctx, g, true)
	if err != nil {
		return nil, err
	}
	dl.UseDir(d.logs)
	now := time.Now()
	return &clusterRun{inv: inv, state: d.Dir, held: d, start: now, record: state.NewRun(command, now),
		printer: progress.NewPrinter(s.Out, s.Err, g.Output == "json", log)}, nil
}

// options are the tasks' options every cluster command shares.
func (r *clusterRun) options(g *Globals, log *slog.Logger) tasks.Options {
	return taskOptions(r.held, g, log)
}

// taskOptions are the tasks' options from the global flags, for a cluster's state dir.
func taskOptions(d *clusterState, g *Globals, log *slog.Logger) tasks.Options {
	return tasks.Options{State: d.Dir, InventoryDir: d.inventoryDir, Limits: remote.Limits{Hosts: g.Concurrency}, Getenv: d.getenv, Logger: log}
}

// run runs steps, reporting each event and recording the run in the state dir. A state kept
// in a management cluster is written back after each step; the run ends when that fails or
// when another run takes its lease.
func (r *clusterRun) run(ctx context.Context, steps []tasks.Step) ([]progress.Timing, error) {
	var held tasks.StateHolder
	if store := r.held.store; store != nil {
		held = store
	}
	timings, err := tasks.RunHeld(ctx, steps, r.record.Report(r.printer.Report), time.Now, held)
	if serr := r.state.Save(r.record, time.Now(), err); serr != nil && err == nil {
		err = serr
	}
	return timings, err
}

// close ends the run's hold on the state dir; a state kept in a management cluster is written
// back, and an error doing so is returned.
func (r *clusterRun) close(ctx context.Context, err *error) {
	if cerr := r.held.close(ctx); cerr != nil && *err == nil {
		*err = cerr
	}
}

// removedHosts are the hosts that left the inventory since the last apply (tasks.Removed); an
// inventory that keeps none of the cluster's masters is refused as invalid input.
func removedHosts(c *inventory.Cluster, d state.Dir) ([]inventory.Node, error) {
	removed, err := tasks.Removed(c, d)
	if nml := (*tasks.NoMasterLeftError)(nil); errors.As(err, &nml) {
		return nil, usageError{err}
	}
	return removed, err
}

// etcdMove is where the last apply ran etcd's members (tasks.EtcdMove); an inventory that moves
// etcd in a way apply refuses is invalid input. removedHosts read the record already.
func etcdMove(c *inventory.Cluster, d state.Dir, prune bool) (inventory.Role, error) {
	from, err := tasks.EtcdMove(c, d, prune)
	if err != nil {
		return "", usageError{err}
	}
	return from, nil
}

// removedEvenIfNoMasterLeft are the hosts that left the inventory since the last apply, for
// the commands to which an inventory without any recorded master is no error: reset (it resets
// them all) and restore (its new masters replace the lost ones).
func removedEvenIfNoMasterLeft(c *inventory.Cluster, d state.Dir) ([]inventory.Node, error) {
	removed, err := tasks.Removed(c, d)
	if nml := (*tasks.NoMasterLeftError)(nil); err != nil && !errors.As(err, &nml) {
		return nil, err
	}
	return removed, nil
}

// usageError is a bad flag value or inventory: nothing was changed.
type usageError struct{ error }

func (usageError) ExitCode() int { return exitInvalid }
