package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/release"
	"github.com/kforge/kforge/remote"
)

// TestHAWithoutALoadBalancer is issue 16's: 3 masters + 2 workers and no load balancer. Every
// node's kubelet reaches the API servers through its local proxy (127.0.0.1:6444), whose
// backends are exactly the masters. A master's host is stopped: within 30 s every other node
// has renewed its lease and is Ready and a new Deployment's pods run, while the API is probed
// through a worker's proxy. The dead master is pruned, then a new one added: after each apply
// every proxy lists exactly the current masters, and no kubelet restarted.
func TestHAWithoutALoadBalancer(t *testing.T) {
	testenv.Require(t, lab.Prerequisites())
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	c := newCluster(ctx, t, "px", release.Default(), lab.Options{Hosts: 6, Masters: 3})
	h := c.lab.Hosts // masters h[0..2], workers h[3] and h[4]; h[5] becomes a master later
	masters, workers := h[:3], h[3:5]

	c.writeInventory(masters, workers)
	start := time.Now()
	out, err := c.run("apply", "--timeout", "5m")
	if err != nil {
		t.Fatalf("apply of 3 masters without a load balancer: %v\n%s", err, out)
	}
	t.Logf("apply of 3 masters + 2 workers without a load balancer: %s", time.Since(start).Round(time.Second))
	nodes := append(slices.Clone(masters), workers...)
	c.checkAPIProxies(ctx, nodes, masters)
	pids := c.kubeletPIDs(ctx, nodes)

	// A master's host goes away (not the first: the workstation's admin.conf names it).
	k := c.client()
	viaProxy := c.clientThrough(ctx, workers[0])
	if _, err := viaProxy.Discovery().ServerVersion(); err != nil {
		t.Fatalf("the API through %s's proxy: %v", workers[0].Name, err)
	}
	api := probeAPI(ctx, viaProxy)
	gone := masters[1]
	stopped := time.Now()
	if err := c.lab.StopHost(ctx, gone.Name); err != nil {
		t.Fatal(err)
	}
	var others []string
	for _, n := range nodes {
		if n.Name != gone.Name {
			others = append(others, n.Name)
		}
	}
	renewed := waitLeasesRenewed(ctx, t, k, others, stopped)
	r, err := release.For(release.Default())
	if err != nil {
		t.Fatal(err)
	}
	running := waitDeploymentRuns(ctx, t, k, "after-"+gone.Name, "registry.k8s.io/pause:"+r.Pause, 2)
	failed, down := api.stop()
	t.Logf("%s stopped: every other node renewed its lease and is Ready after %s; a new Deployment's 2 pods ran after %s; API probes through %s's proxy (every 200 ms): %d failed (about %s), the longest outage %s",
		gone.Name, renewed.Sub(stopped).Round(100*time.Millisecond), running.Sub(stopped).Round(100*time.Millisecond), workers[0].Name, failed, down.Round(100*time.Millisecond), api.longestOutage().Round(100*time.Millisecond))
	if d := renewed.Sub(stopped); d > 30*time.Second {
		t.Errorf("the other nodes were Ready with a renewed lease only %s after %s stopped; want within 30 s", d, gone.Name)
	}
	if d := running.Sub(stopped); d > 30*time.Second {
		t.Errorf("a new Deployment's pods ran only %s after %s stopped; want within 30 s", d, gone.Name)
	}
	if _, err := viaProxy.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the API through %s's proxy with %s down: %v", workers[0].Name, gone.Name, err)
	}

	// The dead master is pruned: every proxy follows, nothing restarts.
	left := []lab.Host{masters[0], masters[2]}
	c.writeInventory(left, workers)
	if out, err := c.run("apply", "--prune", "--timeout", "5m"); err != nil {
		t.Fatalf("apply --prune of the dead master %s: %v\n%s", gone.Name, err, out)
	}
	nodes = append(slices.Clone(left), workers...)
	c.checkAPIProxies(ctx, nodes, left)
	c.checkKubeletsKept(ctx, pids, nodes)

	// A new master joins: every proxy follows, and the earlier nodes' kubelets keep running.
	grown := append(slices.Clone(left), h[5])
	c.writeInventory(grown, workers)
	if out, err := c.run("apply", "--timeout", "5m"); err != nil {
		t.Fatalf("apply adding master %s: %v\n%s", h[5].Name, err, out)
	}
	c.checkKubeletsKept(ctx, pids, nodes)
	nodes = append(slices.Clone(grown), workers...)
	c.checkAPIProxies(ctx, nodes, grown)
	if plan, code := c.plan(); code != 0 {
		t.Errorf("plan after adding the master: exit %d\n%s", code, plan)
	}
}

