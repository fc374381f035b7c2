package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/kforge/kforge/preflight"
	"github.com/kforge/kforge/tasks"
)

// ApplyCmd makes the cluster in the inventory real: a new cluster, or an existing one grown to
// match. Running it again changes nothing that is already right.
type ApplyCmd struct {
	AcceptNewHostKeys     bool          `help:"Trust hosts whose SSH key is not yet in known_hosts, and record their keys (trust on first use)."`
	IgnorePreflightErrors []string      `sep:"," placeholder:"CHECK,..." help:"Turn these preflight errors into warnings (names as printed, or 'all')."`
	Timeout               time.Duration `default:"5m" help:"How long to wait for the API server, the nodes and the pods."`
	DrainTimeout          time.Duration `placeholder:"DURATION" help:"How long a drain (upgrade, --prune) may wait for its pods to leave, PodDisruptionBudgets respected; then the node stays cordoned and apply stops, naming the pods (default: --timeout)."`
	Prune                 bool          `help:"Remove the hosts that left the inventory since the last apply, one at a time: drain, remove a master's etcd member, reset the host, delete the node."`
	Force                 bool          `help:"Upgrade the cluster even when it is not healthy (nodes not Ready, kube-system workloads not ready)."`
	WorkerBatch           int           `default:"1" placeholder:"N" help:"Upgrade this many workers at once (cordon, drain, kubelet, uncordon); mind your PodDisruptionBudgets and spare capacity."`
	movedToInventory
}

// movedToInventory are former flags whose settings shape the cluster: they live in the
// inventory now, because a flag left out of a later run would change the cluster back.
// Passing one is refused with where the setting went.
type movedToInventory struct {
	ResolvConf          string `hidden:"" help:"Moved to the inventory: kubelet.resolvConf."`
	ConntrackMaxPerCore *int32 `hidden:"" help:"Moved to the inventory: kubeProxy.conntrackMaxPerCore."`
}

func (m movedToInventory) check() error {
	if m.ResolvConf != "" {
		return usageError{fmt.Errorf("--resolv-conf moved to the inventory: set kubelet.resolvConf: %s (a flag left out of a later run would change the cluster back)", m.ResolvConf)}
	}
	if m.ConntrackMaxPerCore != nil {
		return usageError{fmt.Errorf("--conntrack-max-per-core moved to the inventory: set kubeProxy.conntrackMaxPerCore: %d (a flag left out of a later run would change the cluster back)", *m.ConntrackMaxPerCore)}
	}
	return nil
}

func (c *ApplyCmd) Run(ctx context.Context, s *streams, g *Globals, log *slog.Logger, dl *debugLog) (err error) {
	if err := c.movedToInventory.check(); err != nil {
		return err
	}
	if c.WorkerBatch < 1 {
		return usageError{fmt.Errorf("--worker-batch %d: upgrade at least 1 worker at a time", c.WorkerBatch)}
	}
	ignore, err := preflight.ParseIgnore(c.IgnorePreflightErrors)
	if err != nil {
		return usageError{err}
	}
	run, err := startClusterRun(ctx, "apply", s, g, log, dl)
	if err != nil {
		return err
	}
	defer run.close(ctx, &err)
	removed, err := removedHosts(run.inv, run.state)
	if err != nil {
		return err
	}
	o := run.options(g, log)
	o.AcceptNewHostKeys, o.Ignore, o.Timeout, o.DrainTimeout = c.AcceptNewHostKeys, ignore, c.Timeout, c.DrainTimeout
	o.Removed, o.Prune, o.Force, o.WorkerBatch = removed, c.Prune, c.Force, c.WorkerBatch
	if o.EtcdFrom, err = etcdMove(run.inv, run.state, c.Prune); err != nil {
		return err
	}
	a := tasks.NewApply(run.inv, o)
	defer a.Close()
	timings, err := run.run(ctx, a.Steps())
	if err != nil {
		return a.Explain(err)
	}
	sent, received := a.Traffic()
	log.Debug("ssh traffic", "sent", sent, "received", received)
	run.printer.Summary(fmt.Sprintf("cluster %s is ready: %d nodes; admin kubeconfig %s (kforge kubeconfig prints it); SSH sent %s, received %s", run.inv.Name, len(run.inv.Nodes()), run.state.AdminKubeconfig(), bytesString(sent), bytesString(received)), time.Since(run.start), timings)
	return nil
}
