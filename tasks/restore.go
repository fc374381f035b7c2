package tasks

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/kube"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kforge/kforge/etcd"
	"github.com/kforge/kforge/etcd/snapshotfile"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/scripts"
	"github.com/kforge/kforge/templates"
)

// `kforge restore --snapshot FILE` rebuilds the control plane from an etcd snapshot on the
// inventory's masters (or its etcd group's hosts, with an external etcd), which may be new hosts
// with new addresses. Its list (Restore.Steps) is apply's way of bringing a cluster up, called
// step by step, with restore's own steps around it: the snapshot is verified before any host is touched; etcd must have lost its quorum
// (unless forced); after the PKI step (which issues the new hosts' certificates from the central
// CAs) every member's kubelet and containers stop and its etcd data is replaced by the snapshot,
// restored on the workstation with etcdutl's library as one new cluster of the inventory's
// members (with an external etcd, the masters' kubelet and containers stop too: no API server
// goes on with what it cached of the etcd before). The control plane then starts on the restored data, the
// surviving workers' kubelet.conf and kube-proxy follow the new endpoint, and the lost hosts
// (hosts of the last apply that the inventory no longer lists) are forgotten: their nodes and
// pods deleted without a drain, since they are gone, and the hosts reset if they answer.

// RestoreOptions are what `kforge restore` is asked.
type RestoreOptions struct {
	// Snapshot is the snapshot file (kforge etcd snapshot).
	Snapshot string
	// Force restores although the masters' etcd still has quorum, discarding what it holds.
	Force bool
}

// Restore is one `kforge restore`. The fields below rc are what one step makes for later ones.
type Restore struct {
	rc     *runContext
	ro     RestoreOptions
	target *hop              // bundle reads its manifest, render its files
	info   snapshotfile.Info // snapshot: the verified snapshot
	up     *bringUp          // stage and the steps after it; every etcd member starts new
	lost   jobs              // forget-lost: the resets of the lost hosts that answer after all
}

// NewRestore prepares a restore of c's control plane from a snapshot. o.Removed are the hosts
// of the last apply that the inventory no longer lists (the lost masters among them).
func NewRestore(c *inventory.Cluster, o Options, ro RestoreOptions) *Restore {
	rc := newRunContext(c, c.Hosts(), o)
	x := &Restore{rc: rc, ro: ro, target: newHop(rc)}
	x.up = &bringUp{t: x.target, etcd: &etcdPlan{anew: true}}
	return x
}

// Steps is restore, top to bottom.
func (x *Restore) Steps() []Step {
	rc, t := x.rc, x.target
	c, f := rc.inv, rc.fleet
	all, masters, members := f.Names(""), f.Names(inventory.RoleMaster), f.Names(c.EtcdRole())
	lost := fleet.Names(rc.o.Removed)
	stopped := members // restore-etcd stops them
	if c.ExternalEtcd() {
		stopped = append(slices.Clone(members), masters...)
	}
	var l list
	l.add("snapshot", OnWorkstation, nil, x.verifySnapshot, "verify %s before any host is touched: its sha256, bbolt's integrity check, its revision (etcdutl's library)", x.ro.Snapshot)
	l.add("connect", OnHosts, all, f.Connect, "connect to %s over SSH (host keys verified) and gather facts in one round trip each", count(len(all), "host"))
	l.add("quorum", OnHosts, members, x.checkQuorumLost, "refuse when the %s' etcd still has quorum (a restore would discard what it holds; --force restores anyway)", etcdHostsWord(c))
	if c.Bundle != "" {
		l.add("bundle", OnWorkstation, nil, t.readBundle, "read the bundle's manifest in %s: its release of Kubernetes %s, platform, files and images", c.Bundle, c.KubernetesVersion)
	}
	l.add("preflight", OnHosts, all, t.preflight, "run kubeadm's preflight checks on every host before anything changes")
	l.add("etcd-user", OnHosts, members, rc.etcdUser, "make the system user etcd runs as where it is missing, and give it %s (0700)", hostpath.EtcdDataDir)
	l.add("pki", OnWorkstation, nil, rc.ensurePKI, "generate or reuse the cluster's certificates (%s), kubeconfigs and bootstrap token in the state dir", c.PKI.KeyAlgorithm)
	l.add("restore-etcd", OnHosts, stopped, x.restoreEtcd, "on %s: stop kubelet and containers; on %s replace %s with the snapshot, restored on the workstation as one new etcd cluster of the inventory's %s (revision +1e9, compacted)", strings.Join(stopped, ", "), strings.Join(members, ", "), hostpath.EtcdDataDir, etcdHostsWord(c))
	l.add("render", OnWorkstation, nil, func(context.Context, progress.Reporter) error {
		// Every member starts on the restored data as one new cluster (the restored plan), and
		// the lost masters are not in it: the control plane is the inventory's alone, and the
		// files restore writes are those the next apply wants.
		return t.render(*x.up.etcd, 0)
	}, "render static-pod manifests, kubelet and containerd configuration for every host; every etcd member starts on the restored data as one new cluster")
	x.up.startSteps(&l)
	if len(lost) > 0 {
		// Right away: the restored cluster still holds the lost hosts' nodes and pods, which
		// controllers (DaemonSet rollouts, the readiness wait) would otherwise wait on.
		l.add("forget-lost", OnHosts, lost, x.forgetLost, "delete the nodes of %s (not in the inventory: lost before the restore) and their pods, without a drain, so their controllers replace them at once; start resetting those hosts that still answer", strings.Join(lost, ", "))
	}
	x.up.clusterSteps(&l)
	if len(lost) > 0 {
		l.add("reset-lost", OnHosts, lost, func(ctx context.Context, _ progress.Reporter) error { return x.lost.wait(ctx) }, "wait for the reset of the lost hosts that answer after all (started by forget-lost)")
	}
	x.up.tidySteps(&l)
	l.add("record-hosts", OnWorkstation, nil, func(context.Context, progress.Reporter) error {
		return recordHosts(rc, nil)
	}, "record the cluster's hosts in the state dir, to find hosts later removed from the inventory")
	return l
}

