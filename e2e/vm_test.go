package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/release"
)

// TestVMWorker: a mixed lab — an nspawn master, an nspawn worker and a worker that is a QEMU
// virtual machine with its own kernel and cgroup v2 — becomes one cluster. The VM gets none of
// the lab's workarounds: kforge loads and persists the kernel modules and sysctls it needs, its
// kubelet runs on cgroup v2 without failCgroupV1: false. Its kernel has no legacy iptables, as
// RHEL 10's: kube-proxy's auto mode takes nftables on every node, and flannel follows. A pod on the VM resolves DNS and
// reaches a Service whose pod runs on the nspawn worker, over flannel. A second apply changes
// nothing. Then the VM is rebooted, and later powered off hard and started again: each time it
// comes back Ready with no kforge run, its DaemonSet pods running again.
func TestVMWorker(t *testing.T) {
	testenv.Require(t, lab.Prerequisites())
	testenv.Require(t, lab.VMPrerequisites())
	inLane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	c := newCluster(ctx, t, "vm", release.Default(), lab.Options{Hosts: 3, Bare: true, VMs: 1})
	h := c.lab.Hosts
	nw, vm := h[1].Name, h[2].Name
	if h[0].VM || h[1].VM || !h[2].VM {
		t.Fatalf("lab hosts %+v: want nspawn, nspawn, VM", h)
	}
	if err := c.lab.WithoutLegacyIptables(ctx, vm); err != nil {
		t.Fatal(err)
	}
	c.writeInventory(h[:1], h[1:])

	start := time.Now()
	out, err := c.run("apply", "--timeout", "15m")
	if err != nil {
		t.Fatalf("kforge apply: %v\n%s", err, out)
	}
	t.Logf("apply of a cluster with a VM worker took %s:\n%s", time.Since(start).Round(time.Second), out)
	// Debian 12's kernel enables AppArmor; the VM has no apparmor_parser: preflight says its
	// containers run unconfined, and they run (the checks below).
	if !strings.Contains(out, "[WARNING AppArmor] "+vm+": AppArmor is enabled in the kernel but apparmor_parser is not installed") {
		t.Errorf("no AppArmor warning for the VM host %s:\n%s", vm, out)
	}

	c.checkRuntime(ctx, h)
	c.checkNodes(ctx, 3)
	c.checkVMHost(ctx, vm)
	c.checkNftablesMode(ctx, out)

	// A pod on the VM resolves DNS and reaches the Service whose pod is on the nspawn worker.
	agent := buildAgentImage(t, t.TempDir())
	for _, w := range []string{nw, vm} {
		c.importImage(ctx, w, agent)
	}
	c.checkWorkloads(ctx, workload{image: agentImage, pull: corev1.PullNever}, nw, vm)

	c.applyChangesNothing(ctx, h)

	// Back without kforge: a reboot from inside, then a power cut (QEMU killed) and a cold start.
	c.vmComesBack(ctx, vm, "reboot", func() {
		if _, err := c.lab.Exec(ctx, vm, "systemd-run", "--no-block", "--on-active=1", "systemctl", "reboot"); err != nil {
			t.Fatalf("reboot %s: %v", vm, err)
		}
	})
	c.vmComesBack(ctx, vm, "power cut", func() {
		if err := c.lab.StopHost(ctx, vm); err != nil {
			t.Fatalf("power off %s: %v", vm, err)
		}
		if err := c.lab.StartHost(ctx, vm); err != nil {
			t.Fatalf("power on %s: %v", vm, err)
		}
	})
	// And the workload still works across the two kinds of host.
	eventually(ctx, t, "Service from the VM after its power cut", func() (bool, string) {
		out, err := c.kubectl(ctx, "exec", "client-"+vm, "--", "/agent", "get", "http://server.default.svc.cluster.local/")
		return err == nil && strings.TrimSpace(out) == "server", out
	})

	// lab down leaves nothing of the VM: no QEMU, no tap, no overlay.
	qemu := vmProcesses(t, vm)
	if len(qemu) != 1 {
		t.Errorf("%d QEMU processes run %s, want 1: %v", len(qemu), vm, qemu)
	}
	tap := "/sys/class/net/kflab" + strings.TrimPrefix(h[2].Address, "198.51.100.")
	if _, err := os.Stat(tap); err != nil {
		t.Errorf("%s's tap: %v", vm, err)
	}
	if err := c.lab.Down(ctx); err != nil {
		t.Fatalf("lab down: %v", err)
	}
	if left := vmProcesses(t, vm); len(left) > 0 {
		t.Errorf("QEMU of %s still runs after lab down: %v", vm, left)
	}
	for _, p := range []string{tap, c.lab.Dir} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is still there after lab down", p)
		}
	}
}

