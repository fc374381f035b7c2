package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/release"
	"github.com/kforge/kforge/state"
)

// TestUpgradeAcrossTwoMinors is the life of a cluster of the oldest minor, on three bare hosts:
// created and checked as every minor's (bareHostsChecks), then upgraded to the newest, one apply
// walking every minor in between, and its CAs rotated under load.
//
// The upgrade: 1 master + 2 workers at the oldest supported minor; the inventory then says the
// newest. Under load: a Deployment of 2 replicas with a PodDisruptionBudget behind a Service,
// probed from a pod on the master every 100 ms all through the upgrade, and the API probed from
// the workstation. Afterwards every node reports the new version, etcd runs the new release's
// etcd, kube-proxy and CoreDNS run the new release's images, the data written before is there,
// the snapshot taken before the upgrade is in the state dir, and the prober counted 0 failed
// requests. plan showed the route first; the apply after changes nothing.
//
// The CA rotation (rotateCAUnderLoad), with the same prober still running.
func TestUpgradeAcrossTwoMinors(t *testing.T) {
	testenv.Require(t, lab.Prerequisites())
	all := release.All()
	if len(all) < 3 {
		t.Skip("fewer than three minors in the catalogue")
	}
	inLane(t)
	from, via, to := all[0].Kubernetes, all[1].Kubernetes, all[len(all)-1].Kubernetes
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	c := newCluster(ctx, t, "upg", from, lab.Options{Hosts: 3, Bare: true}, via, to)
	h := c.lab.Hosts
	c.bareHostsChecks(ctx, c.usePrivateRegistry())
	c.step("upgrade", func(t *testing.T) { c.upgradeAcrossTwoMinors(ctx, from, via, to) })
	c.step("rotate-ca", func(t *testing.T) {
		_, failed0 := proberCounts(ctx, t, c.client())
		c.rotateCAUnderLoad(ctx, h, failed0)
	})
	c.powerCutCheck(ctx)
}

