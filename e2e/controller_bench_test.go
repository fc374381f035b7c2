package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/release"
)

// BenchmarkControllerTenClusters is issue 36's measure: ten one-node clusters, made
//
//	cli:        by ten `kforge apply` runs one after another (what a script or a person does),
//	            on a lab of 10 bare hosts;
//	controller: by ten KforgeCluster objects created at once, which kforge controller (two
//	            replicas, --clusters 5) makes five at a time, on a new lab of 12 bare hosts: a
//	            management cluster (1 master, 1 worker) made by the CLI, then the ten.
//
// Both sides start from bare hosts (no runtime), so each installs containerd from the bundle.
// It reports both totals (the first run's start or the first object's creation, to the last
// cluster's nodes Ready or the last object Ready), their ratio, and the controller's memory:
// the most `kubectl top` (metrics-server, the container's working set) saw for either replica,
// sampled every 5 s, before and during the run. Run it with:
//
//	KFORGE_REQUIRE_INTEGRATION=1 go test -run '^$' -bench BenchmarkControllerTenClusters -benchtime 1x -timeout 90m ./e2e
func BenchmarkControllerTenClusters(b *testing.B) {
	testenv.Require(b, lab.Prerequisites())
	const clusters = 10
	ctx, dir, kforge, bundleDir := labBench(b, 85*time.Minute)
	id := os.Getpid() % 100000
	version := release.Default()
	newLab := func(name string, hosts int) *lab.Lab {
		if old, err := lab.Open(name); err == nil { // a leftover of a killed run
			if err := old.Down(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.Cleanup(func() { // unless taken down already
			if l, err := lab.Open(name); err == nil {
				if err := l.Down(context.Background()); err != nil {
					b.Errorf("lab down: %v", err)
				}
			}
		})
		l, err := lab.Up(ctx, lab.Options{Name: name, Hosts: hosts, Bare: true})
		if err != nil {
			b.Fatalf("lab up: %v", err)
		}
		return l
	}
	side := func(l *lab.Lab, name string) *cluster {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o700); err != nil {
			b.Fatal(err)
		}
		return &cluster{t: b, lab: l, kforge: kforge, bundle: bundleDir, version: version,
			state: filepath.Join(d, "state"), inventory: filepath.Join(d, "kforge.yaml")}
	}

	for range b.N {
		// The CLI: ten applies one after another, each cluster its own inventory and state.
		cliLab := newLab(fmt.Sprintf("bcl%d", id), clusters)
		start := time.Now()
		var each []time.Duration
		for i, h := range cliLab.Hosts {
			c := side(cliLab, fmt.Sprintf("cli-%d", i))
			c.writeInventory([]lab.Host{h}, nil)
			s := time.Now()
			if out, err := c.run("apply", "--timeout", "10m"); err != nil {
				b.Fatalf("kforge apply of one-node cluster %d on %s: %v\n%s", i, h.Name, err, out)
			}
			c.checkNodes(ctx, 1)
			each = append(each, time.Since(s))
		}
		cli := time.Since(start)
		if err := cliLab.Down(ctx); err != nil {
			b.Fatal(err)
		}

		// The controller: a management cluster, then ten objects at once.
		l := newLab(fmt.Sprintf("bct%d", id), clusters+2)
		c := side(l, "management")
		c.writeInventory(l.Hosts[:1], l.Hosts[1:2])
		if out, err := c.run("apply", "--timeout", "10m"); err != nil {
			b.Fatalf("kforge apply (management cluster): %v\n%s", err, out)
		}
		c.installController(ctx, l.Hosts[:2])
		mgmt := c.client()
		const ns = "fleet"
		c.labSSHSecret(ctx, mgmt, ns)
		mem := c.sampleControllerMemory(ctx)
		idle := mem.peak()
		names := make([]string, clusters)
		gens := make([]int64, clusters)
		start = time.Now()
		for i, h := range l.Hosts[2:] {
			names[i] = fmt.Sprintf("one-%d", i)
			gens[i] = c.applyObject(ctx, ns, names[i], c.objectSpec([]lab.Host{h}, nil, version))
		}
		ready := make([]time.Duration, clusters)
		for i := range names { // each wait returns once that object is Ready; they run on together
			c.waitReady(ctx, ns, names[i], gens[i], 30*time.Minute)
			if ready[i] == 0 {
				ready[i] = time.Since(start)
			}
		}
		ctl := time.Since(start)
		for i := range names {
			c.checkSecondCluster(ctx, ns, names[i], 1, version)
		}
		peak := mem.stop()

		ratio := ctl.Seconds() / cli.Seconds()
		fmt.Printf("\nten one-node clusters (Kubernetes %s, bare hosts, the runtime from the bundle), on this machine:\n", version)
		fmt.Printf("  cli:        ten kforge apply one after another: %s (each: %s)\n", secs(cli), durations(each))
		fmt.Printf("  controller: ten KforgeClusters at once, five at a time: %s (the last Ready; Ready in order of creation at %s)\n", secs(ctl), durations(ready))
		fmt.Printf("  controller/cli: %.2f\n", ratio)
		fmt.Printf("  the controller's memory (kubectl top, working set, both replicas' most): %s idle, %s at most while making the ten\n", idle.String(), peak.String())
		b.ReportMetric(cli.Seconds(), "cli-s")
		b.ReportMetric(ctl.Seconds(), "controller-s")
		b.ReportMetric(ratio, "controller/cli")
		b.ReportMetric(float64(peak.Value())/(1<<20), "controller-MiB")
	}
}

// memorySampler is `kubectl top` of the controller's pods every 5 s: the most either showed.
type memorySampler struct {
	mu    sync.Mutex
	most  resource.Quantity
	done  chan struct{}
	ended chan struct{}
}

// sampleControllerMemory samples until stop; it waits for the first sample (metrics-server
// reports a pod once it has scraped it twice).
func (c *cluster) sampleControllerMemory(ctx context.Context) *memorySampler {
	m := &memorySampler{done: make(chan struct{}), ended: make(chan struct{})}
	first := make(chan struct{})
	go func() {
		defer close(m.ended)
		for {
			out, err := c.kubectl(ctx, "-n", "kforge-system", "top", "pod", "--no-headers")
			if err == nil {
				for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
					f := strings.Fields(line) // NAME CPU MEMORY
					if len(f) != 3 {
						continue
					}
					q, err := resource.ParseQuantity(f[2])
					if err != nil {
						continue
					}
					m.mu.Lock()
					if q.Cmp(m.most) > 0 {
						m.most = q
					}
					m.mu.Unlock()
					select {
					case <-first:
					default:
						close(first)
					}
				}
			}
			select {
			case <-m.done:
				return
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
		}
	}()
	select {
	case <-first:
	case <-time.After(3 * time.Minute):
		c.t.Fatalf("kubectl top pod -n kforge-system showed nothing within 3 minutes (metrics-server)")
	}
	return m
}

// peak is the most seen so far.
func (m *memorySampler) peak() resource.Quantity {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.most.DeepCopy()
}

// stop ends the sampling and returns the most seen.
func (m *memorySampler) stop() resource.Quantity {
	close(m.done)
	<-m.ended
	return m.peak()
}