// vmProcesses are the PIDs of the QEMU processes running the VM host named name.
func vmProcesses(t testing.TB, name string) []int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if strings.HasPrefix(filepath.Base(args[0]), "qemu-system") && slices.Contains(args, "-name") && slices.Index(args, name) == slices.Index(args, "-name")+1 {
			pid, _ := strconv.Atoi(strings.Split(d, "/")[2])
			pids = append(pids, pid)
		}
	}
	return pids
}

// checkVMHost: the VM runs its own kernel on cgroup v2 with none of the lab's workarounds, and
// what kforge set up there is persisted for the next boot: modules in modules-load.d, sysctls in
// sysctl.d, kubelet and containerd enabled.
func (c *cluster) checkVMHost(ctx context.Context, vm string) {
	c.t.Helper()
	node, err := c.client().CoreV1().Nodes().Get(ctx, vm, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Logf("%s: kernel %s, %s, boot %s", vm, node.Status.NodeInfo.KernelVersion, node.Status.NodeInfo.OSImage, node.Status.NodeInfo.BootID)
	ours, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		c.t.Fatal(err)
	}
	if got := strings.TrimSpace(c.exec(ctx, vm, "uname -r")); got != node.Status.NodeInfo.KernelVersion || got == strings.TrimSpace(string(ours)) {
		c.t.Errorf("%s runs kernel %s (node says %s), this machine %s: want its own", vm, got, node.Status.NodeInfo.KernelVersion, ours)
	}
	for _, chk := range []struct{ what, script, want string }{
		{"cgroup file system", "stat -fc %T /sys/fs/cgroup", "cgroup2fs"},
		{"failCgroupV1 in kubelet's config", "grep -c failCgroupV1 " + hostpath.KubeletConfigPath + " || true", "0"},
		{"kubelet's cgroup driver", "grep '^cgroupDriver' " + hostpath.KubeletConfigPath, "cgroupDriver: systemd"},
		{"modules loaded", "lsmod | awk '$1==\"br_netfilter\"||$1==\"overlay\"{print $1}' | sort | tr '\\n' ' '", "br_netfilter overlay "},
		{"modules persisted", "cat " + hostpath.ModulesLoadFile + " | grep -v '^#' | tr '\\n' ' '", "overlay br_netfilter "},
		{"sysctls applied", "sysctl -n net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables | tr '\\n' ' '", "1 1 "},
		{"sysctls persisted", "grep -c '= 1' " + hostpath.SysctlFile, "3"},
		{"units enabled", "systemctl is-enabled containerd kubelet | tr '\\n' ' '", "enabled enabled "},
		{"kubelet's cgroup", "systemctl show -p ControlGroup --value kubelet", "/system.slice/kubelet.service"},
	} {
		if got := strings.TrimSpace(c.exec(ctx, vm, chk.script)); got != strings.TrimSpace(chk.want) {
			c.t.Errorf("%s, %s: got %q, want %q", vm, chk.what, got, chk.want)
		}
	}
	// conntrack: kube-proxy leaves the table alone (kubeProxy.conntrackMaxPerCore: 0, for the
	// nspawn hosts that share this machine's): the VM's own kernel sized it.
	c.t.Logf("%s: nf_conntrack_max %s", vm, strings.TrimSpace(c.exec(ctx, vm, "cat /proc/sys/net/netfilter/nf_conntrack_max")))
}

// vmComesBack does something that takes the VM down (a reboot, a power cut), then waits, with
// no kforge run, for its node to be Ready on a new boot and for the pods of every DaemonSet on
// it (kube-proxy, flannel) to run again in containers started after it. It logs the time from
// the start to Ready and to those pods.
func (c *cluster) vmComesBack(ctx context.Context, vm, what string, down func()) {
	c.t.Helper()
	k := c.client()
	n, err := k.CoreV1().Nodes().Get(ctx, vm, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	boot := n.Status.NodeInfo.BootID
	start := time.Now()
	down()
	var ready time.Duration
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 10*time.Minute, false, func(ctx context.Context) (bool, error) {
		n, err := k.CoreV1().Nodes().Get(ctx, vm, metav1.GetOptions{})
		if err != nil || n.Status.NodeInfo.BootID == boot || !nodeReady(n) {
			return false, nil
		}
		ready = time.Since(start)
		return true, nil
	})
	if err != nil {
		n, _ := k.CoreV1().Nodes().Get(ctx, vm, metav1.GetOptions{})
		c.t.Fatalf("%s after a %s: node not Ready on a new boot within 10m: %v; boot %s (was %s), conditions %+v", vm, what, err, n.Status.NodeInfo.BootID, boot, n.Status.Conditions)
	}
	names, at, err := c.waitDaemonSetPodsSince(ctx, vm, start, 2*time.Second, 10*time.Minute)
	pods := at.Sub(start)
	if err != nil {
		c.t.Fatalf("%s after a %s: its DaemonSet pods did not run again within 10m (%v): %v", vm, what, names, err)
	}
	c.t.Logf("%s after a %s: node Ready on a new boot %s after it began, DaemonSet pods %v running again after %s",
		vm, what, ready.Round(time.Second), names, pods.Round(time.Second))
	c.checkVMHost(ctx, vm)
}