// upgradeAcrossTwoMinors upgrades the cluster (1 master, 2 workers at from, which
// bareHostsChecks made) to to, through via.
func (c *cluster) upgradeAcrossTwoMinors(ctx context.Context, from, via, to string) {
	t := c.t.(*testing.T)
	t.Helper()
	h := c.lab.Hosts
	master, w1, w2 := h[0].Name, h[1].Name, h[2].Name
	// bareHostsChecks' workload goes: its bare pods would be drained by the upgrade.
	k0 := c.client()
	for _, p := range []string{"server", "client-" + w1, "client-" + w2} {
		if err := k0.CoreV1().Pods("default").Delete(ctx, p, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := k0.CoreV1().Services("default").Delete(ctx, "server", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	registryBefore := registryContents(ctx, c, master)
	k := c.client()
	agent := buildAgentImage(t, t.TempDir())
	for _, n := range h {
		c.importImage(ctx, n.Name, agent)
	}
	if _, err := k.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before-upgrade"}, Data: map[string]string{"at": from}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ok0, failed0 := startLoad(ctx, t, k, master)

	// A bundle without the middle release cannot serve the route: refused, naming the minor
	// and the bundle to build, before any host changes.
	c.version = to
	files := map[string]string{}
	for _, n := range h {
		files[n.Name] = c.snapshot(ctx, n.Name)
	}
	full := c.bundle
	c.bundle = buildBundle(context.Background(), t, t.TempDir(), from, to)
	c.writeInventory(h[:1], h[1:])
	out, err := c.run("apply", "--timeout", "1m")
	if err == nil || !strings.Contains(out, "through "+strings.Join(strings.Split(via, ".")[:2], ".")) || !strings.Contains(out, "kforge bundle build --kubernetes "+from+","+via+","+to) {
		t.Errorf("apply with a bundle that lacks %s: %v; want a refusal naming it and the build command\n%s", via, err, out)
	}
	for _, n := range h {
		if after := c.snapshot(ctx, n.Name); after != files[n.Name] {
			t.Errorf("%s changed although the upgrade was refused:\n%s", n.Name, diffLines(files[n.Name], after))
		}
	}
	c.bundle = full

	// plan shows the route before anything changes.
	c.writeInventory(h[:1], h[1:])
	plan, code := c.plan()
	if code != 4 || !strings.Contains(plan, "upgrade\n") || !strings.Contains(plan, "→ "+via+" → "+to) {
		t.Errorf("plan of the upgrade (exit %d) does not show the route through %s:\n%s", code, via, plan)
	}

	// The first run is killed once the master is at the middle release (as Ctrl-C twice, or
	// a lost workstation, would end it); the next run finishes the upgrade from there.
	api := probeAPI(ctx, k)
	unknown := watchUnknown(ctx, k)
	start := time.Now()
	killed, out := c.runUntil(ctx, "control plane at "+via, "apply", "--timeout", "5m")
	if !killed {
		t.Fatalf("the first upgrade run ended before its master reached %s:\n%s", via, out)
	}
	t.Logf("first run killed after %s, its master at %s:\n%s", time.Since(start).Round(time.Second), via, out)
	// The addon images of each hop went to the master only; the workers took them from its
	// registry, nothing uploaded to them.
	for _, w := range []string{w1, w2} {
		for _, v := range []string{via, to} {
			if !regexp.MustCompile(regexp.QuoteMeta(w) + ` .*addon images of ` + regexp.QuoteMeta(v) + `: bundle: 0 files, [1-9][0-9]* images from the masters' registries, 0 files, 0 images \(0 MiB\) uploaded`).MatchString(out) {
				t.Errorf("%s did not take the addon images of %s from the master's registry; apply said:\n%s", w, v, linesWith(out, w))
			}
		}
	}

	// A drain that a PodDisruptionBudget blocks: the next run moves the master on to the
	// target, then stops at w1 within --drain-timeout, naming the pod and the budget, and leaves
	// w1 cordoned and as it was.
	blockDrain(ctx, t, k, w1)
	before := c.snapshot(ctx, w1)
	cordoned := watchCordon(ctx, k, w1)
	out, err = c.run("apply", "--timeout", "5m", "--drain-timeout", "20s")
	ended := time.Now()
	if err == nil || !strings.Contains(out, "drain node "+w1+": not done within 20s") || !strings.Contains(out, "default/blocker-") ||
		!strings.Contains(out, "(PodDisruptionBudget default/blocker allows no disruption now)") || !strings.Contains(out, "it stays cordoned") {
		t.Errorf("apply with a drain a PodDisruptionBudget blocks: %v; want a refusal naming the pod and the budget\n%s", err, out)
	}
	if at := cordoned(); at.IsZero() || ended.Sub(at) > 20*time.Second+15*time.Second {
		t.Errorf("the blocked drain of %s: cordoned at %s, apply ended at %s; want the end within --drain-timeout 20s (and 15 s to spare)", w1, at.Format(time.TimeOnly), ended.Format(time.TimeOnly))
	} else {
		t.Logf("the blocked drain of %s: cordoned at %s, apply ended %s after, saying:\n%s", w1, at.Format("15:04:05.0"), ended.Sub(at).Round(100*time.Millisecond), linesWith(out, "drain node"))
	}
	if n, err := k.CoreV1().Nodes().Get(ctx, w1, metav1.GetOptions{}); err != nil || !n.Spec.Unschedulable || n.Status.NodeInfo.KubeletVersion != from {
		t.Errorf("%s after the blocked drain: %v; want cordoned, still at %s", w1, err, from)
	}
	if after := c.snapshot(ctx, w1); after != before {
		t.Errorf("%s changed although its drain was refused:\n%s", w1, diffLines(before, after))
	}
	if err := k.PolicyV1().PodDisruptionBudgets("default").Delete(ctx, "blocker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ok, failed := c.applyUnderProbes(ctx, k, api, start, ok0, failed0, "upgrade "+from+" → "+to) // and the runs before it
	// Measured: 0 failed in two runs of three, 3 in the third (the prober's container was
	// restarted on the master by its new kubelet; see the log of its earlier container above).
	// The target is 0; more than a handful is a Service that went away. A cause now removed: a
	// kube-controller-manager that ran through the single master's API outage marked the
	// workers Unknown when the API came back (docs/upgrades.md, "A master's restart order");
	// the watch says whether that was seen.
	seen := unknown.stop()
	limit := 5
	if seen[w1]+seen[w2] > 0 {
		t.Logf("kube-controller-manager marked the workers' status Unknown (seen by node: %v); the single master's API was away %s at the longest", seen, api.longestOutage().Round(100*time.Millisecond))
	}
	if failed > limit || ok < 100 {
		t.Errorf("the Service prober counted %d failed requests (and %d answered); want none, and at most a handful (workers' status seen Unknown: %v)", failed, ok, seen)
	}

	// Every node at the new version, Ready and schedulable.
	nodesAt(ctx, t, k, to)
	// Every node runs the new release's containerd, not only has its binary: the workers took
	// it from the master's registry and restarted it while drained.
	c.checkRuntime(ctx, h)
	// The addons follow the new release.
	rel, _ := release.For(to)
	im := rel.Images("")
	if ds, err := k.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{}); err != nil || ds.Spec.Template.Spec.Containers[0].Image != im.KubeProxy {
		t.Errorf("kube-proxy: %v, want image %s", err, im.KubeProxy)
	}
	if d, err := k.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{}); err != nil || d.Spec.Template.Spec.Containers[0].Image != im.CoreDNS {
		t.Errorf("coredns: %v, want image %s", err, im.CoreDNS)
	}
	if cm, err := k.CoreV1().ConfigMaps("default").Get(ctx, "before-upgrade", metav1.GetOptions{}); err != nil || cm.Data["at"] != from {
		t.Errorf("data written before the upgrade: %v %v", cm, err)
	}
	// The snapshot taken before anything changed, recorded at the old version.
	snaps, err := state.At(c.state).ListSnapshots()
	if err != nil || len(snaps) == 0 || snaps[0].Kubernetes != from {
		t.Errorf("snapshots before the upgrade: %+v %v; want the first at %s", snaps, err, from)
	}
	for _, w := range []string{w1, w2} {
		if v := strings.TrimSpace(c.exec(ctx, w, "kubelet --version")); v != "Kubernetes "+to {
			t.Errorf("%s: kubelet --version says %q", w, v)
		}
	}
	// The master's registry, from which the workers took the new release, holds that release
	// only: its fill emptied what the old release's left, so it does not grow with upgrades.
	registryAfter := registryContents(ctx, c, master)
	t.Logf("%s's registry: %s before the upgrade, %s after", master, registryBefore, registryAfter)
	if registryAfter.kubeProxyTags != to {
		t.Errorf("%s's registry holds kube-proxy %q after the upgrade; want %s alone (before: %q)", master, registryAfter.kubeProxyTags, to, registryBefore.kubeProxyTags)
	}
	c.checkNodes(ctx, 3)
	// Back down is refused (preflight), with the way back: a snapshot of before.
	c.version = from
	c.writeInventory(h[:1], h[1:])
	if out, err := c.run("apply", "--timeout", "1m"); err == nil || !strings.Contains(out, "is a downgrade") || !strings.Contains(out, "restore an etcd snapshot") {
		t.Errorf("apply of a downgrade to %s: %v\n%s", from, err, out)
	}
	c.version = to
	c.writeInventory(h[:1], h[1:])
	c.checkEtcdStatusAndSnapshot(ctx) // etcd at the new release's version, healthy
	c.checkStaleRuntimeConverges(ctx, h[2], via)
	c.applyChangesNothing(ctx, h)
}

// checkStaleRuntimeConverges replaces the containerd binary behind a running containerd (as an
// interrupted run, or a hand, would leave it): host runs the containerd of release old while its
// binary is the cluster's. plan shows containerd restarting (exit 4), apply restarts it, and the
// containerd that runs is the cluster's again.
func (c *cluster) checkStaleRuntimeConverges(ctx context.Context, host lab.Host, old string) {
	c.t.Helper()
	oldM, err := bundle.LoadRelease(c.bundle, old)
	if err != nil {
		c.t.Fatal(err)
	}
	cur, err := bundle.LoadRelease(c.bundle, c.version)
	if err != nil {
		c.t.Fatal(err)
	}
	var oldBin string
	for _, f := range oldM.Files {
		if f.Name == "containerd" {
			oldBin = filepath.Join(c.bundle, filepath.FromSlash(f.Path))
		}
	}
	bin, err := os.Open(oldBin)
	if err != nil {
		c.t.Fatalf("containerd of %s in the bundle: %v", old, err)
	}
	defer bin.Close()
	cmd, err := c.lab.Command(ctx, host.Name, "sh", "-c", "cat > /usr/local/bin/containerd.e2e-old && chmod 755 /usr/local/bin/containerd.e2e-old")
	if err != nil {
		c.t.Fatal(err)
	}
	cmd.Stdin = bin
	if out, err := cmd.CombinedOutput(); err != nil {
		c.t.Fatalf("%s: copy containerd of %s: %v\n%s", host.Name, old, err, out)
	}
	// Start the old binary, then put the cluster's back in place without a restart.
	c.exec(ctx, host.Name, `set -e; cd /usr/local/bin; cp -p containerd containerd.e2e-new; mv -f containerd.e2e-old containerd; systemctl restart containerd; mv -f containerd.e2e-new containerd`)
	from, to := oldM.Releases[0].Containerd, cur.Releases[0].Containerd
	if running := c.runningContainerd(ctx, host.Name); running != from {
		c.t.Fatalf("%s runs containerd %q after the swap, want %s", host.Name, running, from)
	}
	why := fmt.Sprintf("it ran %s, its binary is %s", strings.TrimPrefix(from, "v"), strings.TrimPrefix(to, "v"))
	plan, code := c.plan()
	if code != 4 || !strings.Contains(plan, "containerd restarts ("+why+")") {
		c.t.Errorf("plan with containerd %s running behind binary %s on %s: exit %d; want 4 and %q:\n%s", from, to, host.Name, code, "containerd restarts ("+why+")", plan)
	}
	out, err := c.run("apply", "--timeout", "4m")
	if err != nil {
		c.t.Fatalf("apply with a stale containerd on %s: %v\n%s", host.Name, err, out)
	}
	if !strings.Contains(out, "containerd restarted: "+why) {
		c.t.Errorf("apply did not restart the stale containerd on %s:\n%s", host.Name, linesWith(out, host.Name))
	}
	c.checkRuntime(ctx, []lab.Host{host})
}

// runUntil runs kforge with args and kills it (SIGKILL, by its PID) once a line of its output
// contains marker; it says whether it did, and returns the output.
func (c *cluster) runUntil(ctx context.Context, marker string, args ...string) (bool, string) {
	c.t.Helper()
	cmd := exec.CommandContext(ctx, c.kforge, append([]string{"-i", c.inventory, "--state-dir", c.state, "--log-file", filepath.Join(c.state, "e2e.log")}, args...)...)
	cmd.Env = append(os.Environ(), c.env...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); pw.Close() }()
	var out strings.Builder
	killed := false
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if !killed && strings.Contains(sc.Text(), marker) {
			killed = cmd.Process.Kill() == nil
		}
	}
	<-done
	return killed, out.String()
}

