package e2e

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/etcd/snapshotfile"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/release"
	"github.com/kforge/kforge/state"
)

// The checks below are what every e2e cluster must pass, whatever its minor: one cluster serves
// them all, in order.

// checkRuntime: containerd and runc on every host are the ones the bundle's release of the
// cluster's version names, and the containerd that runs is that binary: the server's version
// through its socket (ctr version) and the runtime version its node reports.
func (c *cluster) checkRuntime(ctx context.Context, hosts []lab.Host) {
	c.t.Helper()
	m, err := bundle.LoadRelease(c.bundle, c.version)
	if err != nil {
		c.t.Fatal(err)
	}
	rel := m.Releases[0]
	for _, h := range hosts {
		got := c.exec(ctx, h.Name, "containerd --version; runc --version | head -1")
		if !strings.Contains(got, "containerd/v2 "+rel.Containerd+" ") || !strings.Contains(got, "runc version "+strings.TrimPrefix(rel.Runc, "v")) {
			c.t.Errorf("%s has %q, want the bundle's containerd %s and runc %s", h.Name, got, rel.Containerd, rel.Runc)
		} else {
			c.t.Logf("%s: %s", h.Name, strings.ReplaceAll(strings.TrimSpace(got), "\n", "; "))
		}
		if server := c.runningContainerd(ctx, h.Name); server != rel.Containerd {
			c.t.Errorf("%s: the containerd that runs is %q (ctr version's server), want the bundle's %s", h.Name, server, rel.Containerd)
		}
	}
	// kubelet reports the runtime's version with its node status, every 10 s or so.
	k := c.client()
	want := "containerd://" + strings.TrimPrefix(rel.Containerd, "v")
	for _, h := range hosts {
		var seen string
		err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			n, err := k.CoreV1().Nodes().Get(ctx, h.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			seen = n.Status.NodeInfo.ContainerRuntimeVersion
			return seen == want, nil
		})
		if err != nil {
			c.t.Errorf("node %s reports container runtime %q, want %s", h.Name, seen, want)
		}
	}
}

// runningContainerd is the version of the containerd that answers on a host's socket.
func (c *cluster) runningContainerd(ctx context.Context, host string) string {
	c.t.Helper()
	return strings.TrimSpace(c.exec(ctx, host, `ctr version | sed -n '/^Server:/,$ s/^ *Version: *//p'`))
}

// checkNodes: want nodes, every one Ready and running the cluster's kubelet version, and every
// kube-system pod Running. It returns the nodes.
func (c *cluster) checkNodes(ctx context.Context, want int) []corev1.Node {
	c.t.Helper()
	k := c.client()
	nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	if len(nodes.Items) != want {
		c.t.Fatalf("%d nodes, want %d", len(nodes.Items), want)
	}
	for _, n := range nodes.Items {
		if !nodeReady(&n) {
			c.t.Errorf("node %s is not Ready: %+v", n.Name, n.Status.Conditions)
		}
		if v := n.Status.NodeInfo.KubeletVersion; v != c.version {
			c.t.Errorf("node %s runs kubelet %s, want %s", n.Name, v, c.version)
		}
	}
	pods, err := k.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	exists := map[string]bool{}
	for _, n := range nodes.Items {
		exists[n.Name] = true
	}
	running := 0
	for _, p := range pods.Items {
		switch {
		case p.Spec.NodeName != "" && !exists[p.Spec.NodeName]:
			// A pod of a node that was deleted (a lost master after a restore, a pruned
			// host): the pod garbage collector marks it Failed, then deletes it.
			c.t.Logf("kube-system pod %s of deleted node %s is %s (garbage-collected)", p.Name, p.Spec.NodeName, p.Status.Phase)
		case p.Status.Phase != corev1.PodRunning:
			c.t.Errorf("kube-system pod %s on %s is %s", p.Name, p.Spec.NodeName, p.Status.Phase)
		default:
			running++
		}
	}
	// etcd, apiserver, controller-manager, scheduler, a kube-proxy per node, 2 coredns
	if min := 6 + want; running < min {
		c.t.Errorf("only %d kube-system pods run on the nodes, want at least %d", running, min)
	}
	return nodes.Items
}

// workload says how checkWorkloads gets its image onto the nodes.
type workload struct {
	image string
	pull  corev1.PullPolicy
}

