package bundle

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestPruneRemovesOnlyLongUnusedArtifacts(t *testing.T) {
	old := time.Now().Add(-30 * 24 * time.Hour)
	root := t.TempDir()
	mk := func(name string, used time.Time) string {
		d := filepath.Join(root, name)
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, recipeFile), []byte("r"), 0o444)
		os.Chtimes(filepath.Join(d, recipeFile), used, used)
		return d
	}
	keep := mk("v1.36.3-aaaaaaaaaaaa", old)
	stale := mk("v1.36.3-bbbbbbbbbbbb", old)
	recent := mk("v1.36.2-cccccccccccc", time.Now())
	building := filepath.Join(root, ".v1.36.3.tmp-1")
	os.MkdirAll(building, 0o755)
	pruneBinaries(root, keep)
	for p, want := range map[string]bool{keep: true, stale: false, recent: true, building: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s exists=%v, want %v", filepath.Base(p), err == nil, want)
		}
	}

	dir := t.TempDir()
	img := func(name string, used time.Time) string {
		base := filepath.Join(dir, name)
		os.WriteFile(base+".tar", []byte("t"), 0o444)
		os.WriteFile(base+".json", []byte("{}"), 0o644)
		os.Chtimes(base+".json", used, used)
		return base
	}
	cur := img("etcd-1111", old)
	gone := img("etcd-2222", old)
	fresh := img("etcd-3333", time.Now())
	other := img("coredns-4444", old)
	pruneImages(dir, "etcd", cur)
	for p, want := range map[string]bool{cur: true, gone: false, fresh: true, other: true} {
		if _, err := os.Stat(p + ".tar"); (err == nil) != want {
			t.Errorf("%s.tar exists=%v, want %v", filepath.Base(p), err == nil, want)
		}
	}
}