// startLoad creates the workload that notices downtime: Deployment web (2 replicas, one per
// worker, ready when it answers) with a PodDisruptionBudget of minAvailable 1 behind Service
// web, and pod prober on the master requesting the Service every 100 ms. It returns the
// prober's counts once the Service answers steadily (requests made before the Service had
// endpoints fail, and do not count).
func startLoad(ctx context.Context, t testing.TB, k kubernetes.Interface, master string) (ok, failed int) {
	t.Helper()
	labels := map[string]string{"app": "web"}
	guardedDeployment(ctx, t, k, "web", 2, corev1.PodSpec{
		Containers: []corev1.Container{{
			Name: "agent", Image: agentImage, ImagePullPolicy: corev1.PullNever, Args: []string{"serve"},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
		}},
		TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}},
	})
	svc, err := k.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "prober", Labels: map[string]string{proberLabel: "prober"}},
		Spec: corev1.PodSpec{
			NodeName:    master,
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "agent", Image: agentImage, ImagePullPolicy: corev1.PullNever,
				Args: []string{"probe", "http://" + svc.Spec.ClusterIP + "/"}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Steady: 2 replicas ready, and no failed request over the last 5 s of prober counts.
	lastFailed, steadySince := -1, time.Time{}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := k.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil || d.Status.ReadyReplicas != 2 {
			return false, nil
		}
		if ok, failed, err = readProber(ctx, k); err != nil || ok < 20 {
			return false, nil
		}
		if failed != lastFailed {
			lastFailed, steadySince = failed, time.Now()
		}
		return time.Since(steadySince) > 5*time.Second, nil
	})
	if err != nil {
		ok, failed, perr := readProber(ctx, k)
		t.Fatalf("load not running: %v (prober: %d ok, %d failed, %v)", err, ok, failed, perr)
	}
	t.Logf("load steady: the prober had %d answers and %d failures (before the Service had endpoints)", ok, failed)
	return ok, failed
}

