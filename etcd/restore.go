package etcd

import (
	"fmt"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// RestoreBump is how far a restore moves the key-value store's revision forward, and marks it
// compacted, as etcd's guide for Kubernetes asks: watchers (kubelets, controllers, informers)
// then see a revision that only grew and list again, instead of waiting for revisions the
// restored store will not reach for a long time.
const RestoreBump = 1_000_000_000

// Restore is one member's data directory restored from a snapshot.
type Restore struct {
	Snapshot string // a snapshot file (snapshotfile.Verify it first)
	DataDir  string // the new data directory on this machine; must not exist or be empty
	Name     string // the member's name (the master's)
	PeerURL  string // the member's peer URL
	// InitialCluster lists every member of the restored cluster, "name=peerURL,...", and Token
	// names the new cluster: every member of one restore is given the same two.
	InitialCluster string
	Token          string
}

// RestoreDataDir writes a member's data directory from a snapshot with etcdutl's own library
// (`etcdutl snapshot restore`): the snapshot's sha256 is checked, the revision bumped by
// RestoreBump and marked compacted, and the membership replaced by InitialCluster.
func RestoreDataDir(r Restore) error {
	err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        r.Snapshot,
		Name:                r.Name,
		OutputDataDir:       r.DataDir,
		PeerURLs:            []string{r.PeerURL},
		InitialCluster:      r.InitialCluster,
		InitialClusterToken: r.Token,
		RevisionBump:        RestoreBump,
		MarkCompacted:       true,
	})
	if err != nil {
		return fmt.Errorf("restore %s's etcd data from %s: %w", r.Name, r.Snapshot, err)
	}
	return nil
}