// checkWorkloads runs the agent image as a server on w1 behind a Service and as a client on
// each worker, then checks DNS from a pod on each worker, the Service from a pod on w2 by name
// (cross-node pod network and kube-proxy), and kubectl logs.
func (c *cluster) checkWorkloads(ctx context.Context, wl workload, w1, w2 string) {
	t := c.t
	t.Helper()
	k := c.client()
	mkPod := func(pod, node string, args ...string) {
		_, err := k.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: pod, Labels: map[string]string{"app": pod}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
				Name: "agent", Image: wl.image, ImagePullPolicy: wl.pull, Args: args,
			}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	mkPod("server", w1, "serve")
	mkPod("client-"+w1, w1, "serve")
	mkPod("client-"+w2, w2, "serve")
	if _, err := k.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "server"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "server"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		ps, err := k.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		running := 0
		for _, p := range ps.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == 3, nil
	})
	if err != nil {
		ps, _ := k.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		events, _ := c.kubectl(ctx, "get", "events", "-n", "default")
		t.Fatalf("test pods not running: %v\n%+v\n%s", err, ps, events)
	}

	kc := func(args ...string) (string, error) { return c.kubectl(ctx, args...) }
	// Pods, Services and routes converge asynchronously (kube-proxy and flannel program a new
	// Service and a new node's routes within seconds): each check may take a few tries, and
	// says how many it took.
	eventually := func(what string, ok func(out string) bool, args ...string) {
		t.Helper()
		var out string
		var err error
		for try := 1; try <= 15; try++ {
			if out, err = kc(args...); err == nil && ok(out) {
				if try > 1 {
					t.Logf("%s: needed %d tries", what, try)
				}
				return
			}
			time.Sleep(2 * time.Second)
		}
		t.Errorf("%s: %v\n%s", what, err, out)
	}
	for _, h := range []string{w1, w2} {
		// DNS from a pod on each worker (kubectl exec through the API server to kubelet).
		eventually("DNS from a pod on "+h, func(out string) bool { return strings.Contains(out, firstServiceIP) },
			"exec", "client-"+h, "--", "/agent", "lookup", "kubernetes.default")
	}
	eventually("Service from "+w2, func(out string) bool { return strings.TrimSpace(out) == "server" },
		"exec", "client-"+w2, "--", "/agent", "get", "http://server.default.svc.cluster.local/")
	// kubectl logs shows the server's log line for that request.
	out, err := kc("logs", "server")
	if err != nil || !strings.Contains(out, "agent serving on :8080") || !strings.Contains(out, "request from") {
		t.Errorf("kubectl logs server: %v\n%s", err, out)
	}
}

// applyChangesNothing runs plan, then apply again on a converged cluster: plan must say no
// changes, and apply must exit 0, restart nothing and rewrite no file on any of the hosts (nor
// must plan). It returns the hosts' snapshots.
func (c *cluster) applyChangesNothing(ctx context.Context, hosts []lab.Host) map[string]string {
	c.t.Helper()
	before := map[string]string{}
	for _, h := range hosts {
		before[h.Name] = c.snapshot(ctx, h.Name)
	}
	// plan agrees beforehand: no changes (exit 0 with --detailed-exitcode).
	start := time.Now()
	if plan, code := c.plan(); code != 0 || !strings.Contains(plan, "No changes: apply would change nothing.") {
		c.t.Errorf("plan on a converged cluster: exit %d\n%s", code, plan)
	}
	c.t.Logf("plan took %s", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	out, err := c.run("apply")
	if err != nil {
		c.t.Fatalf("second kforge apply: %v\n%s", err, out)
	}
	c.t.Logf("second apply took %s", time.Since(start).Round(time.Millisecond))
	for _, h := range hosts {
		if after := c.snapshot(ctx, h.Name); after != before[h.Name] {
			c.t.Errorf("%s changed on the second apply:\n%s", h.Name, diffLines(before[h.Name], after))
		}
	}
	if strings.Contains(out, "restarted") || strings.Contains(out, "created") {
		c.t.Errorf("second apply restarted or created something:\n%s", out)
	}
	return before
}

// checkEtcdStatusAndSnapshot: kforge etcd status reports every member healthy on the release's
// etcd version, and kforge etcd snapshot streams a snapshot into the state dir that verifies on
// its own (etcdutl's checks) and matches its record.
func (c *cluster) checkEtcdStatusAndSnapshot(ctx context.Context) {
	t := c.t
	t.Helper()
	rel, err := release.For(c.version)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.run("etcd", "status")
	if err != nil {
		t.Fatalf("kforge etcd status: %v\n%s", err, out)
	}
	etcdVersion := strings.TrimPrefix(rel.Etcd, "v")
	if !strings.Contains(out, " healthy ") || !strings.Contains(out, " "+etcdVersion+" ") || !strings.Contains(out, "voting members healthy: quorum") {
		t.Errorf("kforge etcd status does not show healthy members on etcd %s:\n%s", etcdVersion, out)
	}
	t.Logf("kforge etcd status:\n%s", out)

	before, err := state.At(c.state).ListSnapshots()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err = c.run("etcd", "snapshot", "--keep", "2")
	if err != nil {
		t.Fatalf("kforge etcd snapshot: %v\n%s", err, out)
	}
	t.Logf("kforge etcd snapshot took %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	snaps, err := state.At(c.state).ListSnapshots()
	if want := min(len(before)+1, 2); err != nil || len(snaps) != want {
		t.Fatalf("snapshots in the state dir: %+v, %v; want %d (--keep 2)", snaps, err, want)
	}
	s := snaps[len(snaps)-1] // the newest
	info, err := snapshotfile.Verify(s.File)
	if err != nil {
		t.Fatal(err)
	}
	if info.SHA256 != s.SHA256 || info.Revision != s.Revision || info.Size != s.Size || s.Etcd != etcdVersion || s.Kubernetes != c.version || info.TotalKeys < 100 {
		t.Errorf("snapshot %+v verifies as %+v; want the same sha256, revision and size, etcd %s, Kubernetes %s, a cluster's worth of keys", s, info, etcdVersion, c.version)
	}
}
