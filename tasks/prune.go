package tasks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/state"
	"github.com/kforge/kforge/templates"
)

// Shrinking a cluster is removing hosts from the inventory. apply remembers the hosts of its
// last successful run in the state dir (state.HostsRecord), so it knows which hosts left the
// inventory and how to reach them. Without --prune it only says so; with --prune it drains
// each removed host, removes a master's etcd member, resets the host (as `kforge reset` would)
// and deletes its node.

// Removed returns the hosts of the last apply that the inventory no longer lists, as nodes
// that can be reached the way apply reached them. A host whose name is back in the
// inventory is not removed, whatever its role. When the inventory keeps none of the recorded
// hosts of etcd's members (the masters, or the etcd group's), the error is a
// NoMasterLeftError, returned with the removed hosts (reset and restore still want them); an
// inventory that moves etcd (etcdmove.go) keeps it: onto an etcd group, from masters it keeps;
// back onto the masters, from the etcd hosts it dropped.
func Removed(c *inventory.Cluster, d state.Dir) ([]inventory.Node, error) {
	if d.Path() == "" {
		return nil, nil
	}
	rec, err := d.ReadHosts()
	if err != nil {
		return nil, err
	}
	hosts := c.Hosts()
	current := fleet.Names(hosts)
	var out []inventory.Node
	recorded := map[inventory.Role][]string{}
	kept := map[inventory.Role]bool{}
	for _, h := range rec.Hosts {
		recorded[h.Role] = append(recorded[h.Role], h.Name)
		kept[h.Role] = kept[h.Role] || slices.ContainsFunc(hosts, func(n inventory.Node) bool { return n.Name == h.Name && n.Role == h.Role })
		if !slices.Contains(current, h.Name) {
			out = append(out, h.Node())
		}
	}
	was := etcdRanOn(rec)
	switch {
	case was == "":
	case was == inventory.RoleEtcd && !c.ExternalEtcd(): // etcd moves back onto the masters
	case !kept[was]:
		return out, &NoMasterLeftError{Recorded: recorded[was], Role: was}
	}
	return out, nil
}

// EtcdMove is where the last apply ran etcd's members (Options.EtcdFrom: RoleMaster,
// RoleEtcd, or "" for a new cluster). An inventory that moves etcd back onto the masters is
// refused without prune: the etcd hosts it drops leave the cluster in the same run.
func EtcdMove(c *inventory.Cluster, d state.Dir, prune bool) (inventory.Role, error) {
	if d.Path() == "" {
		return "", nil
	}
	rec, err := d.ReadHosts()
	if err != nil {
		return "", err
	}
	from := etcdRanOn(rec)
	if from == inventory.RoleEtcd && !c.ExternalEtcd() && !prune {
		var hosts []string
		for _, h := range rec.Hosts {
			if h.Role == inventory.RoleEtcd {
				hosts = append(hosts, h.Name)
			}
		}
		return from, fmt.Errorf("the inventory has no etcd group, so etcd moves from the etcd hosts (%s, from the last apply) onto the masters, and those hosts leave the cluster: run kforge apply --prune to move it, or list the etcd group again to keep it", strings.Join(hosts, ", "))
	}
	return from, nil
}

// etcdRanOn is the role of the hosts etcd's members ran on at the last apply: the etcd hosts'
// when it recorded any, the masters' otherwise; "" with no record.
func etcdRanOn(rec *state.HostsRecord) inventory.Role {
	was := inventory.Role("")
	for _, h := range rec.Hosts {
		switch h.Role {
		case inventory.RoleEtcd:
			return inventory.RoleEtcd
		case inventory.RoleMaster:
			was = inventory.RoleMaster
		}
	}
	return was
}

// NoMasterLeftError refuses an inventory that keeps none of the hosts etcd's members ran on
// (Role: the masters, or an external etcd's hosts): they would start a new, empty etcd
// cluster. Those hosts are replaced one at a time: add the new one, apply, then remove the old
// one and apply --prune.
type NoMasterLeftError struct {
	Recorded []string
	Role     inventory.Role
}

func (e *NoMasterLeftError) Error() string {
	from := strings.Join(e.Recorded, ", ")
	if e.Role == inventory.RoleEtcd {
		return fmt.Sprintf("the inventory keeps none of the cluster's etcd hosts (%s, from the last apply): they would start a new, empty etcd cluster; replace etcd hosts one at a time (list the new one in the old one's place and apply --prune), restore a snapshot onto the new ones (kforge restore --snapshot FILE), or run kforge reset first to start over", from)
	}
	return fmt.Sprintf("the inventory keeps none of the cluster's masters (%s, from the last apply): its masters would start a new, empty cluster; replace masters one at a time (add the new one and apply, then remove the old one and apply --prune), or run kforge reset first to start over", from)
}