// checkAPIProxies checks that every node's kubelet uses its local proxy and that the proxy's
// backends, as it reports them, are exactly the masters' API servers, each up (within 20 s of
// the apply: the proxy reads its configuration every second and checks a backend every second).
func (c *cluster) checkAPIProxies(ctx context.Context, nodes, masters []lab.Host) {
	c.t.Helper()
	want := map[string]bool{}
	for _, m := range masters {
		want[net.JoinHostPort(m.Address, "6443")] = true
	}
	for _, n := range nodes {
		if conf := c.exec(ctx, n.Name, "grep 'server:' "+hostpath.KubeletKubeconfig); strings.TrimSpace(conf) != fmt.Sprintf("server: https://127.0.0.1:%d", inventory.DefaultAPIProxyPort) {
			c.t.Errorf("%s: kubelet.conf %s, want the local proxy", n.Name, strings.TrimSpace(conf))
		}
		var got map[string]bool
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			var s struct{ Backends map[string]bool }
			if json.Unmarshal([]byte(c.exec(ctx, n.Name, "cat "+hostpath.APIProxyState+" 2>/dev/null; true")), &s) != nil {
				return false, nil
			}
			got = s.Backends
			return fmt.Sprint(got) == fmt.Sprint(want), nil
		})
		if err != nil {
			c.t.Errorf("%s: the API proxy's backends are %v, want %v", n.Name, got, want)
		}
	}
}

// kubeletPIDs are the nodes' kubelets' process IDs.
func (c *cluster) kubeletPIDs(ctx context.Context, nodes []lab.Host) map[string]string {
	c.t.Helper()
	out := map[string]string{}
	for _, n := range nodes {
		out[n.Name] = strings.TrimSpace(c.exec(ctx, n.Name, "systemctl show -p MainPID --value kubelet"))
	}
	return out
}

// checkKubeletsKept checks that the nodes' kubelets are the processes pids recorded.
func (c *cluster) checkKubeletsKept(ctx context.Context, pids map[string]string, nodes []lab.Host) {
	c.t.Helper()
	now := c.kubeletPIDs(ctx, nodes)
	for _, n := range nodes {
		if now[n.Name] != pids[n.Name] {
			c.t.Errorf("%s: kubelet restarted (PID %s, was %s)", n.Name, now[n.Name], pids[n.Name])
		}
	}
}

// clientThrough is an admin client whose connections go through host's SSH connection to its
// node-local API proxy, as the node's own kubelet reaches the API.
func (c *cluster) clientThrough(ctx context.Context, host lab.Host) kubernetes.Interface {
	c.t.Helper()
	s, err := remote.Dial(ctx, remote.Config{Name: host.Name, Address: host.Address, Port: 22, User: "root",
		IdentityFile: c.lab.IdentityFile, KnownHostsFile: c.lab.KnownHostsFile}, remote.Options{})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { s.Close() })
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(c.state, "admin.conf"))
	if err != nil {
		c.t.Fatal(err)
	}
	proxy := fmt.Sprintf("127.0.0.1:%d", inventory.DefaultAPIProxyPort)
	cfg.Host = "https://" + proxy
	cfg.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return s.DialContext(ctx, network, proxy)
	}
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	return k
}

// waitLeasesRenewed waits until every node of names has renewed its lease after since and is
// Ready, and says when.
func waitLeasesRenewed(ctx context.Context, t *testing.T, k kubernetes.Interface, names []string, since time.Time) time.Time {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			l, err := k.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
			if err != nil || !renewedAfter(l, since) {
				return false, nil
			}
			n, err := k.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || !nodeReady(n) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("nodes %v did not all renew their leases and stay Ready: %v", names, err)
	}
	return time.Now()
}

func renewedAfter(l *coordinationv1.Lease, since time.Time) bool {
	return l.Spec.RenewTime != nil && l.Spec.RenewTime.After(since)
}

// waitDeploymentRuns creates a Deployment of replicas pods of image (already on the nodes) and
// waits until they all run, saying when.
func waitDeploymentRuns(ctx context.Context, t *testing.T, k kubernetes.Interface, name, image string, replicas int32) time.Time {
	t.Helper()
	labels := map[string]string{"app": name}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := k.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image, ImagePullPolicy: corev1.PullNever}}}}},
		}, metav1.CreateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("create Deployment %s: %v", name, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		ps, err := k.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, nil
		}
		n := 0
		for _, p := range ps.Items {
			if p.Status.Phase == corev1.PodRunning {
				n++
			}
		}
		return n == int(replicas), nil
	})
	if err != nil {
		t.Fatalf("Deployment %s: its pods do not run: %v", name, err)
	}
	return time.Now()
}
