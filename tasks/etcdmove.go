package tasks

import (
	"context"
	"fmt"
	"path"
	"strings"

	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/scripts"
	"github.com/kforge/kforge/templates"
)

// Moving etcd between the masters and an etcd group is editing the inventory: adding an etcd
// group to a cluster whose etcd runs on its masters moves it there; dropping the group (with
// apply --prune) moves it back onto the masters. apply moves it online, in the order
// principle 11 asks for, each step read back from the hosts so that a run interrupted anywhere
// is finished by running it again:
//
//  1. etcd-members (planEtcd) sees where etcd's members run: the hosts etcd moves off count as
//     running members while their data is there (the plan's leave), and the inventory's
//     members without data join their cluster;
//  2. etcd-move-snapshot saves an etcd snapshot of the cluster as it runs, to the state dir;
//  3. the new members join one at a time, each added, started and ready before the next, so
//     the cluster never waits for two new members at once: the etcd hosts in stage
//     (startEtcdHosts); running masters in join-etcd, before stage, since their API servers
//     turn to their own member when stage rolls them;
//  4. stage rolls the API servers onto the new members (--etcd-servers), one master at a time;
//  5. leave-etcd removes the old members one at a time: leadership handed over first, the
//     member removed, its static pod stopped, its data and certificates cleared.
//
// The cluster has the old members and the new ones in between (3 masters and 3 etcd hosts: 6
// members, quorum 4), never fewer than the inventory's.

// etcdMoving says whether the inventory moves etcd off where the last apply ran it (o.EtcdFrom):
// onto an etcd group, or back onto the masters.
func etcdMoving(c *inventory.Cluster, o Options) bool {
	return o.EtcdFrom != "" && o.EtcdFrom != c.EtcdRole()
}

// movedFrom are the hosts etcd moves off this run (none when it does not move): the masters, or
// the etcd hosts the inventory dropped, which the plan reaches through a fleet of their own
// (moving), connected here.
func (p *etcdPlan) movedFrom(ctx context.Context, rc *runContext, r progress.Reporter) ([]inventory.Node, error) {
	if !etcdMoving(rc.inv, rc.o) {
		return nil, nil
	}
	if rc.inv.ExternalEtcd() {
		return rc.fleet.Nodes(inventory.RoleMaster), nil
	}
	var from []inventory.Node
	for _, n := range rc.o.Removed {
		if n.Role == inventory.RoleEtcd {
			from = append(from, n)
		}
	}
	p.moving = newFleet(rc.inv, from, rc.o)
	if err := p.moving.Connect(ctx, r); err != nil {
		return nil, fmt.Errorf("etcd moves onto the masters from the etcd hosts, which must be reached: %w", err)
	}
	return from, nil
}

// close ends the connections to the etcd hosts a move leaves.
func (p *etcdPlan) close() {
	if p.moving != nil {
		p.moving.Close()
	}
}

// moveSnapshot saves an etcd snapshot of the cluster as it runs, before etcd moves: etcd
// snapshot's own steps, over the hosts that still hold its members.
func moveSnapshot(ctx context.Context, rc *runContext, ep *etcdPlan, r progress.Reporter) error {
	if len(ep.leave) == 0 {
		r(progress.Event{Kind: progress.Info, Message: "etcd has moved already: no snapshot"})
		return nil
	}
	ran := *rc.inv
	ran.Etcd = nil
	if !rc.inv.ExternalEtcd() { // it runs on the etcd hosts the inventory dropped
		for _, n := range ep.leave {
			h := n.Host
			h.SSH = &n.SSH
			ran.Etcd = append(ran.Etcd, h)
		}
	}
	return snapshotBefore(ctx, &ran, rc.o, SnapshotOptions{}, "etcd moves off "+strings.Join(fleet.Names(ep.leave), ", "), r)
}

// quiet passes on a nested command's notes and nothing else.
func quiet(r progress.Reporter) progress.Reporter {
	return func(e progress.Event) {
		if e.Kind == progress.Info {
			r(e)
		}
	}
}

// joinEtcd joins the running masters etcd moves onto (the plan's handover), one at a time:
// each master's member is added, its etcd files land (kubelet starts etcd beside the API
// server, which still uses the old members), and it has started and answers its readiness
// check before the next is added. stage then rolls each master's API server onto its own
// member.
func joinEtcd(ctx context.Context, t *hop, ep *etcdPlan, r progress.Reporter) error {
	for _, n := range ep.handover {
		start := t.rc.o.Now()
		if err := ep.addMember(ctx, t.rc, n); err != nil {
			return remote.WithHost(n.Name, err)
		}
		if err := push(ctx, t.files, t.rc.fleet.Host(n.Name), isEtcdMemberFile); err != nil {
			return remote.WithHost(n.Name, err)
		}
		if err := ep.waitMember(ctx, t.rc, n); err != nil {
			return remote.WithHost(n.Name, err)
		}
		if err := waitEtcdHost(ctx, t.rc, t.files, n, ""); err != nil {
			return err
		}
		r(progress.Event{Kind: progress.HostDone, Host: n.Name, Duration: t.rc.o.Now().Sub(start), Message: "etcd member joined and ready"})
	}
	return nil
}