// guardedDeployment creates Deployment name in the default namespace, replicas of spec labeled
// app=name (rolling updates), under a PodDisruptionBudget of the same name with minAvailable 1.
func guardedDeployment(ctx context.Context, t testing.TB, k kubernetes.Interface, name string, replicas int32, spec corev1.PodSpec) {
	t.Helper()
	labels := map[string]string{"app": name}
	if _, err := k.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := intstr.FromInt32(1)
	if _, err := k.PolicyV1().PodDisruptionBudgets("default").Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// linesWith returns the lines of out that contain s.
func linesWith(out, s string) string {
	var l []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, s) {
			l = append(l, line)
		}
	}
	return strings.Join(l, "\n")
}

// blockDrain runs one pod on node under a PodDisruptionBudget of minAvailable 1: no drain of
// node can evict it. It returns once the budget allows no disruption.
func blockDrain(ctx context.Context, t testing.TB, k kubernetes.Interface, node string) {
	t.Helper()
	guardedDeployment(ctx, t, k, "blocker", 1, corev1.PodSpec{
		NodeSelector: map[string]string{"kubernetes.io/hostname": node},
		Containers:   []corev1.Container{{Name: "agent", Image: agentImage, ImagePullPolicy: corev1.PullNever, Args: []string{"serve"}}},
	})
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		b, err := k.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "blocker", metav1.GetOptions{})
		return err == nil && b.Status.ObservedGeneration == b.Generation && b.Status.CurrentHealthy == 1 && b.Status.DisruptionsAllowed == 0, nil
	})
	if err != nil {
		t.Fatalf("the blocking pod on %s is not running under its PodDisruptionBudget: %v", node, err)
	}
}

