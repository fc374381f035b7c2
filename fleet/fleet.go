// Package fleet is the hosts one kforge command works on: the inventory's nodes, the
// connection to each and the facts gathered from each. Every command (apply, reset, prune, and
// what comes after them) builds its steps over one Fleet; none of them opens connections or
// gathers facts another way.
package fleet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/kforge/kforge/facts"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
)

// Options say how a fleet reaches its hosts.
type Options struct {
	// Limits bound every fan-out over the fleet; the large-upload limit holds across all of
	// them at once (remote.Limits.Shared).
	Limits remote.Limits
	// AcceptNewHostKeys trusts unknown hosts and records their keys (--accept-new-host-keys).
	AcceptNewHostKeys bool
	// Facts say what to gather from each host besides the basics.
	Facts facts.Options
	// Connect opens a host; an SSH connection (remote.Dial) when nil. Tests pass in-memory hosts.
	Connect func(ctx context.Context, n inventory.Node) (remote.Host, error)
	// DialRetry is how long Connect keeps trying a host that does not answer; default 30 s.
	DialRetry time.Duration
	// Getenv reads the passwords and passphrases the inventory names, and HOME; os.Getenv
	// when nil.
	Getenv func(string) string
	Logger *slog.Logger
	Now    func() time.Time
}

// Fleet is the hosts of one run. Its zero value is not usable; call New.
type Fleet struct {
	nodes []inventory.Node
	o     Options

	mu    sync.Mutex
	hosts map[string]remote.Host
	facts map[string]*facts.Facts
	// jumps shares each bastion's connection between the hosts behind it.
	jumps remote.Jumps
	// traffic counts the bytes of the workstation's SSH connections.
	traffic remote.Traffic
}

// New returns the fleet of nodes; nothing is opened until Connect.
func New(nodes []inventory.Node, o Options) *Fleet {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Facts.Now == nil {
		o.Facts.Now = o.Now
	}
	o.Limits = o.Limits.Shared()
	return &Fleet{nodes: nodes, o: o, hosts: map[string]remote.Host{}, facts: map[string]*facts.Facts{}}
}

// Limits are the fleet's fan-out limits, for fan-outs over something other than its nodes.
func (f *Fleet) Limits() remote.Limits { return f.o.Limits }

// Nodes are the fleet's hosts that role selects (inventory.Role.Selects: "" for all,
// inventory.AnyNode for the Kubernetes nodes), in inventory order.
func (f *Fleet) Nodes(role inventory.Role) []inventory.Node {
	var out []inventory.Node
	for _, n := range f.nodes {
		if n.Role.Selects(role) {
			out = append(out, n)
		}
	}
	return out
}

// Names are the names of Nodes(role).
func (f *Fleet) Names(role inventory.Role) []string { return Names(f.Nodes(role)) }

// Names are the names of nodes, in order.
func Names(nodes []inventory.Node) []string {
	out := make([]string, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	return out
}

// Node is the fleet's node named name.
func (f *Fleet) Node(name string) (inventory.Node, bool) {
	for _, n := range f.nodes {
		if n.Name == name {
			return n, true
		}
	}
	return inventory.Node{}, false
}

// Host is the open connection to the node named name (nil before Connect).
func (f *Fleet) Host(name string) remote.Host {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hosts[name]
}

// Facts are what Connect learned about the node named name (nil before Connect).
func (f *Fleet) Facts(name string) *facts.Facts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.facts[name]
}

// AllFacts are the facts of every connected host, by name.
func (f *Fleet) AllFacts() map[string]*facts.Facts {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]*facts.Facts, len(f.facts))
	for k, v := range f.facts {
		out[k] = v
	}
	return out
}

// Dialer is the node's connection as a remote.Dialer, to reach its local ports (API server,
// etcd); an error when the connection cannot open tunnels.
func (f *Fleet) Dialer(name string) (remote.Dialer, error) {
	d, ok := f.Host(name).(remote.Dialer)
	if !ok {
		return nil, fmt.Errorf("%s: cannot open a tunnel over this connection", name)
	}
	return d, nil
}

type named struct{ inventory.Node }

func (n named) Name() string { return n.Node.Name }

// Each runs fn on every node with role ("" for all) at once, within the fleet's limits, and
// returns every failure, each wrapped with its host.
func (f *Fleet) Each(ctx context.Context, role inventory.Role, fn func(ctx context.Context, n inventory.Node, h remote.Host) error) error {
	return EachOf(ctx, f, f.Nodes(role), fn)
}

