package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kforge/kforge/internal/fsx"
)

// Snapshot is the record of one etcd snapshot kept in the state dir: <snapshots>/<name>.db with
// <name>.json beside it. A .db without its record is not listed (an interrupted save).
type Snapshot struct {
	File       string    `json:"file"` // the .db file's path (not stored: filled when read)
	Time       time.Time `json:"time"`
	Member     string    `json:"member"`     // the master whose etcd member streamed it
	Etcd       string    `json:"etcd"`       // that member's etcd version
	Kubernetes string    `json:"kubernetes"` // the inventory's kubernetesVersion
	Revision   int64     `json:"revision"`
	TotalKeys  int       `json:"totalKeys"`
	Size       int64     `json:"size"`
	SHA256     string    `json:"sha256"`
}

// SnapshotName is the base name of a snapshot taken at t.
func SnapshotName(t time.Time) string {
	return "etcd-" + t.UTC().Format("20060102-150405.000")
}

// NewSnapshotFile starts writing a snapshot into the snapshots directory (atomically: it
// lands under its final name when the caller commits it, once verified).
func (d Dir) NewSnapshotFile(name string) (*fsx.Pending, error) {
	return fsx.Create(filepath.Join(d.Snapshots(), name+".db"), 0o600)
}

// RecordSnapshot writes s's record beside its file; from then on it is listed.
func (d Dir) RecordSnapshot(s Snapshot) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return d.Write(strings.TrimSuffix(s.File, ".db")+".json", data, 0o600)
}

// ListSnapshots lists the recorded snapshots, oldest first.
func (d Dir) ListSnapshots() ([]Snapshot, error) {
	entries, err := os.ReadDir(d.Snapshots())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Snapshot
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(name, ".") {
			continue
		}
		path := filepath.Join(d.Snapshots(), e.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var s Snapshot
		if err := json.Unmarshal(data, &s); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		s.File = filepath.Join(d.Snapshots(), name+".db")
		if _, err := os.Stat(s.File); err != nil {
			continue // the snapshot was deleted by hand; its record alone is no snapshot
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Snapshot) int { return a.Time.Compare(b.Time) })
	return out, nil
}

// PruneSnapshots deletes the oldest recorded snapshots beyond the newest keep, and files of
// interrupted saves, and returns what it deleted.
func (d Dir) PruneSnapshots(keep int) ([]string, error) {
	all, err := d.ListSnapshots()
	if err != nil {
		return nil, err
	}
	var gone []string
	for i := 0; i < len(all)-keep; i++ {
		db := all[i].File
		if err := os.Remove(strings.TrimSuffix(db, ".db") + ".json"); err != nil {
			return gone, err
		}
		if err := os.Remove(db); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return gone, err
		}
		gone = append(gone, filepath.Base(db))
	}
	// Temporary files of saves that never committed (a run killed mid-stream), and snapshots a
	// run killed before it recorded them; the state dir's lock says no save is running now.
	leftover, _ := filepath.Glob(filepath.Join(d.Snapshots(), ".*.tmp-*"))
	dbs, _ := filepath.Glob(filepath.Join(d.Snapshots(), "*.db"))
	for _, db := range dbs {
		if _, err := os.Stat(strings.TrimSuffix(db, ".db") + ".json"); errors.Is(err, fs.ErrNotExist) {
			leftover = append(leftover, db)
		}
	}
	for _, f := range leftover {
		if err := os.Remove(f); err == nil {
			gone = append(gone, filepath.Base(f))
		}
	}
	return gone, nil
}
