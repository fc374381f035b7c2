package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/release"
)

// BenchmarkFleetPlanAndNoOpApply is the fleet benchmark of issues 17 and 18: on a lab of 21
// hosts (1 master, 20 workers) that kforge apply made into a cluster, how long `kforge plan`
// (target ≤ 3 s) and an apply with nothing to do (target ≤ 5 s) take, each run three times,
// against the check a user would script: OpenSSH to each host in turn, sha256sum of the
// installed binaries and configuration files. Then one more worker is added: apply must touch
// that worker only (every other host's files, kubelet and containerd as they were).
func BenchmarkFleetPlanAndNoOpApply(b *testing.B) {
	testenv.Require(b, lab.Prerequisites())
	if _, err := exec.LookPath("ssh"); err != nil {
		b.Fatalf("ssh not on PATH (apt-get install openssh-client): %v", err)
	}
	ctx, dir, kforge, bundleDir := labBench(b, 40*time.Minute)
	name := fmt.Sprintf("flt%d", os.Getpid()%100000)
	if old, err := lab.Open(name); err == nil {
		_ = old.Down(ctx)
	}
	l, err := lab.Up(ctx, lab.Options{Name: name, Hosts: 22, Bare: true})
	if err != nil {
		b.Fatalf("lab up: %v", err)
	}
	b.Cleanup(func() {
		if err := l.Down(context.Background()); err != nil {
			b.Errorf("lab down: %v", err)
		}
	})
	fleet, added := l.Hosts[:21], l.Hosts[21]
	c := &cluster{t: b, lab: l, kforge: kforge, bundle: bundleDir, version: release.Default(), state: filepath.Join(dir, "state"), inventory: filepath.Join(dir, "kforge.yaml")}
	c.writeInventory(fleet[:1], fleet[1:])
	start := time.Now()
	if out, err := c.run("apply", "--timeout", "10m"); err != nil {
		b.Fatalf("apply of 21 hosts: %v\n%s", err, tailLines(out, 40))
	}
	first := time.Since(start)

	b.ResetTimer()
	timed := func(what string, args ...string) []time.Duration {
		var ds []time.Duration
		for range 3 {
			start := time.Now()
			cmd := exec.CommandContext(ctx, kforge, append([]string{"-i", c.inventory, "--state-dir", c.state}, args...)...)
			out, err := cmd.CombinedOutput()
			ds = append(ds, time.Since(start))
			if err != nil {
				b.Fatalf("%s: %v\n%s", what, err, tailLines(string(out), 30))
			}
		}
		slices.Sort(ds)
		return ds
	}
	plans := timed("plan", "plan")
	applies := timed("apply with nothing to do", "apply")

	ssh := newOpenSSH(l)
	check := "sha256sum /usr/bin/kubelet /opt/cni/bin/* /etc/kubernetes/*.conf /etc/kubernetes/pki/ca.crt /var/lib/kubelet/config.yaml /etc/containerd/config.toml 2>/dev/null | wc -l"
	start = time.Now()
	for _, h := range fleet {
		if _, err := ssh.run(ctx, h.Address, check); err != nil {
			b.Fatal(err)
		}
	}
	script := time.Since(start)
	b.StopTimer()

	b.Logf("21 hosts (1 master, 20 workers): first apply %s; plan %s (median of %s; target <= 3s); apply with nothing to do %s (median of %s; target <= 5s); the scripted check over OpenSSH, host after host %s; plan/script %.2f, no-op apply/script %.2f",
		secs(first), secs(plans[1]), durations(plans), secs(applies[1]), durations(applies), secs(script), plans[1].Seconds()/script.Seconds(), applies[1].Seconds()/script.Seconds())
	// One more worker: apply touches it alone.
	before := map[string]string{}
	for _, h := range fleet {
		before[h.Name] = c.snapshot(ctx, h.Name)
	}
	c.writeInventory(fleet[:1], append(slices.Clone(fleet[1:]), added))
	start = time.Now()
	if out, err := c.run("apply", "--timeout", "5m"); err != nil {
		b.Fatalf("apply adding %s: %v\n%s", added.Name, err, tailLines(out, 40))
	}
	grow := time.Since(start)
	for _, h := range fleet {
		if after := c.snapshot(ctx, h.Name); after != before[h.Name] {
			b.Errorf("adding %s changed %s:\n%s", added.Name, h.Name, diffLines(before[h.Name], after))
		}
	}
	b.Logf("adding a 22nd host (%s) took %s; the other 21 hosts' files, kubelet and containerd were left as they were", added.Name, secs(grow))
	b.ReportMetric(grow.Seconds(), "add-one-worker-s")
	b.ReportMetric(first.Seconds(), "first-apply-s")
	b.ReportMetric(plans[1].Seconds(), "plan-s")
	b.ReportMetric(applies[1].Seconds(), "noop-apply-s")
	b.ReportMetric(script.Seconds(), "script-check-s")
}