// EachOf is Each over some of the fleet's nodes.
func EachOf(ctx context.Context, f *Fleet, nodes []inventory.Node, fn func(ctx context.Context, n inventory.Node, h remote.Host) error) error {
	ns := make([]named, len(nodes))
	for i, n := range nodes {
		ns[i] = named{n}
	}
	return remote.Each(ctx, ns, f.o.Limits, func(ctx context.Context, n named) error {
		return fn(ctx, n.Node, f.Host(n.Node.Name))
	})
}

// Connect opens every host and gathers its facts in one round trip each, reporting a line per
// host.
func (f *Fleet) Connect(ctx context.Context, r progress.Reporter) error {
	return f.Each(ctx, "", func(ctx context.Context, n inventory.Node, _ remote.Host) error {
		return f.connect(ctx, n, r)
	})
}

// Survey is Connect for commands that show what they can of a cluster (plan): a host that
// cannot be reached or asked is reported and returned, not fatal, and has no facts.
func (f *Fleet) Survey(ctx context.Context, r progress.Reporter) map[string]error {
	var mu sync.Mutex
	failed := map[string]error{}
	f.Each(ctx, "", func(ctx context.Context, n inventory.Node, _ remote.Host) error {
		if err := f.connect(ctx, n, r); err != nil {
			mu.Lock()
			failed[n.Name] = err
			mu.Unlock()
			r(progress.Event{Kind: progress.Info, Host: n.Name, Message: "unreachable: " + err.Error()})
		}
		return nil
	})
	return failed
}

func (f *Fleet) connect(ctx context.Context, n inventory.Node, r progress.Reporter) error {
	start := f.o.Now()
	h, err := f.open(ctx, n)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.hosts[n.Name] = h
	f.mu.Unlock()
	fs, err := facts.Gather(ctx, h, f.o.Facts)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.facts[n.Name] = fs
	f.mu.Unlock()
	r(progress.Event{Kind: progress.HostDone, Host: n.Name, Duration: f.o.Now().Sub(start),
		Message: fmt.Sprintf("%s %s, kernel %s, %d CPUs, %d MiB", fs.OS.ID, fs.OS.VersionID, fs.Kernel, fs.CPUs, fs.MemoryBytes>>20)})
	return nil
}

// Reach opens every node of role ("" for all) that answers within retry, without gathering
// facts, for commands that must work on what is left of a cluster (etcd status, snapshot): a
// host that cannot be reached is reported as a failed host line and returned, not fatal.
func (f *Fleet) Reach(ctx context.Context, role inventory.Role, retry time.Duration, r progress.Reporter) map[string]error {
	var mu sync.Mutex
	failed := map[string]error{}
	f.Each(ctx, role, func(ctx context.Context, n inventory.Node, _ remote.Host) error {
		start := f.o.Now()
		h, err := f.dial(ctx, n, retry)
		if err != nil {
			mu.Lock()
			failed[n.Name] = err
			mu.Unlock()
			r(progress.Event{Kind: progress.Info, Host: n.Name, Message: "unreachable: " + err.Error()})
			return nil
		}
		f.mu.Lock()
		f.hosts[n.Name] = h
		f.mu.Unlock()
		r(progress.Event{Kind: progress.HostDone, Host: n.Name, Duration: f.o.Now().Sub(start), Message: "connected"})
		return nil
	})
	return failed
}

func (f *Fleet) open(ctx context.Context, n inventory.Node) (remote.Host, error) {
	retry := f.o.DialRetry
	if retry <= 0 {
		retry = 30 * time.Second
	}
	return f.dial(ctx, n, retry)
}

func (f *Fleet) dial(ctx context.Context, n inventory.Node, retry time.Duration) (remote.Host, error) {
	if f.o.Connect != nil {
		return f.o.Connect(ctx, n)
	}
	cfg := remote.ConfigFor(n)
	cfg.AcceptNewHostKeys = f.o.AcceptNewHostKeys
	cfg.DialRetry = retry
	return remote.Dial(ctx, cfg, remote.Options{Logger: f.o.Logger, Getenv: f.o.Getenv, Jumps: &f.jumps, Traffic: &f.traffic})
}

// Traffic is what the fleet's SSH connections sent and received so far, in bytes (as the
// network sees them).
func (f *Fleet) Traffic() (sent, received int64) { return f.traffic.Sent(), f.traffic.Received() }

// Close ends every connection the fleet opened.
func (f *Fleet) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, h := range f.hosts {
		if c, ok := h.(io.Closer); ok {
			c.Close()
		}
		delete(f.hosts, name)
	}
	f.jumps.Close()
}
