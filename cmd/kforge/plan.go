package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

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

func (p PlanCmd) Run(ctx context.Context, s *streams, g *Globals, log *slog.Logger, dl *debugLog) error {
	c, state, err := loadCluster(g)
	if err != nil {
		return err
	}
	dl.UseDir(state.Logs())
	command := "apply"
	var removed []inventory.Node
	var steps []tasks.Task
	ignore, err := preflight.ParseIgnore(p.IgnorePreflightErrors)
	if err != nil {
		return usageError{err}
	}
	o := taskOptions(state, g, log)
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
	for _, n := range c.Nodes() {
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
		if _, err := io.WriteString(s.Out, "\n"+diffText(diff)); err != nil {
			return err
		}
		return p.exit(diff)
	}
	fmt.Fprintf(s.Out, "\nkforge %s will run:\n", command)
	_, err = io.WriteString(s.Out, stepTable(steps, terminalWidth(s.Out)))
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

// diffText is the diff as text: what apply would change, host by host, then the API objects,
// then one line that counts it.
func diffText(d *tasks.Diff) string {
	var b strings.Builder
	indent := func(text, prefix string) {
		for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
			b.WriteString(prefix + l + "\n")
		}
	}
	if len(d.Preflight) > 0 {
		b.WriteString("apply would stop at preflight:\n")
		for _, p := range d.Preflight {
			indent(p, "    ")
		}
		b.WriteString("\n")
	}
	if d.Rotation != "" {
		b.WriteString("CA rotation in progress\n")
		indent(d.Rotation, "    ")
		b.WriteString("\n")
	}
	if d.Upgrade != "" {
		b.WriteString("upgrade\n")
		indent(d.Upgrade, "    ")
		b.WriteString("\n")
	}
	if len(d.Certificates) > 0 || d.BootstrapToken != "" {
		b.WriteString("state dir\n")
		if d.NewCluster {
			fmt.Fprintf(&b, "    created  the cluster's CAs, certificates and keys (%d)\n", len(d.Certificates))
		} else {
			for _, c := range d.Certificates {
				fmt.Fprintf(&b, "    %-8s %s: %s\n", c.Action, c.Key, c.Reason)
			}
		}
		if d.BootstrapToken != "" {
			fmt.Fprintf(&b, "    %-8s bootstrap token\n", d.BootstrapToken)
		}
		b.WriteString("\n")
	}
	for _, h := range d.Hosts {
		fmt.Fprintf(&b, "%s (%s)\n", h.Host, h.Role)
		for _, n := range h.Node {
			fmt.Fprintf(&b, "    node: %s\n", n)
		}
		if u := h.Upload; u != nil && len(u.Files)+len(u.Images) > 0 {
			if u.FromMasters {
				fmt.Fprintf(&b, "    from the masters' registries (uploaded only what they lack): %s\n", uploadSummary(u))
			} else {
				fmt.Fprintf(&b, "    upload from the bundle: %s\n", uploadSummary(u))
			}
		}
		if u := h.Upload; u != nil && len(u.Pin) > 0 {
			fmt.Fprintf(&b, "    pin %s against kubelet's image garbage collection: %s\n", plural(len(u.Pin), "image"), strings.Join(u.Pin, ", "))
		}
		for _, f := range h.Files {
			line := fmt.Sprintf("    %-6s %s", f.Action, f.Path)
			if f.Note != "" {
				line += " (" + f.Note + ")"
			}
			b.WriteString(line + "\n")
			if f.Diff != "" {
				indent(f.Diff, "        ")
			}
		}
		if len(h.Restarts) > 0 {
			fmt.Fprintf(&b, "    then: %s\n", strings.Join(h.Restarts, ", "))
		}
		b.WriteString("\n")
	}
	for _, name := range slices.Sorted(maps.Keys(d.Unreachable)) {
		fmt.Fprintf(&b, "%s: unknown, it did not answer: %s\n\n", name, d.Unreachable[name])
	}
	switch {
	case d.NewCluster:
		b.WriteString("API objects: a new cluster, every object is created\n\n")
	case d.APIUnknown != "":
		fmt.Fprintf(&b, "API objects: unknown, %s\n\n", d.APIUnknown)
	}
	if len(d.Objects) > 0 || len(d.Rollouts) > 0 {
		b.WriteString("API objects (server-side dry run)\n")
		for _, o := range d.Objects {
			name := o.Name
			if o.Namespace != "" {
				name = o.Namespace + "/" + o.Name
			}
			fmt.Fprintf(&b, "    %-8s %s %s\n", o.Action, o.Kind, name)
		}
		for _, r := range d.Rollouts {
			fmt.Fprintf(&b, "    %s\n", r)
		}
		b.WriteString("\n")
	}
	for _, r := range d.Removed {
		fmt.Fprintf(&b, "%s (no longer in the inventory): %s\n\n", r.Host, r.Action)
	}
	switch n := d.Changes(); {
	case len(d.Preflight) > 0:
		fmt.Fprintf(&b, "Apply would stop at preflight (%s above) and change nothing; fix them first.\n", plural(len(d.Preflight), "error"))
	case n == 0 && d.Complete():
		b.WriteString("No changes: apply would change nothing.\n")
	case n == 0:
		b.WriteString("No changes in what could be seen; the parts marked unknown were not.\n")
	default:
		fmt.Fprintf(&b, "Plan: %s, %s, %s to change.\n", plural(len(d.Hosts), "host"), plural(len(d.Certificates), "certificate"), plural(len(d.Objects), "API object"))
	}
	return b.String()
}

func uploadSummary(u *tasks.Upload) string {
	what := append(slices.Clone(u.Files), u.Images...)
	list := strings.Join(what, ", ")
	if len(what) > 4 {
		list = strings.Join(what[:4], ", ") + fmt.Sprintf(" +%d more", len(what)-4)
	}
	return fmt.Sprintf("%s, %s, %d MiB (%s)", plural(len(u.Files), "file"), plural(len(u.Images), "image"), u.Bytes>>20, list)
}

// stepTable lists the steps, one block each: number, name, and the description wrapped to fit
// width columns, then where the step works ([hosts], [workstation], [api]), kept on one line.
func stepTable(steps []tasks.Task, width int) string {
	nameWidth := 0
	for _, t := range steps {
		nameWidth = max(nameWidth, len(t.Name))
	}
	indent := 5 + nameWidth + 2 // "%3d. " + name + two spaces
	var b strings.Builder
	for i, t := range steps {
		where := string(t.Scope)
		if t.Scope == tasks.OnHosts {
			where = strings.Join(t.Hosts, ", ")
			if len(t.Hosts) > 5 {
				where = fmt.Sprintf("%s +%d more", strings.Join(t.Hosts[:4], ", "), len(t.Hosts)-4)
			}
		}
		avail := max(width-indent, 30)
		lines, where := wrap(t.Description, avail), "["+where+"]"
		if last := lines[len(lines)-1]; utf8.RuneCountInString(last)+1+utf8.RuneCountInString(where) <= avail {
			lines[len(lines)-1] = last + " " + where
		} else {
			lines = append(lines, where)
		}
		fmt.Fprintf(&b, "%3d. %-*s  %s\n", i+1, nameWidth, t.Name, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(&b, "%s%s\n", strings.Repeat(" ", indent), l)
		}
	}
	return b.String()
}

// wrap breaks s into lines of at most width characters at spaces (a longer word gets a line of
// its own).
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	return append(lines, line)
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
