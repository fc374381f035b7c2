package tasks

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/kforge/kforge/etcd"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/scripts"
	"github.com/kforge/kforge/templates"
)

// `kforge restore --snapshot FILE` rebuilds the control plane from an etcd snapshot on the
// inventory's masters, which may be new hosts with new addresses. It is apply with three more
// steps (see Apply.Steps): the snapshot is verified before any host is touched; the masters'
// etcd must have lost its quorum (unless forced); and after the PKI step (which issues the new
// masters' certificates from the central CAs) every master's kubelet and containers stop and
// its etcd data is replaced by the snapshot, restored on the workstation with etcdutl's
// library as one new cluster of the inventory's masters. The rest is apply: the control plane
// starts on the restored data, the surviving workers' kubelet.conf and kube-proxy follow the
// new endpoint, and the lost masters (hosts of the last apply that the inventory no longer
// lists) are pruned: their nodes deleted, without a drain, since they are gone.

// RestoreOptions are what `kforge restore` is asked.
type RestoreOptions struct {
	// Snapshot is the snapshot file (kforge etcd snapshot).
	Snapshot string
	// Force restores although the masters' etcd still has quorum, discarding what it holds.
	Force bool
}

// restoreRun is a restore's part of Apply.
type restoreRun struct {
	RestoreOptions
	info etcd.SnapshotInfo // snapshot: the verified snapshot
}

// NewRestore prepares a restore of c's control plane from a snapshot: apply's steps with the
// restore's. o.Removed are the hosts of the last apply that the inventory no longer lists (the
// lost masters among them); they are pruned.
func NewRestore(c *inventory.Cluster, o Options, ro RestoreOptions) *Apply {
	o.Prune = true
	a := NewApply(c, o)
	a.restore = &restoreRun{RestoreOptions: ro}
	return a
}

// verifySnapshot refuses a snapshot that does not verify, before any host is touched.
func (a *Apply) verifySnapshot(context.Context, progress.Reporter) error {
	info, err := etcd.VerifySnapshot(a.restore.Snapshot)
	if err != nil {
		return err
	}
	a.restore.info = info
	return nil
}

// checkQuorumLost refuses to restore over an etcd that still has quorum on the masters: that
// would throw away everything written since the snapshot. New hosts have no etcd at all.
func (a *Apply) checkQuorumLost(ctx context.Context, r progress.Reporter) error {
	creds, err := loadEtcdCredentials(a.o)
	if err != nil {
		return err
	}
	rep, err := surveyEtcd(ctx, a.fleet, creds, nil)
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
	if a.restore.Force {
		r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("etcd has quorum (%d of %d members healthy); --force: restoring over it", rep.Healthy, rep.Voters)})
		return nil
	}
	return &QuorumError{Report: rep}
}

// QuorumError refuses a restore over an etcd that still has quorum.
type QuorumError struct{ Report EtcdReport }

func (e *QuorumError) Error() string {
	return fmt.Sprintf("etcd still has quorum on the masters (%d of %d members healthy, leader %s): a restore would discard everything written since the snapshot",
		e.Report.Healthy, e.Report.Voters, e.Report.Leader)
}

// Details are the message and what to do, for kforge's error printer.
func (e *QuorumError) Details() []string {
	return []string{e.Error(), "  hint: a cluster with quorum is repaired with kforge apply (replace lost masters one at a time); restore anyway with kforge restore --force"}
}

// restoreEtcd replaces every master's etcd data with the snapshot: each master's member is
// restored on the workstation (etcdutl's library: new membership of the inventory's masters,
// revision bumped and compacted), its kubelet and containers stop (an etcd still running would
// hold the data directory and its ports), and the data directory is streamed to it as a
// compressed tar and swapped in.
func (a *Apply) restoreEtcd(ctx context.Context, r progress.Reporter) error {
	masters := a.fleet.Nodes(inventory.RoleMaster)
	var members []string
	for _, m := range masters {
		members = append(members, templates.EtcdMember(m.Name, m.NodeIP()))
	}
	tmp, err := os.MkdirTemp("", "kforge-restore-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	token := fmt.Sprintf("kforge-restore-%d", a.o.Now().Unix())
	return a.fleet.Each(ctx, inventory.RoleMaster, func(ctx context.Context, n inventory.Node, h remote.Host) error {
		start := a.o.Now()
		dir := filepath.Join(tmp, n.Name)
		if err := etcd.RestoreDataDir(etcd.Restore{Snapshot: a.restore.Snapshot, DataDir: dir, Name: n.Name,
			PeerURL: templates.EtcdPeerURL(n.NodeIP()), InitialCluster: strings.Join(members, ","), Token: token}); err != nil {
			return err
		}
		stopped, err := stopControlPlane(ctx, a.inv, h)
		if err != nil {
			return err
		}
		if err := pushDataDir(ctx, h, dir); err != nil {
			return err
		}
		r(progress.Event{Kind: progress.HostDone, Host: n.Name, Duration: a.o.Now().Sub(start),
			Message: fmt.Sprintf("%s; etcd data restored (revision %d, +%d)", stopped, a.restore.info.Revision, etcd.RestoreBump)})
		return nil
	})
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
// swaps it in: the old member directory goes only once the new one is complete.
var swapDataDirScript = scripts.Command("restore-etcd-data", "dir", hostpath.EtcdDataDir)

// pushDataDir streams dir's member directory to the host's etcd data directory.
func pushDataDir(ctx context.Context, h remote.Host, dir string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTarGz(pw, dir)) }()
	err := h.Run(ctx, remote.Cmd{Command: swapDataDirScript, Stdin: pr})
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
