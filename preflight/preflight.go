// Package preflight judges whether hosts are fit for a cluster before anything changes. It runs
// kubeadm's preflight checks (cmd/kubeadm/app/preflight/checks.go, v1.36) and a few of kforge's
// own as pure functions over every host's facts (package facts), the inventory and the
// workstation's clock, all centrally: every host is checked, and every finding names the host,
// the check, what was seen and the fix. Check names follow kubeadm's, so
// --ignore-preflight-errors takes the same names (and "all").
package preflight

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/kforge/kforge/facts"
	"github.com/kforge/kforge/inventory"
)

// Severity says how bad a finding is.
type Severity int

const (
	// Info is something the user should know that needs no action (kforge will handle it).
	Info Severity = iota
	// Warning may cause trouble but does not stop apply; an ignored error becomes a Warning.
	Warning
	// Error stops apply before anything changes.
	Error
)

func (s Severity) String() string {
	switch s {
	case Error:
		return "ERROR"
	case Warning:
		return "WARNING"
	}
	return "INFO"
}

// MarshalText makes a Severity "ERROR", "WARNING" or "INFO" in JSON events.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Finding is one check's verdict on one host.
type Finding struct {
	Host     string   `json:"host"`     // inventory node name
	Check    string   `json:"check"`    // kubeadm's check name where kubeadm has the check, e.g. Port-6443
	Severity Severity `json:"severity"` // ERROR, WARNING or INFO in JSON
	Seen     string   `json:"seen"`     // what was found, e.g. "port 6443 is in use: 0.0.0.0:6443 by PID 812 (nginx)"
	Fix      string   `json:"fix,omitempty"`
	// Ignored says this was an Error turned into a Warning by --ignore-preflight-errors.
	Ignored bool `json:"ignored,omitempty"`
}

// String is the finding on one line, kubeadm's way: "[ERROR Port-6443] m1: port 6443 is in use".
func (f Finding) String() string {
	sev := f.Severity.String()
	if f.Ignored {
		sev = "WARNING (ignored error)"
	}
	return fmt.Sprintf("[%s %s] %s: %s", sev, f.Check, f.Host, f.Seen)
}

// Lines is the finding as the CLI prints it: String, then the fix indented.
func (f Finding) Lines() []string {
	ls := []string{f.String()}
	if f.Fix != "" {
		ls = append(ls, "    fix: "+f.Fix)
	}
	return ls
}

// Findings are the result of Check, in host order (inventory order), then check order.
type Findings []Finding

// Errors returns the findings of Error severity.
func (fs Findings) Errors() Findings { return fs.filter(Error) }

// Warnings returns the findings of Warning severity (ignored errors included).
func (fs Findings) Warnings() Findings { return fs.filter(Warning) }

func (fs Findings) filter(s Severity) Findings {
	var out Findings
	for _, f := range fs {
		if f.Severity == s {
			out = append(out, f)
		}
	}
	return out
}

// Err returns a *FailedError when any finding is an Error, else nil.
func (fs Findings) Err() error {
	errs := fs.Errors()
	if len(errs) == 0 {
		return nil
	}
	return &FailedError{Findings: errs}
}

// ExitCode is the process exit code of a failed preflight.
const ExitCode = 3

// FailedError is a preflight that found errors. Its Details list every error with its fix and
// say how to ignore them; ExitCode is 3.
type FailedError struct {
	Findings Findings // the Error findings
}

func (e *FailedError) hosts() []string {
	var hs []string
	for _, f := range e.Findings {
		if !slices.Contains(hs, f.Host) {
			hs = append(hs, f.Host)
		}
	}
	return hs
}

func (e *FailedError) Error() string {
	return fmt.Sprintf("preflight failed: %s on %s", plural(len(e.Findings), "error"), strings.Join(e.hosts(), ", "))
}

// Details implements the CLI's detailed error printing.
func (e *FailedError) Details() []string {
	hs := e.hosts()
	lines := []string{fmt.Sprintf("preflight failed: %s on %s (every host was checked; nothing was changed)", plural(len(e.Findings), "error"), plural(len(hs), "host"))}
	var names []string
	ignorable := CheckNames()
	for _, f := range e.Findings {
		lines = append(lines, f.Lines()...)
		if !slices.Contains(names, f.Check) && slices.Contains(ignorable, f.Check) {
			names = append(names, f.Check)
		}
	}
	if len(names) > 0 {
		lines = append(lines, "If you know what you are doing, make a check non-fatal with --ignore-preflight-errors="+strings.Join(names, ","))
	}
	return lines
}

