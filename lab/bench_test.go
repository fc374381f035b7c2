package lab

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/internal/testenv"
)

// BenchmarkLabUp measures bringing up 3, 20 and 100 hosts: time until Up returns (every sshd
// answers and every systemd reports running), RAM per idle host (from each host's memory
// cgroup) and the time Down takes. Run with -benchtime 1x.
func BenchmarkLabUp(b *testing.B) {
	for _, n := range []int{3, 20, 100} {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			testenv.Require(b, Prerequisites())
			ctx := context.Background()
			for i := 0; i < b.N; i++ {
				if err := Down(ctx, "labbench", nil); err != nil {
					b.Fatal(err)
				}
				inotifyBefore, _ := readInt(inotifyLimit)
				start := time.Now()
				l, err := Up(ctx, Options{Name: "labbench", Hosts: n})
				if err != nil {
					b.Fatal(err)
				}
				up := time.Since(start)
				for _, h := range l.Hosts { // Up's promise, checked
					if out, err := l.Exec(ctx, h.Name, "systemctl", "is-system-running"); strings.TrimSpace(string(out)) != "running" {
						_ = l.Down(ctx)
						b.Fatalf("%s after Up: system %q: %v", h.Name, out, err)
					}
				}
				time.Sleep(5 * time.Second) // let boot-time work settle: measure idle hosts
				var rss, cache, usage float64
				for _, h := range l.st.Hosts {
					st := hostMemory(b, h)
					rss += st["total_rss"]
					cache += st["total_cache"]
					usage += st["usage"]
				}
				downStart := time.Now()
				if err := l.Down(ctx); err != nil {
					b.Fatal(err)
				}
				down := time.Since(downStart)
				if others, _ := List(); len(others) == 0 {
					if v, _ := readInt(inotifyLimit); v != inotifyBefore {
						b.Errorf("fs.inotify.max_user_instances is %d after the last lab went down, was %d", v, inotifyBefore)
					}
					if _, err := os.Stat("/sys/class/net/" + Bridge); err == nil {
						b.Errorf("bridge %s left behind after the last lab went down", Bridge)
					}
				}
				const mib = 1 << 20
				fn := float64(n)
				b.ReportMetric(up.Seconds(), "s-up")
				b.ReportMetric(rss/fn/mib, "MiB-rss/host")
				b.ReportMetric(cache/fn/mib, "MiB-cache/host")
				b.ReportMetric(usage/fn/mib, "MiB-memcg/host")
				b.ReportMetric(down.Seconds(), "s-down")
				b.Logf("%d hosts: up (every sshd answering, every systemd running) in %s; per idle host %.1f MiB RSS + %.1f MiB page cache (memcg usage %.1f MiB); down %s",
					n, up.Round(10*time.Millisecond), rss/fn/mib, cache/fn/mib, usage/fn/mib, down.Round(10*time.Millisecond))
			}
		})
	}
}

// hostMemory reads the host's memory cgroup (cgroup v1): memory.stat plus "usage".
func hostMemory(b *testing.B, h *hostState) map[string]float64 {
	for _, c := range h.Cgroups {
		f, err := os.Open(filepath.Join(c, "memory.stat"))
		if err != nil {
			continue
		}
		out := map[string]float64{}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), " ")
			n, _ := strconv.ParseFloat(v, 64)
			out[k] = n
		}
		f.Close()
		u, _ := readInt(filepath.Join(c, "memory.usage_in_bytes"))
		out["usage"] = float64(u)
		return out
	}
	b.Fatalf("%s has no memory cgroup (cgroup v1 memory controller)", h.Name)
	return nil
}