// watchCordon polls node every 500 ms; the function it returns says when it was first seen
// cordoned (zero if never).
func watchCordon(ctx context.Context, k kubernetes.Interface, node string) func() time.Time {
	var at atomic.Int64
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		for ctx.Err() == nil {
			if n, err := k.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil && n.Spec.Unschedulable {
				at.Store(time.Now().UnixNano())
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()
	return func() time.Time {
		cancel()
		if ns := at.Load(); ns != 0 {
			return time.Unix(0, ns)
		}
		return time.Time{}
	}
}

// proberLabel marks the prober pod: the measuring instrument, which a scripted drain leaves
// alone (kubectl drain --pod-selector).
const proberLabel = "kforge-e2e"

var proberLine = regexp.MustCompile(`probe ok=(\d+) failed=(\d+)`)

// readProber reads the prober's last counts from its log, adding those of its previous
// container when it was restarted (a kubelet upgrade must not restart it, but if it did, its
// failures still count).
func readProber(ctx context.Context, k kubernetes.Interface) (ok, failed int, err error) {
	p, err := k.CoreV1().Pods("default").Get(ctx, "prober", metav1.GetOptions{})
	if err != nil {
		return 0, 0, err
	}
	logs := []*corev1.PodLogOptions{{}}
	if len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].RestartCount > 0 {
		logs = append(logs, &corev1.PodLogOptions{Previous: true})
	}
	for i, o := range logs {
		b, err := k.CoreV1().Pods("default").GetLogs("prober", o).Do(ctx).Raw()
		if err != nil {
			return 0, 0, err
		}
		m := proberLine.FindAllSubmatch(b, -1)
		if len(m) == 0 {
			if i == 0 {
				return 0, 0, fmt.Errorf("no counts in the prober's log yet")
			}
			continue
		}
		last := m[len(m)-1]
		o, _ := strconv.Atoi(string(last[1]))
		f, _ := strconv.Atoi(string(last[2]))
		ok, failed = ok+o, failed+f
	}
	return ok, failed, nil
}

// proberCounts waits for the prober's next count (it prints every 2 s) and returns it, logging
// the failures it saw.
func proberCounts(ctx context.Context, t testing.TB, k kubernetes.Interface) (ok, failed int) {
	t.Helper()
	time.Sleep(2500 * time.Millisecond)
	ok, failed, err := readProber(ctx, k)
	if err != nil {
		t.Fatalf("prober: %v", err)
	}
	if failed > 0 {
		var lines []string
		for _, previous := range []bool{true, false} { // its earlier container, if restarted, then this one
			b, _ := k.CoreV1().Pods("default").GetLogs("prober", &corev1.PodLogOptions{Previous: previous}).Do(ctx).Raw()
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, "failed:") {
					lines = append(lines, l)
				}
			}
		}
		t.Logf("the prober's failures (from the start, before the Service was steady included):\n%s", strings.Join(lines, "\n"))
	}
	return ok, failed
}