// ExitCode implements the CLI's exit code selection.
func (e *FailedError) ExitCode() int { return ExitCode }

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// Ignore is the set of check names --ignore-preflight-errors turns from errors into warnings.
type Ignore struct {
	all   bool
	names map[string]bool // lower case
}

// ParseIgnore reads --ignore-preflight-errors values (each may hold several comma-separated
// names). Names are case-insensitive, as in kubeadm; "all" ignores every check and cannot be
// combined with names (kubeadm's rule). A name that is no check of kforge's is an error, so a
// typo does not silently keep a check fatal.
func ParseIgnore(values []string) (Ignore, error) {
	ig := Ignore{names: map[string]bool{}}
	known := map[string]bool{}
	for _, n := range CheckNames() {
		known[strings.ToLower(n)] = true
	}
	var unknown []string
	for _, v := range values {
		for _, n := range strings.Split(v, ",") {
			n = strings.ToLower(strings.TrimSpace(n))
			switch {
			case n == "":
			case n == "all":
				ig.all = true
			case known[n]:
				ig.names[n] = true
			default:
				unknown = append(unknown, n)
			}
		}
	}
	if ig.all && len(ig.names) > 0 {
		return Ignore{}, errors.New("--ignore-preflight-errors: don't name individual checks together with 'all'")
	}
	if len(unknown) > 0 {
		return Ignore{}, fmt.Errorf("--ignore-preflight-errors: unknown check %s; the checks are %s, and all", strings.Join(unknown, ", "), strings.Join(CheckNames(), ", "))
	}
	return ig, nil
}

// Has says whether check name is ignored.
func (ig Ignore) Has(name string) bool { return ig.all || ig.names[strings.ToLower(name)] }

// Options are the inputs of Check besides the inventory and the facts.
type Options struct {
	// Ignore turns errors of these checks into warnings.
	Ignore Ignore
	// BundleArch is the architecture of the bundle's binaries as GOARCH (amd64, arm64) when the
	// inventory uses a bundle; hosts of another architecture fail the Arch check. "" skips it.
	BundleArch string
}

// Check runs every check on every node of c against its facts (by node name) and returns the
// findings, host by host in inventory order, then the cross-host checks. A node without facts
// gets one Error finding.
func Check(c *inventory.Cluster, hosts map[string]*facts.Facts, o Options) Findings {
	var out Findings
	nodes := c.Nodes()
	for _, n := range nodes {
		f := hosts[n.Name]
		if f == nil {
			out = append(out, Finding{Host: n.Name, Check: CheckFacts, Severity: Error,
				Seen: "no facts were gathered from this host", Fix: "make the host reachable over SSH and run again"})
			continue
		}
		for _, chk := range hostChecks {
			out = append(out, chk(c, n, f)...)
		}
	}
	out = append(out, crossHost(nodes, hosts)...)
	out = append(out, checkVIP(c, hosts)...)
	out = append(out, checkProxyMode(c, hosts)...)
	for i := range out {
		if out[i].Severity == Error && out[i].Check != CheckFacts && o.Ignore.Has(out[i].Check) {
			out[i].Severity, out[i].Ignored = Warning, true
		}
	}
	if o.BundleArch != "" {
		var arch Findings
		for _, n := range nodes {
			if f := hosts[n.Name]; f != nil {
				arch = append(arch, checkArch(n, f, o.BundleArch)...)
			}
		}
		for i := range arch {
			if arch[i].Severity == Error && o.Ignore.Has(arch[i].Check) {
				arch[i].Severity, arch[i].Ignored = Warning, true
			}
		}
		out = append(out, arch...)
	}
	sort.SliceStable(out, func(i, j int) bool { return hostIndex(nodes, out[i].Host) < hostIndex(nodes, out[j].Host) })
	return out
}

func hostIndex(nodes []inventory.Node, name string) int {
	for i, n := range nodes {
		if n.Name == name {
			return i
		}
	}
	return len(nodes)
}