// isEtcdMemberFile says whether a master's file is its etcd member's: the static pod and the
// etcd PKI.
func isEtcdMemberFile(p string) bool {
	return p == etcdManifest || strings.HasPrefix(p, path.Join(hostpath.PKIDir, "etcd")+"/")
}

// leaveEtcd takes etcd off the hosts it moved away from (the plan's leave), one at a time, once
// every API server uses the inventory's members (stage rolled them): a member that leads hands
// its leadership to one of those first, the member is removed (the cluster stops counting it),
// its static pod stops, and its data, its certificates, the etcd CA's key and its scheduled
// snapshots' timer go.
// A host whose member is gone already (an interrupted run) is only cleared.
func leaveEtcd(ctx context.Context, rc *runContext, ep *etcdPlan, r progress.Reporter) error {
	via := rc.inv.EtcdMembers()[0]
	for _, n := range ep.leave {
		start := rc.o.Now()
		f := ep.fleetOf(rc, n.Name)
		var did []string
		if moved := handOverLeadership(ctx, rc, f, n, via); moved {
			did = append(did, "leadership handed over to "+via.Name)
		}
		removed, err := removeEtcdMember(ctx, rc, via.Name, n)
		if err != nil {
			return fmt.Errorf("%s: remove its etcd member: %w", n.Name, err)
		}
		if removed {
			did = append(did, "etcd member removed")
		}
		h := f.Host(n.Name)
		d, err := f.Dialer(n.Name)
		if err != nil {
			return err
		}
		why, err := stopStaticPods(ctx, rc, h, d, []string{etcdManifest}, []string{"127.0.0.1:2379"})
		if err != nil {
			return remote.WithHost(n.Name, err)
		}
		if why != "" {
			return fmt.Errorf("%s: etcd did not stop within %s after kforge removed its manifest (%s): look at kubelet's log there (journalctl -u kubelet), then run the command again", n.Name, rc.o.Timeout, why)
		}
		did = append(did, "etcd stopped")
		out, err := remote.Output(ctx, h, scripts.Command("etcd-leave", "data_dir", hostpath.EtcdDataDir, "files", scripts.Lines(etcdMemberCertFiles())))
		if err != nil {
			return remote.WithHost(n.Name, err)
		}
		if strings.Contains(string(out), "changed removed "+hostpath.EtcdDataDir+"/") {
			did = append(did, "its data and certificates removed")
		}
		timer, err := remote.Output(ctx, h, retireUnitScript(hostpath.EtcdSnapshotTimer, hostpath.EtcdSnapshotTimerPath, hostpath.EtcdSnapshotUnitPath, hostpath.EtcdSnapshotConfig, hostpath.EtcdSnapshotPath))
		if err != nil {
			return remote.WithHost(n.Name, err)
		}
		if strings.TrimSpace(string(timer)) == "removed" {
			did = append(did, "its scheduled snapshots' timer removed (the snapshots taken stay in "+hostpath.EtcdSnapshotDir+")")
		}
		r(progress.Event{Kind: progress.HostDone, Host: n.Name, Duration: rc.o.Now().Sub(start), Message: strings.Join(did, "; ")})
	}
	return nil
}

// handOverLeadership moves etcd's leadership from n's member, when it leads, to to's; whether it
// did. A member that does not answer leads nothing.
func handOverLeadership(ctx context.Context, rc *runContext, f *fleet.Fleet, n inventory.Node, to inventory.Host) bool {
	c, err := newEtcdClient(ctx, f, rc.set, n.Name)
	if err != nil {
		return false
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, rc.o.Timeout)
	defer cancel()
	moved, err := c.HandOver(ctx, templates.EtcdPeerURL(to.NodeIP()))
	if err != nil {
		rc.o.Logger.Info("etcd leadership not handed over", "host", n.Name, "err", err)
	}
	return moved
}

// etcdMemberCertFiles are the paths of an etcd member's own certificates and keys on its host,
// and the etcd CA's key, which a master of a cluster with an external etcd does not hold
// (kubeadm's external etcd; the CA's certificate stays, the API server trusts it).
func etcdMemberCertFiles() []string {
	out := []string{path.Join(hostpath.PKIDir, "etcd", "ca.key")}
	for _, s := range pki.Table() {
		if s.EtcdMember() {
			base := path.Join(hostpath.PKIDir, s.BaseName)
			out = append(out, base+".crt", base+".key")
		}
	}
	return out
}