// apiProbe reads a namespace from the API every 200 ms until stopped: a real request, as a
// user's client makes it (client-go retries what an API server that is stopping answers with
// 429 and Retry-After). A read fails on an error, or when no answer came within probeTimeout;
// the clients made for each probe (freshClient) give up connecting after 2 s, so an address no
// one answers (a VIP on the move) fails fast. A failed read records why: the error, and what
// /readyz said at that moment. /readyz itself is not the probe: a kube-apiserver told to stop
// fails it by design while it still serves, so that load balancers move away first. The
// slowest answer is kept, so that slowness is seen without being called a failure.
type apiProbe struct {
	slowest atomic.Int64 // nanoseconds of the slowest answered probe
	failed  atomic.Int64
	down    atomic.Int64 // nanoseconds between a failed probe and the next
	longest atomic.Int64 // nanoseconds of the longest run of failed probes
	done    chan struct{}
	ended   chan struct{}
	mu      sync.Mutex
	list    []outage // the runs of failed probes, in order
}

// outage is one run of failed probes: when it began, how long it lasted and what its first
// probe got (an error, or /readyz's failing checks).
type outage struct {
	start time.Time
	took  time.Duration
	why   string
}

func probeAPI(ctx context.Context, k kubernetes.Interface) *apiProbe {
	return probeAPIWith(ctx, func() kubernetes.Interface { return k })
}

// probeAPIWith is probeAPI with the client client returns for each probe.
func probeAPIWith(ctx context.Context, client func() kubernetes.Interface) *apiProbe {
	p := &apiProbe{done: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(p.ended)
		var cur outage // the current run of failed probes (zero start: none)
		for {
			start := time.Now()
			rctx, cancel := context.WithTimeout(ctx, probeTimeout)
			ok, why := false, "no client"
			if k := client(); k != nil {
				_, err := k.CoreV1().Namespaces().Get(rctx, "default", metav1.GetOptions{})
				if ok = err == nil; !ok && cur.start.IsZero() {
					why = err.Error() + "; /readyz: " + readyz(ctx, k)
				}
				if d := int64(time.Since(start)); ok && d > p.slowest.Load() {
					p.slowest.Store(d)
				}
			}
			cancel()
			select {
			case <-p.done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			if !ok {
				p.failed.Add(1)
				p.down.Add(int64(time.Since(start)))
				if cur.start.IsZero() {
					cur = outage{start: start, why: why}
				}
				if d := int64(time.Since(cur.start)); d > p.longest.Load() {
					p.longest.Store(d)
				}
			} else if !cur.start.IsZero() {
				cur.took = start.Sub(cur.start)
				p.mu.Lock()
				p.list = append(p.list, cur)
				p.mu.Unlock()
				cur = outage{}
			}
		}
	}()
	return p
}

// readyz is what /readyz?verbose says now: "ok", its failed checks ("[-]etcd failed"), or the
// error.
func readyz(ctx context.Context, k kubernetes.Interface) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	body, err := k.Discovery().RESTClient().Get().AbsPath("/readyz").Param("verbose", "1").Do(ctx).Raw()
	if err == nil {
		return "ok"
	}
	var failed []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "[-]") {
			failed = append(failed, l)
		}
	}
	if len(failed) > 0 {
		return strings.Join(failed, "; ")
	}
	return err.Error()
}

// outages lists the runs of failed probes that ended: the clock time each began, how long it
// lasted, and what its first probe got (to match with the events of the run under test).
func (p *apiProbe) outages() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, o := range p.list {
		fmt.Fprintf(&b, "\n  outage at %s for %s: %s", o.start.Format("15:04:05.0"), o.took.Round(100*time.Millisecond), o.why)
	}
	return b.String()
}

// probeTimeout is how long a probe waits for its answer. It was 2 s until 187f0a9's CI, where
// with two labs' control planes restarting on 2 cores (load average 25) one read in five
// minutes through each way took longer, and /readyz answered ok at once after it: slow, not
// down; a user's kubectl waits for it. An API that does not answer for this long is down.
const probeTimeout = 10 * time.Second

