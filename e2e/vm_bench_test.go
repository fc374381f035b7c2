package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/release"
)

// BenchmarkVMCluster: a one-master cluster entirely on VM hosts (a master and a worker, each
// with its own kernel and cgroup v2, no lab workaround in the inventory), once per Debian
// release the VMs may run. It prints what a VM costs here — boot to systemd running, QEMU's
// memory, idle CPU, before and after the cluster — the apply's time, and whether KVM was
// usable. Run it with:
//
//	KFORGE_REQUIRE_INTEGRATION=1 go test -run '^$' -bench BenchmarkVMCluster -benchtime 1x -timeout 90m ./e2e
func BenchmarkVMCluster(b *testing.B) {
	testenv.Require(b, lab.Prerequisites())
	testenv.Require(b, lab.VMPrerequisites())
	ctx, dir, kforge, bundleDir := labBench(b, 80*time.Minute)
	b.Logf("VMs run under %s", lab.VMAcceleration())
	for _, suite := range lab.VMSuites {
		b.Run(suite, func(b *testing.B) {
			for range b.N {
				name := "vmb" + suite[:3]
				if old, err := lab.Open(name); err == nil { // a leftover of a killed run
					if err := old.Down(ctx); err != nil {
						b.Fatal(err)
					}
				}
				start := time.Now()
				l, err := lab.Up(ctx, lab.Options{Name: name, Hosts: 2, Bare: true, VMs: 2, VMSuite: suite})
				if err != nil {
					b.Fatalf("lab up: %v", err)
				}
				b.Cleanup(func() {
					if err := l.Down(ctx); err != nil {
						b.Errorf("lab down: %v", err)
					}
				})
				boot := time.Since(start)
				// idle says, after 30 s of idling, each VM's QEMU resident memory and cgroup
				// working set (QEMU's memory and the active page cache of its disk, as kubelet
				// counts a container's) and the CPU both used.
				idle := func() string {
					cpu0 := labCPU(b, l)
					time.Sleep(30 * time.Second)
					cpu := (labCPU(b, l) - cpu0) / 30
					ws, wsw := labMemory(b, l)
					return fmt.Sprintf("master VM: QEMU RSS %d MiB, working set %d MiB; worker VM: %d MiB, %d MiB; %.0f%% of a core for both",
						vmRSS(b, l.Hosts[0].Name)>>20, ws>>20, vmRSS(b, l.Hosts[1].Name)>>20, wsw>>20, 100*cpu.Seconds())
				}
				before := idle()

				c := &cluster{t: b, lab: l, kforge: kforge, bundle: bundleDir, version: release.Default(),
					state: filepath.Join(dir, suite, "state"), inventory: filepath.Join(dir, suite, "kforge.yaml")}
				if err := os.MkdirAll(filepath.Join(dir, suite), 0o700); err != nil {
					b.Fatal(err)
				}
				c.writeInventory(l.Hosts[:1], l.Hosts[1:])
				applyStart := time.Now()
				out, err := c.run("apply", "--timeout", "40m")
				if err != nil {
					b.Fatalf("kforge apply on VMs: %v\n%s", err, out)
				}
				apply := time.Since(applyStart)
				c.checkNodes(ctx, 2)
				master := l.Hosts[0].Name
				for _, chk := range []struct{ what, script, want string }{
					{"the master's cgroup file system", "stat -fc %T /sys/fs/cgroup", "cgroup2fs"},
					{"failCgroupV1 in the master's kubelet config", "grep -c failCgroupV1 " + hostpath.KubeletConfigPath + " || true", "0"},
					{"kube-apiserver's cgroup on the master", "cat /proc/$(pgrep -xo kube-apiserver)/cgroup", "0::/kubepods.slice/"},
				} {
					if got := strings.TrimSpace(c.exec(ctx, master, chk.script)); !strings.HasPrefix(got, chk.want) {
						b.Errorf("%s: %s is %q, want %q", master, chk.what, got, chk.want)
					}
				}
				// kube-proxy sizes conntrack (no conntrackMaxPerCore: 0 on a lab of VMs) to
				// max(32768 per core × 2, 131072), once it has started: under emulation its pod
				// runs a while before it gets there.
				err = wait.PollUntilContextTimeout(ctx, 5*time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
					return strings.TrimSpace(c.exec(ctx, master, "cat /proc/sys/net/netfilter/nf_conntrack_max")) == "131072", nil
				})
				if err != nil {
					b.Errorf("%s: nf_conntrack_max is %s, not kube-proxy's 131072 within 5 minutes", master, c.exec(ctx, master, "cat /proc/sys/net/netfilter/nf_conntrack_max"))
				}
				osImage := strings.TrimSpace(c.exec(ctx, master, ". /etc/os-release; echo $PRETTY_NAME; uname -r"))
				after := idle()
				b.ReportMetric(boot.Seconds(), "s/lab-up")
				b.ReportMetric(apply.Seconds(), "s/apply")
				fmt.Printf("\nVM cluster (%s; %s), 1 master (%d MiB, %d vCPUs) + 1 worker (%d MiB): under %s\n",
					suite, strings.ReplaceAll(osImage, "\n", ", kernel "), lab.VMMasterMemoryMiB, lab.VMCPUs, lab.VMWorkerMemoryMiB, lab.VMAcceleration())
				fmt.Printf("  lab up (both VMs booted, systemd running): %s\n", secs(boot))
				fmt.Printf("  idle before the cluster: %s\n", before)
				fmt.Printf("  kforge apply to a Ready cluster: %s\n", secs(apply))
				fmt.Printf("  idle with the cluster:   %s\n", after)
			}
		})
	}
}
