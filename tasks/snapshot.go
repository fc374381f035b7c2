package tasks

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/kforge/kforge/etcd"
	"github.com/kforge/kforge/etcd/snapshotfile"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/internal/fsx"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/state"
)

// EtcdSnapshot is one `kforge etcd snapshot`: a snapshot streamed from a healthy etcd member
// through its master's SSH connection into the state dir, verified before it is kept, recorded
// (revision, keys, size, sha256, versions), and the oldest beyond Keep deleted. With Fetch it
// takes none: it copies one the masters' timers took (etcdsnapshots.go) the same way, checked
// against that snapshot's record. It never buffers the snapshot: memory stays flat whatever the
// database's size.
type EtcdSnapshot struct {
	etcdAccess
	inv *inventory.Cluster
	so  SnapshotOptions

	member    string         // member (find, with Fetch): the healthy master it streams from (that holds the scheduled snapshot)
	fetchFrom state.Snapshot // find: the scheduled snapshot to fetch, its File the path on member
	status    etcd.Status
	// Saved is the snapshot's record, filled by save.
	Saved state.Snapshot
	// Pruned are the files keep deleted.
	Pruned []string
}

// SnapshotOptions are what `kforge etcd snapshot` is asked.
type SnapshotOptions struct {
	// Keep is how many snapshots the state dir keeps (the newest); at least 1.
	Keep int
	// Out, when set, is where a copy of the verified snapshot is also written (-o FILE).
	Out string
	// Kubernetes is the version the snapshot is recorded with, when the cluster does not run
	// the inventory's yet (before an upgrade, what it runs still); "" is the inventory's.
	Kubernetes string
	// Fetch copies a scheduled snapshot the masters took (etcdSnapshots) instead of taking one:
	// the newest of all masters', or the one named Name.
	Fetch bool
	Name  string
}

// DefaultSnapshotKeep is how many snapshots the state dir keeps unless told.
const DefaultSnapshotKeep = 5

// NewEtcdSnapshot prepares a snapshot of c's etcd.
func NewEtcdSnapshot(c *inventory.Cluster, o Options, so SnapshotOptions) *EtcdSnapshot {
	if so.Keep < 1 {
		so.Keep = DefaultSnapshotKeep
	}
	return &EtcdSnapshot{etcdAccess: newEtcdAccess(c, o), inv: c, so: so}
}

// Steps is etcd snapshot, top to bottom.
func (x *EtcdSnapshot) Steps() []Step {
	masters := x.fleet.Names(x.role)
	var l list
	if !x.so.Fetch {
		l.add("credentials", OnWorkstation, nil, x.credentials, "read the etcd CA and the apiserver-etcd-client certificate from the state dir")
	}
	l.add("connect", OnHosts, masters, x.reach, "connect to %s over SSH; masters that do not answer within %s are skipped", count(len(masters), "master"), etcdReachTimeout)
	if x.so.Fetch {
		which := "the newest of all masters' scheduled snapshots"
		if x.so.Name != "" {
			which = "the scheduled snapshot " + x.so.Name
		}
		l.add("find", OnHosts, masters, x.find, "read the records of the scheduled snapshots in %s on every master, and pick %s", hostpath.EtcdSnapshotDir, which)
		l.add("fetch", OnWorkstation, nil, x.fetch, "copy it through SSH into %s, check its sha256 against its record and verify it (bbolt integrity, revision and keys, with etcdutl's library), then keep it under its name with its record", x.o.State.Snapshots())
	} else {
		l.add("member", OnHosts, masters, x.pickMember, "pick a healthy etcd member (it answers with a leader and no error)")
		l.add("save", OnWorkstation, nil, x.save, "stream its snapshot through SSH into %s, verify it (sha256 trailer, bbolt integrity, revision and keys, with etcdutl's library), then keep it under its final name with its record", x.o.State.Snapshots())
	}
	l.add("keep", OnWorkstation, nil, x.keep, "delete all but the newest %d snapshots, and leftovers of interrupted saves", x.so.Keep)
	if x.so.Out != "" {
		l.add("copy", OnWorkstation, nil, x.copyOut, "copy the verified snapshot to %s", x.so.Out)
	}
	return l
}