// slowestAnswer is the longest an answered probe took.
func (p *apiProbe) slowestAnswer() time.Duration { return time.Duration(p.slowest.Load()) }

// worst is the longest outage that ended, on one line (when, how long, what the first failed
// probe said), or "": a failure's message carries it, since CI keeps a failure's first line.
func (p *apiProbe) worst() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var w outage
	for _, o := range p.list {
		if o.took > w.took {
			w = o
		}
	}
	if w.took == 0 {
		return ""
	}
	return fmt.Sprintf("the longest outage at %s for %s: %s", w.start.Format("15:04:05.0"), w.took.Round(100*time.Millisecond), strings.ReplaceAll(w.why, "\n", " "))
}

// stop ends the probe and returns the failed probes and the time they cover.
func (p *apiProbe) stop() (int64, time.Duration) {
	close(p.done)
	<-p.ended
	return p.failed.Load(), time.Duration(p.down.Load())
}

// longestOutage is the longest run of failed probes, from the first to the last.
func (p *apiProbe) longestOutage() time.Duration { return time.Duration(p.longest.Load()) }

// registryState is what a master's registry (the masters serve the bundle) holds.
type registryState struct {
	kubeProxyTags string // the tags of registry.k8s.io/kube-proxy, space-separated
	mib           string // its storage, in MiB
}

func (r registryState) String() string {
	return fmt.Sprintf("kube-proxy %s, %s MiB", r.kubeProxyTags, r.mib)
}

func registryContents(ctx context.Context, c *cluster, host string) registryState {
	const dir = hostpath.RegistryDir
	tags := c.exec(ctx, host, "ls "+dir+"/docker/registry/v2/repositories/registry.k8s.io/kube-proxy/_manifests/tags")
	return registryState{kubeProxyTags: strings.Join(strings.Fields(tags), " "), mib: strings.TrimSpace(c.exec(ctx, host, "du -sm "+dir+" | cut -f1"))}
}

// watchUnknown records the nodes seen with a Ready condition of status Unknown, listing them
// every second: kube-controller-manager's verdict on a node whose kubelet stopped renewing its
// Lease (NodeStatusUnknown), not a kubelet's own NotReady (status False).
func watchUnknown(ctx context.Context, k kubernetes.Interface) *notReadyWatch {
	return watchNodes(ctx, k, func(n *corev1.Node) bool {
		return slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeReady && c.Status == corev1.ConditionUnknown
		})
	})
}

