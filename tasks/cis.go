package tasks

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/kforge/kforge/cis"
	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/scripts"
)

// CIS is one `kforge cis`: the CIS Kubernetes Benchmark's automated checks (package cis) on
// every host of the inventory. It changes nothing, and needs no state dir: what it reads is on
// the hosts.
type CIS struct {
	o     Options
	fleet *fleet.Fleet

	// Results are the checks' outcomes, host by host in the inventory's order; filled by check.
	Results  []cis.Result
	gathered map[string]*cis.Host // gather: what each host showed
}

// NewCIS prepares the benchmark's checks on c's hosts.
func NewCIS(c *inventory.Cluster, o Options) *CIS {
	o = o.withDefaults()
	return &CIS{o: o, fleet: newFleet(c, c.Nodes(), o), gathered: map[string]*cis.Host{}}
}

// Close ends every connection the command opened.
func (x *CIS) Close() { x.fleet.Close() }

// reachTimeout is how long a host that does not answer SSH is retried by the commands that need
// every host of a role (kforge cis, secrets rotate-key).
const reachTimeout = 30 * time.Second

// reachAll connects to every host of role in f; the first that does not answer is the error.
func reachAll(ctx context.Context, f *fleet.Fleet, role inventory.Role, r progress.Reporter) error {
	for name, err := range f.Reach(ctx, role, reachTimeout, r) {
		return fmt.Errorf("host %s: %w", name, err)
	}
	return nil
}

// Steps is kforge cis, top to bottom.
func (x *CIS) Steps() []Step {
	hosts := x.fleet.Names("")
	var l list
	l.add("connect", OnHosts, hosts, x.connect, "connect to %s over SSH", count(len(hosts), "host"))
	l.add("gather", OnHosts, hosts, x.gather, "read each host's Kubernetes processes' command lines, the modes and owners of the files the checks name, and kubelet's and kube-proxy's configuration, in one round trip")
	l.add("check", OnWorkstation, nil, x.check, "run the benchmark's automated checks on what each host showed")
	return l
}

func (x *CIS) connect(ctx context.Context, r progress.Reporter) error {
	return reachAll(ctx, x.fleet, "", r)
}

func (x *CIS) gather(ctx context.Context, r progress.Reporter) error {
	files, trees := cis.GatherInputs()
	script := scripts.Command("cis-gather", "files", scripts.Lines(files), "trees", scripts.Lines(trees))
	var mu sync.Mutex
	return x.fleet.Each(ctx, "", func(ctx context.Context, n inventory.Node, h remote.Host) error {
		out, err := remote.Output(ctx, h, script)
		if err != nil {
			return err
		}
		host, err := cis.Parse(n.Name, out)
		if err != nil {
			return err
		}
		mu.Lock()
		x.gathered[n.Name] = host
		mu.Unlock()
		return nil
	})
}

func (x *CIS) check(context.Context, progress.Reporter) error {
	for _, n := range x.fleet.Names("") {
		x.Results = append(x.Results, cis.Run(x.gathered[n])...)
	}
	return nil
}