// reportRemoved says which hosts left the inventory but are still in the cluster.
func (rc *runContext) reportRemoved(_ context.Context, r progress.Reporter) error {
	for _, n := range rc.o.Removed {
		how := "kforge apply --prune drains it, resets the host and deletes its node"
		switch n.Role {
		case inventory.RoleMaster:
			how = "kforge apply --prune drains it, removes its etcd member, resets the host and deletes its node (take it out of your load balancer too)"
		case inventory.RoleEtcd:
			how = "kforge apply --prune removes its etcd member and resets the host"
		}
		r(progress.Event{Kind: progress.Info, Host: n.Name, Message: fmt.Sprintf("%s %s is no longer in the inventory but still in the cluster: %s", n.Role, n.Name, how)})
	}
	return nil
}

// prune removes the hosts that left the inventory, one at a time: drain (so their pods move
// while the others still run); for a master, remove its etcd member while it still runs (a
// stopped member would count against the quorum the removal needs: with two members, stopping
// one first would leave the cluster unable to remove it); reset the host (kubelet stopped, so it
// cannot register the node again); delete the node. A host that cannot be reached any more is
// not reset; its member and node are removed all the same, and the event says so.
func (rc *runContext) prune(ctx context.Context, r progress.Reporter) error {
	api, err := rc.clients()
	if err != nil {
		return err
	}
	for _, n := range rc.o.Removed {
		start := rc.o.Now()
		var did []string
		if n.Role != inventory.RoleEtcd { // an etcd host is no node
			evicted, err := kube.Drain(ctx, api.Typed, n.Name, rc.o.DrainTimeout)
			if err != nil {
				return err
			}
			did = append(did, fmt.Sprintf("drained (%s evicted)", count(len(evicted), "pod")))
		}
		if n.Role == rc.inv.EtcdRole() {
			via := rc.inv.EtcdMembers()[0]
			if handOverFrom(ctx, rc, n, via) {
				did = append(did, "etcd leadership handed over to "+via.Name)
			}
			removed, err := removeEtcdMember(ctx, rc, via.Name, n)
			if err != nil {
				return fmt.Errorf("%s: remove its etcd member: %w", n.Name, err)
			}
			if removed {
				did = append(did, "etcd member removed")
			}
		}
		msg, err := resetRemoved(ctx, rc.inv, n, rc.o, r)
		if err != nil {
			return fmt.Errorf("%s: reset: %w", n.Name, err)
		}
		did = append(did, msg)
		if n.Role != inventory.RoleEtcd {
			deleted, err := kube.DeleteNode(ctx, api.Typed, n.Name)
			if err != nil {
				return err
			}
			if deleted {
				did = append(did, "node deleted")
			}
		}
		r(progress.Event{Kind: progress.HostDone, Host: n.Name, Duration: rc.o.Now().Sub(start), Message: strings.Join(did, "; ")})
	}
	return nil
}

// handOverFrom hands etcd's leadership from removed host n's member, when it leads and answers,
// to via's, so that its removal does not leave the cluster waiting for an election. A host that
// does not answer within 2 s is taken for lost.
func handOverFrom(ctx context.Context, rc *runContext, n inventory.Node, via inventory.Host) bool {
	f := newFleet(rc.inv, []inventory.Node{n}, rc.o)
	defer f.Close()
	if _, failed := f.Reach(ctx, n.Role, 2*time.Second, func(progress.Event) {})[n.Name]; failed {
		return false // a lost host: its member leads nothing any more
	}
	return handOverLeadership(ctx, rc, f, n, via)
}

// removeEtcdMember removes a removed host's etcd member through the member on host via.
func removeEtcdMember(ctx context.Context, rc *runContext, via string, n inventory.Node) (bool, error) {
	e, err := newEtcdClient(ctx, rc.fleet, rc.set, via)
	if err != nil {
		return false, err
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(ctx, rc.o.Timeout)
	defer cancel()
	return e.Remove(ctx, n.Name, templates.EtcdPeerURL(n.NodeIP()))
}

// resetRemoved resets one removed host as `kforge reset` would (its host steps only: the state
// dir belongs to the cluster that goes on) and says how that went; a host that cannot be
// reached is left as it is.
func resetRemoved(ctx context.Context, c *inventory.Cluster, n inventory.Node, o Options, r progress.Reporter) (string, error) {
	o.Removed = nil
	x := &Reset{inv: c, o: o, fleet: newFleet(c, []inventory.Node{n}, o)}
	defer x.Close()
	_, err := Run(ctx, x.hostSteps(), quiet(r), o.Now)
	var unreachable *remote.DialError
	switch {
	case errors.As(err, &unreachable):
		return "host not reset (unreachable: " + err.Error() + ")", nil
	case err != nil:
		return "", err
	}
	return "host reset", nil
}

// recordHosts writes the hosts the run made part of the cluster, plus kept: those that left
// the inventory and were not pruned (still in the cluster), for the next apply.
func recordHosts(rc *runContext, kept []inventory.Node) error {
	rec := state.HostsRecord{Cluster: rc.inv.Name}
	for _, n := range append(rc.fleet.Nodes(""), kept...) {
		rec.Hosts = append(rec.Hosts, state.Record(n))
	}
	return rc.o.State.WriteHosts(rec)
}
