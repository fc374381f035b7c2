package tasks

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// Text is the diff as `kforge plan` prints it: what apply would change, host by host, then the
// API objects, then one line that counts it.
func (d Diff) Text() string {
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
	if d.KeyRotation != "" {
		b.WriteString("encryption key rotation in progress\n")
		indent(d.KeyRotation, "    ")
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
				fmt.Fprintf(&b, "    from the masters' registries (uploaded only what they lack): %s\n", u.summary())
			} else {
				fmt.Fprintf(&b, "    upload from the bundle: %s\n", u.summary())
			}
		}
		if u := h.Upload; u != nil && len(u.Pin) > 0 {
			fmt.Fprintf(&b, "    pin %s against kubelet's image garbage collection: %s\n", count(len(u.Pin), "image"), strings.Join(u.Pin, ", "))
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
		fmt.Fprintf(&b, "Apply would stop at preflight (%s above) and change nothing; fix them first.\n", count(len(d.Preflight), "error"))
	case n == 0 && d.Complete():
		b.WriteString("No changes: apply would change nothing.\n")
	case n == 0:
		b.WriteString("No changes in what could be seen; the parts marked unknown were not.\n")
	default:
		fmt.Fprintf(&b, "Plan: %s, %s, %s to change.\n", count(len(d.Hosts), "host"), count(len(d.Certificates), "certificate"), count(len(d.Objects), "API object"))
	}
	return b.String()
}

// summary is one line of what u sends: counts, size, and the first four names.
func (u *Upload) summary() string {
	what := append(slices.Clone(u.Files), u.Images...)
	list := strings.Join(what, ", ")
	if len(what) > 4 {
		list = strings.Join(what[:4], ", ") + fmt.Sprintf(" +%d more", len(what)-4)
	}
	return fmt.Sprintf("%s, %s, %d MiB (%s)", count(len(u.Files), "file"), count(len(u.Images), "image"), u.Bytes>>20, list)
}

// StepTable lists the steps as `kforge plan --offline` prints them, one block each: number,
// name, and the description wrapped to fit width columns, then where the step works ([hosts],
// [workstation], [api]), kept on one line.
func StepTable(steps []Task, width int) string {
	nameWidth := 0
	for _, t := range steps {
		nameWidth = max(nameWidth, len(t.Name))
	}
	indent := 5 + nameWidth + 2 // "%3d. " + name + two spaces
	var b strings.Builder
	for i, t := range steps {
		where := string(t.Scope)
		if t.Scope == OnHosts {
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