// Traffic is the bytes the run's SSH connections sent and received so far.
func (x *Restore) Traffic() (sent, received int64) { return x.rc.fleet.Traffic() }

// Close waits for the work left running in the background, then ends every connection.
func (x *Restore) Close() {
	x.up.staged.waitAll()
	_ = x.lost.wait(context.Background())
	x.rc.fleet.Close()
}

// Explain adds to an error of restore's steps how to look at the cluster.
func (x *Restore) Explain(err error) error { return x.rc.explain(err) }

// verifySnapshot refuses a snapshot that does not verify, before any host is touched.
func (x *Restore) verifySnapshot(context.Context, progress.Reporter) error {
	info, err := snapshotfile.Verify(x.ro.Snapshot)
	if err != nil {
		return err
	}
	x.info = info
	return nil
}

// checkQuorumLost refuses to restore over an etcd that still has quorum on the masters: that
// would throw away everything written since the snapshot. New hosts have no etcd at all.
func (x *Restore) checkQuorumLost(ctx context.Context, r progress.Reporter) error {
	creds, err := loadEtcdCredentials(x.rc.o)
	if err != nil {
		return err
	}
	rep, err := surveyEtcd(ctx, x.rc.fleet, x.rc.inv.EtcdRole(), creds, nil)
	if err != nil {
		return err
	}
	for _, m := range rep.Members {
		msg := "no etcd answering"
		if m.Healthy {
			msg = fmt.Sprintf("etcd member healthy at revision %d", m.Revision)
		}
		r(progress.Event{Kind: progress.HostDone, Host: m.Master, Message: msg})
	}
	if !rep.Quorum {
		return nil
	}
	if x.ro.Force {
		r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("etcd has quorum (%d of %d members healthy); --force: restoring over it", rep.Healthy, rep.Voters)})
		return nil
	}
	return &QuorumError{Report: rep}
}

// QuorumError refuses a restore over an etcd that still has quorum.
type QuorumError struct{ Report EtcdReport }

func (e *QuorumError) Error() string {
	return fmt.Sprintf("etcd still has quorum (%d of %d members healthy, leader %s): a restore would discard everything written since the snapshot",
		e.Report.Healthy, e.Report.Voters, e.Report.Leader)
}

// Details are the message and what to do, for kforge's error printer.
func (e *QuorumError) Details() []string {
	return []string{e.Error(), "  hint: a cluster with quorum is repaired with kforge apply (replace lost members one at a time); restore anyway with kforge restore --force"}
}

