package tasks

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/kforge/kforge/etcd"
	"github.com/kforge/kforge/facts"
	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/scripts"
	"github.com/kforge/kforge/templates"
)

// A master whose /var/lib/etcd is empty while another master's is not joins a running stacked
// etcd cluster: its member is added (kubeadm join --control-plane's way) right before its
// kubelet starts, and its etcd starts with the running members and state "existing". Masters of
// a new cluster start together instead (see templates.ControlPlaneFor).

// newEtcdClient is a client of master's etcd member, as kube-apiserver-etcd-client, reached on
// 127.0.0.1:2379 through the master's SSH connection. The caller closes it.
func newEtcdClient(ctx context.Context, f *fleet.Fleet, set *pki.Set, master string) (*etcd.Client, error) {
	d, err := f.Dialer(master)
	if err != nil {
		return nil, err
	}
	kp := set.Get("apiserver-etcd-client", "")
	if kp == nil {
		return nil, fmt.Errorf("no apiserver-etcd-client certificate in the PKI set")
	}
	return etcd.New(ctx, etcd.Config{Host: master, Dialer: d, CA: set.CAs[pki.EtcdCA].Cert, MoreCAs: set.Trust[pki.EtcdCA], Cert: kp.Cert, Key: kp.Key})
}

// etcdPlan is how each master's etcd member starts this run (planEtcd); the zero plan starts
// every member as one new cluster (a new cluster, or a restore).
type etcdPlan struct {
	seed string                              // a host whose etcd member runs, when members join
	join map[string]bool                     // hosts joining the running etcd cluster
	boot map[string]*templates.EtcdBootstrap // how each host's member starts, when not new
	// remove are the etcd hosts the inventory no longer lists (an external etcd, apply
	// --prune): their members are removed before any host joins, since etcd refuses a new
	// member while a member is down and the new one's --initial-cluster must be the membership.
	remove []inventory.Node
	// anew: every member starts as one new cluster on the data its host has (restore's plan),
	// and every master anew, its control plane stopped before; otherwise, with an external
	// etcd, the masters start as they run.
	anew bool
	// A move of etcd between the masters and an etcd group (etcdmove.go): handover are the
	// running masters that join before stage (join-etcd), one at a time, when etcd moves onto
	// them; leave are the hosts it moves off whose members still run or whose data is still
	// there, removed one at a time after stage (leave-etcd); moving holds the etcd hosts it
	// moves off, which the inventory no longer lists (nil otherwise: the masters are the run's).
	handover []inventory.Node
	leave    []inventory.Node
	moving   *fleet.Fleet
}

// startOrder splits masters by how stage starts them: fresh ones together (a new cluster's, or
// a single running master, which has no one to hand over to), running ones one at a time when
// two or more run (rolling), then those joining the running etcd cluster, one at a time.
func (p etcdPlan) startOrder(masters []inventory.Node) (fresh, rolling, joining []inventory.Node) {
	for _, n := range masters {
		switch {
		case p.join[n.Name]:
			joining = append(joining, n)
		case p.boot[n.Name] != nil:
			rolling = append(rolling, n)
		default:
			fresh = append(fresh, n)
		}
	}
	fresh, rolling = rollIfSeveral(fresh, rolling)
	return fresh, rolling, joining
}

// rollIfSeveral is the rule both start orders keep: running masters roll one at a time only
// when two or more run; a single running one has no one to hand over to and starts with the
// fresh ones.
func rollIfSeveral(fresh, rolling []inventory.Node) ([]inventory.Node, []inventory.Node) {
	if len(rolling) < 2 {
		return append(fresh, rolling...), nil
	}
	return fresh, rolling
}

// joins says whether host name's member joins the running cluster this run (a new host, or a
// master etcd moves onto).
func (p etcdPlan) joins(name string) bool {
	return p.join[name] || slices.ContainsFunc(p.handover, func(n inventory.Node) bool { return n.Name == name })
}

// fleetOf is the fleet that reaches host name: the run's, or the one of the etcd hosts a move
// leaves.
func (p etcdPlan) fleetOf(rc *runContext, name string) *fleet.Fleet {
	if p.moving != nil {
		if _, ok := p.moving.Node(name); ok {
			return p.moving
		}
	}
	return rc.fleet
}

