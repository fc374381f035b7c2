package bundle

import (
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Cached artifacts no build has used for this long are removed by the next build of the same
// component: superseded recipes (a kforge upgrade) and image archives of older inputs.
const (
	binariesUnusedFor = 7 * 24 * time.Hour
	imagesUnusedFor   = 24 * time.Hour
)

// touch records that a cached artifact was used (its mtime is its last use).
func touch(p string) {
	now := time.Now()
	_ = os.Chtimes(p, now, now)
}

// pruneBinaries removes build directories under root other than keep whose recipe file was
// last used more than binariesUnusedFor ago. Errors are ignored: pruning is housekeeping.
func pruneBinaries(root, keep string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(root, e.Name())
		if !e.IsDir() || p == keep || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		st, err := os.Stat(filepath.Join(p, recipeFile))
		if err != nil || time.Since(st.ModTime()) < binariesUnusedFor {
			continue
		}
		_ = os.RemoveAll(p)
	}
}

// pruneImages removes the cached archives of component in dir other than keep (a path without
// extension) that were last used more than imagesUnusedFor ago.
func pruneImages(dir, component, keep string) {
	matches, _ := filepath.Glob(filepath.Join(dir, component+"-*.json"))
	for _, j := range matches {
		base := strings.TrimSuffix(j, ".json")
		if base == keep {
			continue
		}
		st, err := os.Stat(j)
		if err != nil || time.Since(st.ModTime()) < imagesUnusedFor {
			continue
		}
		_ = os.Remove(base + ".tar")
		_ = os.Remove(j)
	}
}
