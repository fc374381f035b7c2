package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/preflight"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/tasks"
)

// PlanCmd shows what apply would change: it connects to the hosts and the API read-only and
// diffs (tasks.Plan). --offline shows the validated cluster and apply's steps without
// connecting.
type PlanCmd struct {
	Prune                 bool     `help:"Show what apply --prune would do."`
	Restore               string   `placeholder:"SNAPSHOT" help:"Show the steps kforge restore --snapshot SNAPSHOT would run instead of apply (offline)."`
	Offline               bool     `help:"Do not connect: show the validated cluster and apply's steps only."`
	DetailedExitcode      bool     `help:"Exit 4 when apply would change something or a part could not be seen, 3 when it would stop at preflight, 0 when it would change nothing (1: plan failed, 2: bad input)."`
	IgnorePreflightErrors []string `sep:"," placeholder:"CHECK,..." help:"As for apply: show these preflight errors as warnings (names as printed, or 'all')."`
}

// changesPending ends a plan --detailed-exitcode that found changes: exitChanges, no error printed.
type changesPending struct{}

func (changesPending) Error() string { return "apply would change the cluster" }
func (changesPending) ExitCode() int { return exitChanges }

type planHost struct {
	Name    string            `json:"name"`
	Role    inventory.Role    `json:"role"`
	Address string            `json:"address"`
	NodeIP  string            `json:"nodeIP"`
	Labels  map[string]string `json:"labels,omitempty"`
}

func (p PlanCmd) Run(ctx context.Context, s *streams, g *Globals, log *slog.Logger, dl *debugLog) (err error) {
	c, held, err := loadCluster(ctx, g, false)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := held.close(ctx); err == nil {
			err = cerr
		}
	}()
	state := held.Dir
	dl.UseDir(held.logs)
	command := "apply"
	var removed []inventory.Node
	var steps []tasks.Task
	ignore, err := preflight.ParseIgnore(p.IgnorePreflightErrors)
	if err != nil {
		return usageError{err}
	}
	o := taskOptions(held, g, log)
	o.Prune, o.Ignore = p.Prune, ignore
	if p.Restore != "" {
		// A restore's inventory may keep none of the masters: they are the lost ones.
		command = "restore"
		if removed, err = removedEvenIfNoMasterLeft(c, state); err != nil {
			return err
		}
		o.Removed = removed
		steps = tasks.Tasks(tasks.NewRestore(c, o, tasks.RestoreOptions{Snapshot: p.Restore}).Steps())
	} else {
		if removed, err = removedHosts(c, state); err != nil {
			return err
		}
		o.Removed = removed
		if o.EtcdFrom, err = etcdMove(c, state, p.Prune); err != nil {
			return err
		}
		steps = tasks.ApplyTasks(c, o)
	}
	var diff *tasks.Diff
	if !p.Offline && p.Restore == "" {
		plan := tasks.NewPlan(c, o)
		defer plan.Close()
		q := s.queryProgress()
		printer := progress.NewPrinter(q.Out, q.Err, g.Output == "json", log)
		if _, err := tasks.Run(ctx, plan.Steps(), printer.Report, time.Now); err != nil {
			return err
		}
		diff = &plan.Diff
	}
	var hosts []planHost
	for _, n := range c.Hosts() {
		hosts = append(hosts, planHost{n.Name, n.Role, n.Address, n.NodeIP(), n.Labels})
	}
	var gone []planHost
	for _, n := range removed {
		gone = append(gone, planHost{n.Name, n.Role, n.Address, n.NodeIP(), n.Labels})
	}
	if g.Output == "json" {
		doc := map[string]any{
			"command":           command,
			"cluster":           c.Name,
			"kubernetesVersion": c.KubernetesVersion,
			"apiEndpoint":       pki.Endpoint(c),
			"networking":        c.Networking,
			"hosts":             hosts,
			"removedHosts":      gone,
			"tasks":             steps,
		}
		if diff != nil {
			doc["diff"], doc["changes"], doc["complete"] = diff, diff.Changes(), diff.Complete()
		}
		if err := writeDocument(s, doc); err != nil {
			return err
		}
		return p.exit(diff)
	}

	w := tabwriter.NewWriter(s.Out, 0, 4, 2, ' ', 0)
	n := c.Networking
	fmt.Fprintf(w, "Cluster %s\tKubernetes %s\n", c.Name, c.KubernetesVersion)
	fmt.Fprintf(w, "  API endpoint\t%s\n", pki.Endpoint(c))
	fmt.Fprintf(w, "  networking\tpods %s (/%d per node), services %s, DNS %s, pod network %s\n", n.PodSubnet, n.NodeCIDRMaskSize, n.ServiceSubnet, n.DNSDomain, n.Plugin)
	fmt.Fprintf(w, "  PKI\t%s, certificates %s, CAs %s\n", c.PKI.KeyAlgorithm, c.PKI.CertValidity, c.PKI.CAValidity)
	if c.Bundle != "" {
		fmt.Fprintf(w, "  bundle\t%s\n", c.Bundle)
	}
	for _, h := range hosts {
		fmt.Fprintf(w, "  %s\t%s\t%s\n", h.Role, h.Name, h.Address)
	}
	for _, h := range gone {
		what := "no longer in the inventory; still in the cluster"
		if p.Restore != "" {
			what = "no longer in the inventory: lost; its node is deleted"
		}
		fmt.Fprintf(w, "  %s\t%s\t%s (%s)\n", h.Role, h.Name, h.Address, what)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if diff != nil {
		if _, err := io.WriteString(s.Out, "\n"+diff.Text()); err != nil {
			return err
		}
		return p.exit(diff)
	}
	fmt.Fprintf(s.Out, "\nkforge %s will run:\n", command)
	_, err = io.WriteString(s.Out, tasks.StepTable(steps, terminalWidth(s.Out)))
	return err
}

// queryProgress are the streams a query command (plan, certs check, etcd status) reports its
// steps' progress to: stderr for both. Its stdout carries its answer alone, with --output json
// one JSON document (writeDocument), as kubectl's -o json: a program decodes stdout as one
// value. Commands that change a cluster (apply, reset, etcd snapshot, …) print their events on
// stdout instead: there the events are the output.
func (s *streams) queryProgress() *streams { return &streams{Out: s.Err, Err: s.Err} }

// writeDocument prints a query command's answer with --output json: one JSON document on stdout.
func writeDocument(s *streams, doc any) error { return json.NewEncoder(s.Out).Encode(doc) }

// wouldStop ends a plan --detailed-exitcode whose preflight found errors: apply would stop
// there (preflight.ExitCode), so "no changes" would be a false promise.
type wouldStop struct{ errors int }

func (w wouldStop) Error() string {
	return fmt.Sprintf("apply would stop at preflight: %s, listed above; fix them (or ignore a check with apply --ignore-preflight-errors)", plural(w.errors, "error"))
}
func (wouldStop) ExitCode() int { return preflight.ExitCode }

// exit is plan's answer for --detailed-exitcode: wouldStop when apply would stop at preflight,
// changesPending when it would change something or a part of the cluster could not be seen.
func (p PlanCmd) exit(d *tasks.Diff) error {
	switch {
	case !p.DetailedExitcode || d == nil:
		return nil
	case len(d.Preflight) > 0:
		return wouldStop{len(d.Preflight)}
	case d.Changes() > 0 || !d.Complete():
		return changesPending{}
	}
	return nil
}

// terminalWidth is the width of the terminal w writes to, or 100 when it is not one.
func terminalWidth(w io.Writer) int {
	if f, ok := w.(*os.File); ok {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
			return cols
		}
	}
	return 100
}
