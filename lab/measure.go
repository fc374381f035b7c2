package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CPUTime is the CPU time (user and system) every process of host has used since it started:
// its systemd, sshd, containerd, kubelet and pods alike, from the accounting of its cgroup (v1
// cpuacct.usage, else cgroup v2's cpu.stat usage_usec).
func (l *Lab) CPUTime(host string) (time.Duration, error) {
	dirs, err := l.cgroups(host)
	if err != nil {
		return 0, err
	}
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, "cpuacct.usage")); err == nil {
			ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("lab host %s: %s: %w", host, filepath.Join(d, "cpuacct.usage"), err)
			}
			return time.Duration(ns), nil
		}
	}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cpu.stat"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
				us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return 0, fmt.Errorf("lab host %s: %s: %w", host, filepath.Join(d, "cpu.stat"), err)
				}
				return time.Duration(us) * time.Microsecond, nil
			}
		}
	}
	return 0, fmt.Errorf("lab host %s: no CPU accounting in its cgroups %s", host, strings.Join(dirs, ", "))
}

// ShapeUplink limits what this machine sends to the lab's hosts to rate (tc's syntax, such as
// 100mbit), as a slow link between a workstation and its hosts would: an HTB qdisc on the lab
// bridge's egress, one class at rate for this lab's addresses, everything else unlimited
// (traffic between the hosts does not leave through the bridge's own queue, so it is not
// shaped). The returned function removes the qdisc; call it before the lab goes down. Only one
// lab may be shaped at a time.
func (l *Lab) ShapeUplink(ctx context.Context, rate string) (undo func() error, err error) {
	steps := [][]string{
		{"tc", "qdisc", "add", "dev", Bridge, "root", "handle", "1:", "htb", "default", "20"},
		{"tc", "class", "add", "dev", Bridge, "parent", "1:", "classid", "1:10", "htb", "rate", rate, "ceil", rate},
		{"tc", "class", "add", "dev", Bridge, "parent", "1:", "classid", "1:20", "htb", "rate", "100gbit"},
	}
	for _, h := range l.Hosts {
		steps = append(steps, []string{"tc", "filter", "add", "dev", Bridge, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip", "dst", h.Address + "/32", "flowid", "1:10"})
	}
	undo = func() error {
		return run(context.Background(), "tc", "qdisc", "del", "dev", Bridge, "root")
	}
	for i, argv := range steps {
		if err := run(ctx, argv...); err != nil {
			if i > 0 {
				err = errors.Join(err, undo())
			}
			return nil, fmt.Errorf("lab %s: shape the uplink to %s: %w", l.Name, rate, err)
		}
	}
	return undo, nil
}

// Memory is the working set of every process of host: what its cgroup charges, less the page
// cache the kernel may drop at once (inactive files), as kubelet counts a container's memory
// (cgroup v1 memory.usage_in_bytes and memory.stat total_inactive_file, else cgroup v2's
// memory.current and inactive_file).
func (l *Lab) Memory(host string) (int64, error) {
	dirs, err := l.cgroups(host)
	if err != nil {
		return 0, err
	}
	for _, d := range dirs {
		for _, files := range [][3]string{{"memory.usage_in_bytes", "memory.stat", "total_inactive_file "}, {"memory.current", "memory.stat", "inactive_file "}} {
			b, err := os.ReadFile(filepath.Join(d, files[0]))
			if err != nil {
				continue
			}
			usage, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("lab host %s: %s: %w", host, filepath.Join(d, files[0]), err)
			}
			stat, err := os.ReadFile(filepath.Join(d, files[1]))
			if err != nil {
				return 0, fmt.Errorf("lab host %s: %w", host, err)
			}
			for _, line := range strings.Split(string(stat), "\n") {
				if v, ok := strings.CutPrefix(line, files[2]); ok {
					inactive, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					if err == nil && inactive < usage {
						usage -= inactive
					}
				}
			}
			return usage, nil
		}
	}
	return 0, fmt.Errorf("lab host %s: no memory accounting in its cgroups %s", host, strings.Join(dirs, ", "))
}

// cgroups are host's cgroup directories, one per hierarchy.
func (l *Lab) cgroups(host string) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, err := l.host(host)
	if err != nil {
		return nil, err
	}
	return slices.Clone(h.Cgroups), nil
}