// patchUpgradeUnderLoad upgrades the cluster of masters and workers, created at from, to to,
// a later patch release of the same minor, with apply and the same load as the minors'
// upgrade: a Deployment of 2 replicas under a PodDisruptionBudget behind a Service, probed
// from a pod on the first master every 100 ms, and the API probed from the workstation. plan
// shows the route first. Afterwards every node runs to, Ready and schedulable, kube-proxy runs
// to's image, the data written before is there, an etcd snapshot of from was taken first, and
// the prober counted 0 failed requests (at most a handful is tolerated, as in the minors'
// upgrade, and logged). The load is removed afterwards. agent is buildAgentImage's archive,
// imported on every node for the load.
//
// Seen once, when the workloads check came right after it (f4978b8): a Service made just
// after the upgrade did not resolve at once from a worker's pod (NXDOMAIN from CoreDNS). The
// likely cause: the CoreDNS replica that was not moved kept running through the single
// master's API outage (14 s), and its informer's watch came back after client-go's backoff;
// a patch release keeps CoreDNS's image, so nothing restarts it. Not yet proven; the checks that
// make new Services now run before the upgrade.
func (c *cluster) patchUpgradeUnderLoad(ctx context.Context, masters, workers []lab.Host, agent, from, to string) {
	t := c.t.(*testing.T)
	t.Helper()
	k := c.client()
	for _, n := range append(slices.Clone(masters), workers...) {
		c.importImage(ctx, n.Name, agent)
	}
	if _, err := k.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before-patch"}, Data: map[string]string{"at": from}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ok0, failed0 := startLoad(ctx, t, k, masters[0].Name)

	c.version = to
	c.writeInventory(masters, workers)
	plan, code := c.plan()
	if code != 4 || !strings.Contains(plan, "upgrade\n") || !strings.Contains(plan, "→ "+to+":") || !strings.Contains(plan, "control plane → "+to+",") {
		t.Errorf("plan of the patch upgrade (exit %d) does not show the route %s → %s:\n%s", code, from, to, plan)
	}
	ok, failed := c.applyUnderProbes(ctx, k, probeAPI(ctx, k), time.Now(), ok0, failed0, "patch upgrade "+from+" → "+to)
	if failed > 5 || ok < 100 {
		t.Errorf("the Service prober counted %d failed requests (and %d answered) during the patch upgrade; want none, and at most a handful", failed, ok)
	}

	nodesAt(ctx, t, k, to)
	rel, _ := release.For(to)
	if ds, err := k.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{}); err != nil || ds.Spec.Template.Spec.Containers[0].Image != rel.Images("").KubeProxy {
		t.Errorf("kube-proxy: %v, want image %s", err, rel.Images("").KubeProxy)
	}
	for _, m := range masters {
		if img := c.exec(ctx, m.Name, "grep -h 'image:' /etc/kubernetes/manifests/kube-apiserver.yaml"); !strings.Contains(img, "kube-apiserver:"+to) {
			t.Errorf("%s's kube-apiserver manifest: %s; want %s", m.Name, strings.TrimSpace(img), to)
		}
	}
	if cm, err := k.CoreV1().ConfigMaps("default").Get(ctx, "before-patch", metav1.GetOptions{}); err != nil || cm.Data["at"] != from {
		t.Errorf("data written before the patch upgrade: %v %v", cm, err)
	}
	snaps, err := state.At(c.state).ListSnapshots()
	if err != nil || !slices.ContainsFunc(snaps, func(s state.Snapshot) bool { return s.Kubernetes == from }) {
		t.Errorf("snapshots: %+v %v; want one taken at %s before the upgrade", snaps, err, from)
	}

	// The load goes: the later checks have their own.
	bg := metav1.DeletePropagationBackground
	del := metav1.DeleteOptions{PropagationPolicy: &bg}
	for _, err := range []error{
		k.CoreV1().Pods("default").Delete(ctx, "prober", del),
		k.CoreV1().Services("default").Delete(ctx, "web", del),
		k.AppsV1().Deployments("default").Delete(ctx, "web", del),
		k.PolicyV1().PodDisruptionBudgets("default").Delete(ctx, "web", del),
		k.CoreV1().ConfigMaps("default").Delete(ctx, "before-patch", del),
	} {
		if err != nil {
			t.Errorf("removing the load: %v", err)
		}
	}
}

// applyUnderProbes runs apply (what it does, e.g. "upgrade v1.35.4 → v1.37.2", names it in the
// log) while the Service prober started by startLoad (at ok0 answered, failed0 failed) and api
// probe, then stops api. It fails the test when apply fails, logs apply's output and how long
// it took since start, and returns the requests the Service prober answered and failed since
// ok0 and failed0, which it logs with api's failures and longest outage.
func (c *cluster) applyUnderProbes(ctx context.Context, k kubernetes.Interface, api *apiProbe, start time.Time, ok0, failed0 int, what string) (ok, failed int) {
	t := c.t.(*testing.T)
	t.Helper()
	out, err := c.run("apply", "--timeout", "5m")
	took := time.Since(start)
	apiFailed, apiDown := api.stop()
	if err != nil {
		t.Fatalf("apply, %s: %v\n%s", what, err, out)
	}
	t.Logf("%s took %s:\n%s", what, took.Round(time.Second), out)
	ok, failed = proberCounts(ctx, t, k)
	ok, failed = ok-ok0, failed-failed0
	t.Logf("Service prober during the %s: %d requests answered, %d failed; API probes: %d failed, about %s without an answer, the longest outage %s%s",
		what, ok, failed, apiFailed, apiDown.Round(100*time.Millisecond), api.longestOutage().Round(100*time.Millisecond), api.outages())
	return ok, failed
}

// nodesAt checks that every node of the cluster runs Kubernetes version, Ready and schedulable.
func nodesAt(ctx context.Context, t *testing.T, k kubernetes.Interface, version string) {
	t.Helper()
	nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Status.NodeInfo.KubeletVersion != version || !nodeReady(&n) || n.Spec.Unschedulable {
			t.Errorf("node %s: kubelet %s, Ready %v, unschedulable %v; want %s, Ready, schedulable", n.Name, n.Status.NodeInfo.KubeletVersion, nodeReady(&n), n.Spec.Unschedulable, version)
		}
	}
}