// planEtcd decides how each master's etcd member starts, before render: running members keep
// the bootstrap flags they started with (read from their manifest: etcd ignores them once it
// has data, and a changed manifest would restart it), masters without data join the running
// cluster when there is one, and a new cluster's masters start together. When the inventory
// moves etcd (etcdMovedFrom), the hosts it moves off count as running members until they have
// left, and the inventory's members without data join their cluster: what has moved is read
// from the hosts, so an interrupted move goes on from where it stopped.
func planEtcd(ctx context.Context, rc *runContext, r progress.Reporter) (etcdPlan, error) {
	var p etcdPlan
	var running, joining []string
	hasData := func(f *fleet.Fleet, name string) (bool, bool) {
		fs := f.Facts(name)
		return fs != nil && len(fs.EtcdDataDir) > 0, fs != nil
	}
	for _, m := range rc.inv.EtcdMembers() {
		data, known := hasData(rc.fleet, m.Name)
		switch {
		case !known:
			continue // not reached (plan shows it as unknown); apply stops at connect
		case data:
			running = append(running, m.Name)
		default:
			joining = append(joining, m.Name)
		}
	}
	from, err := p.movedFrom(ctx, rc, r)
	if err != nil {
		return p, err
	}
	for _, n := range from {
		if data, _ := hasData(p.fleetOf(rc, n.Name), n.Name); data {
			p.leave = append(p.leave, n)
		}
	}
	if len(running)+len(p.leave) == 0 {
		return p, nil // a new cluster
	}
	p.boot = map[string]*templates.EtcdBootstrap{}
	for _, name := range running {
		manifest, err := remote.ReadFile(ctx, rc.fleet.Host(name), path.Join(hostpath.ManifestsDir, "etcd.yaml"))
		if err != nil {
			return p, fmt.Errorf("%s has etcd data but its etcd manifest cannot be read: %w", name, err)
		}
		p.boot[name] = etcdBootFromManifest(manifest)
	}
	if len(joining) == 0 {
		return p, nil
	}
	gone := map[string]bool{} // peer URLs of the members removed first
	if rc.inv.ExternalEtcd() && rc.o.Prune {
		for _, n := range rc.o.Removed {
			if n.Role == inventory.RoleEtcd {
				p.remove = append(p.remove, n)
				gone[templates.EtcdPeerURL(n.NodeIP())] = true
			}
		}
	}
	members, err := p.pickSeed(ctx, rc, append(running, fleet.Names(p.leave)...))
	if err != nil {
		return p, err
	}
	p.join = map[string]bool{}
	for _, name := range joining {
		m, _ := rc.fleet.Node(name)
		peer := templates.EtcdPeerURL(m.NodeIP())
		var list []string
		for _, mem := range members {
			if slices.Contains(mem.PeerURLs, peer) || slices.ContainsFunc(mem.PeerURLs, func(u string) bool { return gone[u] }) {
				continue // added by an earlier, interrupted run; or removed before it joins
			}
			if mem.Name == "" {
				return p, fmt.Errorf("etcd has a member that never started (%s): remove it (etcdctl member remove %x) or start it, then run again", strings.Join(mem.PeerURLs, ","), mem.ID)
			}
			for _, u := range mem.PeerURLs {
				list = append(list, mem.Name+"="+u)
			}
		}
		// Masters join one after another: each starts with the members before it.
		for _, earlier := range joining {
			if earlier == name {
				break
			}
			e, _ := rc.fleet.Node(earlier)
			list = append(list, templates.EtcdMember(earlier, e.NodeIP()))
		}
		p.boot[name] = &templates.EtcdBootstrap{Members: append(list, templates.EtcdMember(name, m.NodeIP())), State: "existing"}
		if len(p.leave) > 0 && !rc.inv.ExternalEtcd() && runsAPIServer(rc.fleet.Facts(name)) {
			p.handover = append(p.handover, m)
			r(progress.Event{Kind: progress.Info, Host: name, Message: fmt.Sprintf("etcd moves onto the masters: joins the running etcd cluster (%d members) before its API server turns to it", len(p.boot[name].Members)-1)})
			continue
		}
		p.join[name] = true
		r(progress.Event{Kind: progress.Info, Host: name, Message: fmt.Sprintf("joins the running etcd cluster (%d members)", len(p.boot[name].Members)-1)})
	}
	return p, nil
}

