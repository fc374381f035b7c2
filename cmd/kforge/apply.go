package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/preflight"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/tasks"
)

// ApplyCmd makes the cluster in the inventory real: a new cluster, or an existing one grown to
// match. Running it again changes nothing that is already right.
type ApplyCmd struct {
	AcceptNewHostKeys     bool          `help:"Trust hosts whose SSH key is not yet in known_hosts, and record their keys (trust on first use)."`
	IgnorePreflightErrors []string      `sep:"," placeholder:"CHECK,..." help:"Turn these preflight errors into warnings (names as printed, or 'all')."`
	Timeout               time.Duration `default:"5m" help:"How long to wait for the API server, the nodes and the pods."`
	ResolvConf            string        `placeholder:"FILE" help:"resolv.conf kubelet gives pods (default: the host's /etc/resolv.conf)."`
	ConntrackMaxPerCore   *int32        `placeholder:"N" help:"kube-proxy's conntrack.maxPerCore; 0 leaves the machine-wide conntrack table alone (nested hosts, kforge lab)."`
	Prune                 bool          `help:"Remove the hosts that left the inventory since the last apply, one at a time: drain, remove a master's etcd member, reset the host, delete the node."`
}

func (c *ApplyCmd) Run(ctx context.Context, s *streams, g *Globals, log *slog.Logger) error {
	inv, state, err := loadCluster(g)
	if err != nil {
		return err
	}
	ignore, err := preflight.ParseIgnore(c.IgnorePreflightErrors)
	if err != nil {
		return usageError{err}
	}
	removed, err := removedHosts(inv, state)
	if err != nil {
		return err
	}
	a := tasks.NewApplier(inv, tasks.Options{
		StateDir:            state,
		InventoryDir:        filepath.Dir(g.Inventory),
		Limits:              remote.Limits{Hosts: g.Concurrency},
		AcceptNewHostKeys:   c.AcceptNewHostKeys,
		Ignore:              ignore,
		ResolvConf:          c.ResolvConf,
		ConntrackMaxPerCore: c.ConntrackMaxPerCore,
		Timeout:             c.Timeout,
		Removed:             removed,
		Prune:               c.Prune,
		Logger:              log,
	})
	defer a.Close()
	p := newEventPrinter(s, g)
	start := time.Now()
	timings, err := tasks.Run(ctx, a.Steps(), p.report, time.Now)
	if err != nil {
		return err
	}
	p.summary(fmt.Sprintf("cluster %s is ready: %d nodes; admin kubeconfig %s (kforge kubeconfig prints it)", inv.Name, len(inv.Masters)+len(inv.Workers), tasks.AdminKubeconfigPath(state)), time.Since(start), timings)
	return nil
}

// removedHosts are the hosts that left the inventory since the last apply (tasks.Removed); an
// inventory that keeps none of the cluster's masters is refused as invalid input.
func removedHosts(c *inventory.Cluster, state string) ([]inventory.Node, error) {
	removed, err := tasks.Removed(c, state)
	if nml := (*tasks.NoMasterLeftError)(nil); errors.As(err, &nml) {
		return nil, usageError{err}
	}
	return removed, err
}

// usageError is a bad flag value: nothing was changed.
type usageError struct{ error }

func (usageError) ExitCode() int { return exitInvalid }

// eventPrinter turns task events into a line per step and per host on stderr, or into JSON
// events on stdout with --output json.
type eventPrinter struct {
	mu   sync.Mutex
	s    *streams
	json bool
	enc  *json.Encoder
}

func newEventPrinter(s *streams, g *Globals) *eventPrinter {
	return &eventPrinter{s: s, json: g.Output == "json", enc: json.NewEncoder(s.Out)}
}

func (p *eventPrinter) report(e tasks.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		_ = p.enc.Encode(e)
		return
	}
	w := p.s.Err
	switch e.Kind {
	case tasks.TaskStarted:
		fmt.Fprintf(w, "• %-15s %s\n", e.Task, e.Message)
	case tasks.TaskDone:
		fmt.Fprintf(w, "✓ %-15s %s\n", e.Task, round(e.Duration))
	case tasks.TaskFailed:
		fmt.Fprintf(w, "✗ %-15s failed after %s\n", e.Task, round(e.Duration))
	case tasks.HostDone:
		d := ""
		if e.Duration > 0 {
			d = " (" + round(e.Duration) + ")"
		}
		fmt.Fprintf(w, "    %-13s %s%s\n", e.Host, e.Message, d)
	default:
		if e.Host != "" {
			fmt.Fprintf(w, "    %-13s %s\n", e.Host, e.Message)
		} else {
			fmt.Fprintf(w, "    %s\n", e.Message)
		}
	}
}

func (p *eventPrinter) summary(msg string, total time.Duration, timings []tasks.Timing) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		_ = p.enc.Encode(map[string]any{"event": "summary", "message": msg, "duration": total, "timings": timings})
		return
	}
	fmt.Fprintf(p.s.Err, "\n%s\ntotal %s:", msg, round(total))
	for _, t := range timings {
		fmt.Fprintf(p.s.Err, " %s %s,", t.Task, round(t.Duration))
	}
	fmt.Fprintln(p.s.Err)
}

func round(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Millisecond).String()
	}
}