func durations(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, secs(d))
	}
	return strings.Join(s, ", ")
}

// BenchmarkFleetScaling is issue 17's scaling benchmark: `kforge apply` of 1 master + 2 workers
// against 1 master + 20 workers, each on fresh bare lab hosts, in one run; then both again with
// this machine's link to the lab shaped to 100 Mbit/s (a qdisc on the lab bridge, removed
// afterwards). For each: the time to all nodes Ready and apply's phases; the floor, that is the
// CPU time the nodes' own processes used divided by this machine's cores (here every node
// shares the same two cores, so 21 nodes cannot be as fast as 3); the bytes apply's SSH
// connections sent. Targets: 21 nodes within 3x the time of 3; with the link shaped, 21 nodes
// send at most 1.5x the bytes of 3.
func BenchmarkFleetScaling(b *testing.B) {
	testenv.Require(b, lab.Prerequisites())
	ctx, dir, kforge, bundleDir := labBench(b, 60*time.Minute)
	id := os.Getpid() % 100000
	b.ResetTimer()
	for _, shape := range []string{"", "100mbit"} {
		link := "the lab's bridge"
		if shape != "" {
			link = "a link shaped to " + shape
		}
		var runs []side
		for _, n := range []int{3, 21} {
			runs = append(runs, runKforge(ctx, b, kforge, bundleDir, filepath.Join(dir, fmt.Sprintf("%s-%d", shape, n)), fmt.Sprintf("fs%d%d", id%1000, n), kforgeSide{hosts: n, shape: shape}))
		}
		small, large := runs[0], runs[1]
		for i, r := range runs {
			n := []int{3, 21}[i]
			b.Logf("%s, %d nodes: %s", link, n, fleetLine(r))
		}
		ratio, bytesRatio := large.total.Seconds()/small.total.Seconds(), float64(large.sent)/float64(small.sent)
		b.Logf("%s: 21 nodes / 3 nodes: time %.2fx (target <= 3), bytes sent %.2fx (target <= 1.5 with the link shaped)", link, ratio, bytesRatio)
		suffix := ""
		if shape != "" {
			suffix = "-" + shape
		}
		b.ReportMetric(small.total.Seconds(), "3-nodes-s"+suffix)
		b.ReportMetric(large.total.Seconds(), "21-nodes-s"+suffix)
		b.ReportMetric(ratio, "21/3-time"+suffix)
		b.ReportMetric(bytesRatio, "21/3-bytes"+suffix)
		b.ReportMetric((large.cpu / time.Duration(runtime.NumCPU())).Seconds(), "21-nodes-floor-s"+suffix)
	}
}

// fleetLine is one fleet run's figures: time to all nodes Ready, the floor, bytes, memory, phases.
func fleetLine(r side) string {
	floor := r.cpu / time.Duration(runtime.NumCPU())
	return fmt.Sprintf("all Ready after %s (apply %s); floor %s (the nodes' CPU %s over %d cores); SSH sent %.1f MiB, received %.1f MiB; working set: master %d MiB, workers %d MiB each (mean), this machine's MemAvailable then %d MiB; load at start %s; phases: %s",
		secs(r.total), secs(r.apply), secs(floor), secs(r.cpu), runtime.NumCPU(), float64(r.sent)/(1<<20), float64(r.received)/(1<<20), r.memMaster>>20, r.memWorker>>20, r.memLeft>>20, r.load, stepLine(r.steps))
}

// BenchmarkFleet50 is issue 17's largest fleet: `kforge apply` of 1 master + 50 workers on
// fresh bare lab hosts, with the figures of BenchmarkFleetScaling and what this machine had
// left: whether 51 nodes fit, and what limits more.
func BenchmarkFleet50(b *testing.B) {
	testenv.Require(b, lab.Prerequisites())
	ctx, dir, kforge, bundleDir := labBench(b, 45*time.Minute)
	b.ResetTimer()
	r := runKforge(ctx, b, kforge, bundleDir, filepath.Join(dir, "51"), fmt.Sprintf("f5%d", os.Getpid()%1000), kforgeSide{hosts: 51})
	b.Logf("1 master + 50 workers: %s", fleetLine(r))
	b.ReportMetric(r.total.Seconds(), "51-nodes-s")
	b.ReportMetric((r.cpu / time.Duration(runtime.NumCPU())).Seconds(), "51-nodes-floor-s")
	b.ReportMetric(float64(r.memWorker>>20), "worker-MiB")
	b.ReportMetric(float64(r.sent>>20), "sent-MiB")
}