// waitDaemonSetPodsSince waits, polling every interval within timeout, until the DaemonSet
// pods on host (kube-proxy and flannel at least) run containers started after since, all
// ready, and returns their names and when it saw them so.
func (c *cluster) waitDaemonSetPodsSince(ctx context.Context, host string, since time.Time, interval, timeout time.Duration) ([]string, time.Time, error) {
	k := c.client()
	var names []string
	var at time.Time
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		ps, err := k.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + host})
		if err != nil {
			return false, nil
		}
		names = names[:0]
		for _, p := range ps.Items {
			if len(p.OwnerReferences) == 0 || p.OwnerReferences[0].Kind != "DaemonSet" {
				continue
			}
			if !podReadySince(&p, since) {
				return false, nil
			}
			names = append(names, p.Name)
		}
		at = time.Now()
		return len(names) >= 2, nil
	})
	return names, at, err
}

// podReadySince says whether every container of p is ready and was started after t.
func podReadySince(p *corev1.Pod, t time.Time) bool {
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, s := range p.Status.ContainerStatuses {
		if !s.Ready || s.State.Running == nil || s.State.Running.StartedAt.Time.Before(t.Truncate(time.Second)) {
			return false
		}
	}
	return true
}

// eventually retries ok every 2 s for up to 2 minutes and fails the test with ok's last output.
func eventually(ctx context.Context, t *testing.T, what string, ok func() (bool, string)) {
	t.Helper()
	var out string
	for try := 1; try <= 60; try++ {
		var good bool
		if good, out = ok(); good {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
	t.Errorf("%s: still failing after 2 minutes: %s", what, out)
}

// vmRSS is the resident memory of the QEMU process running the VM host named name.
func vmRSS(t testing.TB, name string) int64 {
	t.Helper()
	pids := vmProcesses(t, name)
	if len(pids) != 1 {
		t.Fatalf("%d QEMU processes run %s, want 1", len(pids), name)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pids[0]))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS for QEMU %d", pids[0])
	return 0
}

// checkNftablesMode: apply said that kube-proxy runs in nftables mode; its configuration and
// flannel's say so; on every node kube-proxy's and flannel's nftables tables exist (listed from
// inside the node's kube-proxy pod, whose image carries nft).
func (c *cluster) checkNftablesMode(ctx context.Context, out string) {
	t := c.t
	t.Helper()
	if !strings.Contains(out, "kube-proxy in nftables mode (kubeProxy.mode auto)") {
		t.Errorf("apply did not say kube-proxy runs in nftables mode:\n%s", out)
	}
	k := c.client()
	for _, cm := range []struct{ ns, name, key, want string }{
		{"kube-system", "kube-proxy", "config.conf", "mode: nftables"},
		{"kube-flannel", "kube-flannel-cfg", "net-conf.json", `"EnableNFTables": true`},
	} {
		m, err := k.CoreV1().ConfigMaps(cm.ns).Get(ctx, cm.name, metav1.GetOptions{})
		if err != nil || !strings.Contains(m.Data[cm.key], cm.want) {
			t.Errorf("ConfigMap %s/%s: %v; want %q in %s:\n%s", cm.ns, cm.name, err, cm.want, cm.key, m.Data[cm.key])
		}
	}
	pods, err := k.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-proxy"})
	if err != nil || len(pods.Items) != len(c.lab.Hosts) {
		t.Fatalf("kube-proxy pods: %v (%d); want one per node", err, len(pods.Items))
	}
	for _, p := range pods.Items {
		for _, table := range []string{"ip kube-proxy", "ip flannel-ipv4"} {
			args := append([]string{"exec", "-n", "kube-system", p.Name, "--", "nft", "list", "table"}, strings.Fields(table)...)
			if out, err := c.kubectl(ctx, args...); err != nil || !strings.Contains(out, "table "+table) {
				t.Errorf("%s: nft list table %s: %v\n%s", p.Spec.NodeName, table, err, out)
			}
		}
	}
}
