package state

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestSnapshots: a snapshot is listed once committed and recorded, oldest first; prune keeps
// the newest and removes leftovers of interrupted saves (an uncommitted temporary file, a
// committed file without its record), never a recorded one it keeps.
func TestSnapshots(t *testing.T) {
	d := At(t.TempDir())
	base := time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC)
	save := func(at time.Time, rev int64) Snapshot {
		t.Helper()
		name := SnapshotName(at)
		f, err := d.NewSnapshotFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString("db"); err != nil {
			t.Fatal(err)
		}
		if err := f.Commit(); err != nil {
			t.Fatal(err)
		}
		s := Snapshot{File: filepath.Join(d.Snapshots(), name+".db"), Time: at, Member: "m1", Revision: rev}
		if err := d.RecordSnapshot(s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for i := range 4 { // saved out of order: listing sorts by time
		save(base.Add(time.Duration((i*3)%4)*time.Minute), int64(100+i))
	}
	// An interrupted stream, and a snapshot killed before its record.
	pending, err := d.NewSnapshotFile(SnapshotName(base.Add(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	pending.WriteString("partial")
	orphan := filepath.Join(d.Snapshots(), SnapshotName(base.Add(2*time.Hour))+".db")
	if err := os.WriteFile(orphan, []byte("db"), 0o600); err != nil {
		t.Fatal(err)
	}

	all, err := d.ListSnapshots()
	if err != nil {
		t.Fatal(err)
	}
	var revs []int64
	for _, s := range all {
		revs = append(revs, s.Revision)
	}
	if !slices.Equal(revs, []int64{100, 103, 102, 101}) { // minutes 0, 1, 2, 3
		t.Fatalf("listed revisions %v, want oldest first [100 103 102 101]", revs)
	}

	gone, err := d.PruneSnapshots(2)
	if err != nil {
		t.Fatal(err)
	}
	if len(gone) != 4 {
		t.Errorf("pruned %v; want the 2 oldest, the temporary file and the orphan", gone)
	}
	left, _ := d.ListSnapshots()
	if len(left) != 2 || left[0].Revision != 102 || left[1].Revision != 101 {
		t.Errorf("left %+v; want revisions 102 and 101", left)
	}
	entries, _ := os.ReadDir(d.Snapshots())
	if len(entries) != 4 { // two .db and two .json
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("snapshots dir holds %v; want two snapshots with their records", names)
	}
}
