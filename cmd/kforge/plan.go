package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/tasks"
	"golang.org/x/term"
)

// PlanCmd shows the validated cluster and what apply would do, changing nothing.
type PlanCmd struct {
	Prune   bool   `help:"Show what apply --prune would do."`
	Restore string `placeholder:"SNAPSHOT" help:"Show what kforge restore --snapshot SNAPSHOT would do instead of apply."`
}

type planHost struct {
	Name    string            `json:"name"`
	Role    inventory.Role    `json:"role"`
	Address string            `json:"address"`
	NodeIP  string            `json:"nodeIP"`
	Labels  map[string]string `json:"labels,omitempty"`
}

func (p PlanCmd) Run(s *streams, g *Globals, dl *debugLog) error {
	c, state, err := loadCluster(g)
	if err != nil {
		return err
	}
	dl.UseDir(state.Logs())
	command := "apply"
	var removed []inventory.Node
	var steps []tasks.Task
	if p.Restore != "" {
		// A restore's inventory may keep none of the masters: they are the lost ones.
		command = "restore"
		if removed, err = removedEvenIfNoMasterLeft(c, state); err != nil {
			return err
		}
		steps = tasks.Tasks(tasks.NewRestore(c, tasks.Options{State: state, Removed: removed}, tasks.RestoreOptions{Snapshot: p.Restore}).Steps())
	} else {
		if removed, err = removedHosts(c, state); err != nil {
			return err
		}
		steps = tasks.ApplyTasks(c, tasks.Options{State: state, Removed: removed, Prune: p.Prune})
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
		return json.NewEncoder(s.Out).Encode(map[string]any{
			"command":           command,
			"cluster":           c.Name,
			"kubernetesVersion": c.KubernetesVersion,
			"apiEndpoint":       pki.Endpoint(c),
			"networking":        c.Networking,
			"hosts":             hosts,
			"removedHosts":      gone,
			"tasks":             steps,
		})
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
	fmt.Fprintf(s.Out, "\nkforge %s will run:\n", command)
	_, err = io.WriteString(s.Out, stepTable(steps, terminalWidth(s.Out)))
	return err
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