// pickSeed makes the first of hosts whose etcd member answers the plan's seed, and returns the
// members it lists. A host whose member was removed by an interrupted move does not answer.
func (p *etcdPlan) pickSeed(ctx context.Context, rc *runContext, hosts []string) ([]etcd.Member, error) {
	var errs []error
	for _, name := range hosts {
		c, err := newEtcdClient(ctx, p.fleetOf(rc, name), rc.set, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		members, err := c.Members(ctx)
		c.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p.seed = name
		return members, nil
	}
	return nil, errors.Join(errs...)
}

// etcdBootFromManifest reads the bootstrap flags a running member was started with.
func etcdBootFromManifest(manifest []byte) *templates.EtcdBootstrap {
	b := &templates.EtcdBootstrap{State: "new"}
	for _, line := range strings.Split(string(manifest), "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "- --initial-cluster="); ok {
			b.Members = strings.Split(v, ",")
		}
		if v, ok := strings.CutPrefix(line, "- --initial-cluster-state="); ok {
			b.State = v
		}
	}
	return b
}

// addEtcdMember adds a joining master's etcd member right before its kubelet starts it: the
// cluster waits for the new member from then on. A member already there (an interrupted run)
// is left as it is.
func (p etcdPlan) addMember(ctx context.Context, rc *runContext, n inventory.Node) error {
	if !p.joins(n.Name) {
		return nil
	}
	c, err := newEtcdClient(ctx, p.fleetOf(rc, p.seed), rc.set, p.seed)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, rc.o.Timeout)
	defer cancel()
	err = c.Add(ctx, templates.EtcdPeerURL(n.NodeIP()))
	if err != nil && !rc.o.Prune && slices.ContainsFunc(rc.o.Removed, func(m inventory.Node) bool { return m.Role == inventory.RoleEtcd }) {
		return fmt.Errorf("%w: an etcd host the inventory no longer lists may be down; kforge apply --prune removes such members before a new host joins", err)
	}
	return err
}

// waitEtcdMember waits until a joining master's etcd member has started (etcd then knows its
// name).
func (p etcdPlan) waitMember(ctx context.Context, rc *runContext, n inventory.Node) error {
	if !p.joins(n.Name) {
		return nil
	}
	c, err := newEtcdClient(ctx, p.fleetOf(rc, p.seed), rc.set, p.seed)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, rc.o.Timeout)
	defer cancel()
	return c.WaitStarted(ctx, n.Name, templates.EtcdPeerURL(n.NodeIP()))
}

// etcdUser makes, on every master, the system user etcd runs as where it is missing, and gives
// it the data directory (0700); the facts learn its ids, which render puts in etcd's static pod
// and on etcd's keys (templates.Options.EtcdUser).
func (rc *runContext) etcdUser(ctx context.Context, r progress.Reporter) error {
	return rc.fleet.Each(ctx, rc.inv.EtcdRole(), func(ctx context.Context, n inventory.Node, h remote.Host) error {
		f := rc.fleet.Facts(n.Name)
		if f == nil {
			return nil
		}
		out, err := remote.Output(ctx, h, scripts.Command("etcd-user", "user", facts.EtcdUserName, "dir", hostpath.EtcdDataDir))
		if err != nil {
			return err
		}
		u, err := facts.ParsePasswd(strings.TrimSpace(string(out)))
		if err != nil {
			return fmt.Errorf("host %s: the etcd user: %w (getent printed %q)", n.Name, err, out)
		}
		if f.EtcdUser == nil {
			r(progress.Event{Kind: progress.Info, Host: n.Name, Message: fmt.Sprintf("system user %s made (uid %d); etcd runs as it, %s is its own (0700)", facts.EtcdUserName, u.UID, hostpath.EtcdDataDir)})
		}
		f.EtcdUser = &u
		return nil
	})
}

// etcdHostsWord names the hosts of etcd's members, for steps' descriptions.
func etcdHostsWord(c *inventory.Cluster) string { return roleWord(c.EtcdRole()) }

// roleWord names the hosts of a role that runs etcd's members.
func roleWord(r inventory.Role) string {
	if r == inventory.RoleEtcd {
		return "etcd hosts"
	}
	return "masters"
}

// etcdOwner is "user:group" of master name's etcd user, "" where it has none.
func (rc *runContext) etcdOwner(name string) string {
	if f := rc.fleet.Facts(name); f != nil && f.EtcdUser != nil {
		return fmt.Sprintf("%d:%d", f.EtcdUser.UID, f.EtcdUser.GID)
	}
	return ""
}