func (x *EtcdSnapshot) pickMember(ctx context.Context, r progress.Reporter) error {
	rep, err := surveyEtcd(ctx, x.fleet, x.role, x.creds, x.unreachable)
	if err != nil {
		return err
	}
	for _, m := range rep.Members {
		if m.Healthy {
			x.member, x.status = m.Master, m.status
			r(progress.Event{Kind: progress.HostDone, Host: m.Master, Message: fmt.Sprintf("etcd %s, revision %d, database %s", m.Version, m.Revision, mib(m.DBSize))})
			return nil
		}
	}
	return &NoHealthyMemberError{Report: rep}
}

// NoHealthyMemberError is an etcd with no member to take a snapshot from.
type NoHealthyMemberError struct{ Report EtcdReport }

func (e *NoHealthyMemberError) Error() string {
	s := "no healthy etcd member to take a snapshot from:"
	for _, m := range e.Report.Members {
		s += fmt.Sprintf(" %s: %s;", m.Master, m.Problem)
	}
	return s[:len(s)-1]
}

// Details are the message and the way out, for kforge's error printer.
func (e *NoHealthyMemberError) Details() []string {
	hint := "kforge etcd status shows each member's state"
	if e.Report.Advice != "" {
		hint = e.Report.Advice
	}
	return []string{e.Error(), "  hint: " + hint}
}

func (x *EtcdSnapshot) save(ctx context.Context, r progress.Reporter) error {
	c, err := newEtcdClient(ctx, x.fleet, x.creds, x.member)
	if err != nil {
		return err
	}
	defer c.Close()
	start := x.o.Now()
	name := state.SnapshotName(start)
	f, err := x.o.State.NewSnapshotFile(name)
	if err != nil {
		return err
	}
	defer f.Abort()
	var written atomic.Int64
	stop := progress.Every(r, 8*time.Second, func(elapsed time.Duration) progress.Event {
		return progress.Event{Kind: progress.Info, Host: x.member, Message: fmt.Sprintf("%s received in %s", mib(written.Load()), progress.Round(elapsed))}
	})
	n, err := c.Snapshot(ctx, &countWriter{w: f, n: &written})
	stop()
	if err != nil {
		return err
	}
	took := x.o.Now().Sub(start)
	info, err := snapshotfile.Verify(f.Name())
	if err != nil {
		return err
	}
	if info.Size != n {
		return fmt.Errorf("snapshot: %d bytes streamed, %d in %s", n, info.Size, f.Name())
	}
	if err := f.Commit(); err != nil {
		return err
	}
	x.Saved = state.Snapshot{
		File: filepath.Join(x.o.State.Snapshots(), name+".db"), Time: start.UTC(), Member: x.member, Etcd: x.status.Version,
		Kubernetes: cmp.Or(x.so.Kubernetes, x.inv.KubernetesVersion), Revision: info.Revision, TotalKeys: info.TotalKeys, Size: info.Size, SHA256: info.SHA256,
	}
	if err := x.o.State.RecordSnapshot(x.Saved); err != nil {
		return err
	}
	r(progress.Event{Kind: progress.HostDone, Host: x.member, Duration: took,
		Message: fmt.Sprintf("%s streamed and verified: revision %d, %d keys, sha256 %s", mib(info.Size), info.Revision, info.TotalKeys, info.SHA256)})
	return nil
}

func (x *EtcdSnapshot) keep(_ context.Context, r progress.Reporter) error {
	gone, err := x.o.State.PruneSnapshots(x.so.Keep)
	x.Pruned = gone
	for _, g := range gone {
		r(progress.Event{Kind: progress.Info, Message: "deleted " + g})
	}
	return err
}

// copyOut copies the kept snapshot to Out atomically and checks the copy's sha256.
func (x *EtcdSnapshot) copyOut(context.Context, progress.Reporter) error {
	src, err := os.Open(x.Saved.File)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := fsx.Create(x.so.Out, 0o600)
	if err != nil {
		return fmt.Errorf("-o %s: %w", x.so.Out, err)
	}
	defer dst.Abort()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(dst, h), src); err != nil {
		return fmt.Errorf("-o %s: %w", x.so.Out, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != x.Saved.SHA256 {
		return fmt.Errorf("-o %s: the snapshot changed while it was copied (sha256 %s, recorded %s)", x.so.Out, got, x.Saved.SHA256)
	}
	return dst.Commit()
}

// countWriter counts the bytes written through it, for the progress line.
type countWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// mib formats a byte count in MiB.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