// restoreEtcd replaces every member's etcd data with the snapshot: each member is restored on
// the workstation (etcdutl's library: new membership of the inventory's members, revision
// bumped and compacted), its kubelet and containers stop (an etcd still running would hold the
// data directory and its ports), and the data directory is streamed to it as a compressed tar
// and swapped in. With an external etcd the masters' kubelet and containers stop as well.
func (x *Restore) restoreEtcd(ctx context.Context, r progress.Reporter) error {
	rc := x.rc
	var members []string
	for _, m := range rc.inv.EtcdMembers() {
		members = append(members, templates.EtcdMember(m.Name, m.NodeIP()))
	}
	tmp, err := os.MkdirTemp("", "kforge-restore-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	token := fmt.Sprintf("kforge-restore-%d", rc.o.Now().Unix())
	if rc.inv.ExternalEtcd() {
		if err := rc.fleet.Each(ctx, inventory.RoleMaster, func(ctx context.Context, n inventory.Node, h remote.Host) error {
			stopped, err := stopControlPlane(ctx, rc.inv, h)
			if err == nil {
				r(progress.Event{Kind: progress.HostDone, Host: n.Name, Message: stopped})
			}
			return err
		}); err != nil {
			return err
		}
	}
	return rc.fleet.Each(ctx, rc.inv.EtcdRole(), func(ctx context.Context, n inventory.Node, h remote.Host) error {
		start := rc.o.Now()
		dir := filepath.Join(tmp, n.Name)
		if err := etcd.RestoreDataDir(etcd.Restore{Snapshot: x.ro.Snapshot, DataDir: dir, Name: n.Name,
			PeerURL: templates.EtcdPeerURL(n.NodeIP()), InitialCluster: strings.Join(members, ","), Token: token}); err != nil {
			return err
		}
		stopped, err := stopControlPlane(ctx, rc.inv, h)
		if err != nil {
			return err
		}
		if err := pushDataDir(ctx, h, dir, x.rc.etcdOwner(n.Name)); err != nil {
			return err
		}
		r(progress.Event{Kind: progress.HostDone, Host: n.Name, Duration: rc.o.Now().Sub(start),
			Message: fmt.Sprintf("%s; etcd data restored (revision %d, +%d)", stopped, x.info.Revision, etcd.RestoreBump)})
		return nil
	})
}

// forgetLost deletes the nodes of the hosts lost before the restore, and their pods, so their
// controllers replace them at once: a lost host is not drained (its pods are gone with it), and
// a lost master's etcd member is not in the restored cluster. Whether a lost host answers
// after all is seen in the background (a dial to a host that is gone waits for its timeout)
// while the cluster comes back: those that answer are reset; reset-lost waits for it.
func (x *Restore) forgetLost(ctx context.Context, r progress.Reporter) error {
	rc := x.rc
	api, err := rc.clients()
	if err != nil {
		return err
	}
	for _, n := range rc.o.Removed {
		o := rc.o
		o.DialRetry = 5 * time.Second
		x.lost.start(func() error {
			msg, err := resetRemoved(ctx, rc.inv, n, o, r)
			if err != nil {
				return fmt.Errorf("%s: reset: %w", n.Name, err)
			}
			r(progress.Event{Kind: progress.HostDone, Host: n.Name, Message: msg})
			return nil
		})
		did := []string{"lost before the restore: not drained"}
		if deleted, err := kube.DeleteNode(ctx, api.Typed, n.Name); err != nil {
			return err
		} else if deleted {
			did = append(did, "node deleted")
		}
		pods, err := kube.DeletePodsOfLostNode(ctx, api.Typed, n.Name)
		if err != nil {
			return err
		}
		if pods > 0 {
			did = append(did, count(pods, "pod")+" deleted")
		}
		r(progress.Event{Kind: progress.HostDone, Host: n.Name, Message: strings.Join(did, "; ")})
	}
	return nil
}

// stopControlPlane stops kubelet and every container of containerd's k8s.io namespace on a
// master, as reset does, and says what it did.
func stopControlPlane(ctx context.Context, c *inventory.Cluster, h remote.Host) (string, error) {
	changed, _, err := runReset(ctx, h, stopKubeletScript)
	if err != nil {
		return "", err
	}
	removed, _, err := removeContainers(ctx, h, (&Reset{inv: c}).containerdEnv())
	if err != nil {
		return "", err
	}
	return summary(append(changed, removed...), "nothing running"), nil
}

// swapDataDirScript unpacks the restored member directory beside etcd's data directory, then
// swaps it in: the old member directory goes only once the new one is complete; it is owner's
// ("uid:gid" of the etcd user, or "" for root).
func swapDataDirScript(owner string) string {
	return scripts.Command("restore-etcd-data", "dir", hostpath.EtcdDataDir, "owner", owner)
}

// pushDataDir streams dir's member directory to the host's etcd data directory, for owner.
func pushDataDir(ctx context.Context, h remote.Host, dir, owner string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTarGz(pw, dir)) }()
	err := h.Run(ctx, remote.Cmd{Command: swapDataDirScript(owner), Stdin: pr})
	pr.CloseWithError(err)
	if err != nil {
		return fmt.Errorf("push the restored etcd data to %s: %w", hostpath.EtcdDataDir, err)
	}
	return nil
}

// writeTarGz writes dir's tree as a gzip-compressed tar (etcd's preallocated WAL is mostly
// zeros and shrinks to almost nothing).
func writeTarGz(w io.Writer, dir string) error {
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = filepath.ToSlash(rel), 0, 0, "root", "root"
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}
