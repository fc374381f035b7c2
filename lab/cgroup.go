package lab

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// hierarchy is one mounted cgroup hierarchy and this process's cgroup in it.
type hierarchy struct {
	dir    string // this process's cgroup directory in the hierarchy
	cpuset bool
}

// cgroupHierarchies finds every cgroup hierarchy (each v1 controller, name=systemd, the unified
// one) and this process's place in it: a host's cgroups are made below the caller's own, so they
// stay inside any limit the caller runs under.
func cgroupHierarchies() ([]hierarchy, error) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	type mnt struct{ root, point, fstype, opts string }
	var mounts []mnt
	for _, line := range strings.Split(string(mi), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 || (g[0] != "cgroup" && g[0] != "cgroup2") {
			continue
		}
		mounts = append(mounts, mnt{root: unescapeMount(f[3]), point: unescapeMount(f[4]), fstype: g[0], opts: g[2]})
	}
	// Prefer the canonical mounts under /sys/fs/cgroup.
	sort.SliceStable(mounts, func(i, j int) bool {
		return strings.HasPrefix(mounts[i].point, "/sys/fs/cgroup") && !strings.HasPrefix(mounts[j].point, "/sys/fs/cgroup")
	})
	var out []hierarchy
	for _, line := range strings.Split(strings.TrimSpace(string(self)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrls, path := parts[1], parts[2]
		found := false
		for _, m := range mounts {
			match := false
			if ctrls == "" {
				match = m.fstype == "cgroup2"
			} else if m.fstype == "cgroup" {
				opts := map[string]bool{}
				for _, o := range strings.Split(m.opts, ",") {
					opts[o] = true
				}
				match = true
				for _, c := range strings.Split(ctrls, ",") {
					match = match && opts[c]
				}
			}
			if !match {
				continue
			}
			rel, ok := strings.CutPrefix(path, m.root)
			if !ok && m.root != "/" {
				continue
			}
			if m.root == "/" {
				rel = path
			}
			out = append(out, hierarchy{dir: filepath.Join(m.point, rel), cpuset: strings.Contains(","+ctrls+",", ",cpuset,")})
			found = true
			break
		}
		if !found && ctrls != "" {
			return nil, fmt.Errorf("cgroup hierarchy %q of this process is not mounted: kforge lab needs every hierarchy mounted (as under /sys/fs/cgroup)", ctrls)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no cgroup hierarchy is mounted: mount /sys/fs/cgroup")
	}
	return out, nil
}

// makeCgroups creates one cgroup called name in every hierarchy and returns their directories
// (the ones made so far, on error).
func makeCgroups(hier []hierarchy, name string) ([]string, error) {
	var dirs []string
	for _, h := range hier {
		d := filepath.Join(h.dir, name)
		dirs = append(dirs, d)
		if err := makeCgroup(d, h.cpuset); err != nil {
			return dirs, err
		}
	}
	return dirs, nil
}

// remakeCgroups creates again the cgroups makeCgroups made (a host's, which StopHost removed),
// in the same places.
func remakeCgroups(dirs []string) error {
	for _, d := range dirs {
		parent := filepath.Dir(d)
		if _, err := os.Stat(parent); err != nil {
			return fmt.Errorf("the cgroup %s, where the lab made its hosts' cgroups, is gone (did the session that ran `kforge lab up` end?): take the lab down and bring it up again: %w", parent, err)
		}
		_, err := os.Stat(filepath.Join(parent, "cpuset.cpus"))
		if err := makeCgroup(d, err == nil); err != nil {
			return err
		}
	}
	return nil
}

// makeCgroup creates the cgroup d (an existing one is kept); in a cpuset hierarchy it gets its
// parent's CPUs and memory nodes, since a new cpuset cgroup starts with none and no process
// could join it.
func makeCgroup(d string, cpuset bool) error {
	if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating cgroup %s: %w", d, err)
	}
	if !cpuset {
		return nil
	}
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(d), f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d, f), b, 0o644); err != nil {
			return fmt.Errorf("setting %s: %w", filepath.Join(d, f), err)
		}
	}
	return nil
}

// cgroupPIDs lists the processes in the given cgroups and all their descendants.
func cgroupPIDs(dirs []string) []int {
	seen := map[int]bool{}
	var out []int
	for _, d := range dirs {
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(f); err == nil && !seen[n] {
					seen[n] = true
					out = append(out, n)
				}
			}
			return nil
		})
	}
	return out
}

// removeCgroups removes the given cgroups and everything below them, deepest first. A cgroup
// whose last process just died can stay busy for a moment: retry for up to 5 s.
func removeCgroups(dirs []string) error {
	var errs []error
	for _, d := range dirs {
		var last error
		for i := 0; i < 100; i++ {
			if last = rmdirTree(d); last == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if last != nil {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, last))
		}
	}
	return errors.Join(errs...)
}

func rmdirTree(d string) error {
	var dirs []string
	err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if e.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
			return err
		}
	}
	return nil
}
