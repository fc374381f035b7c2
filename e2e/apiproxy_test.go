package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/remote"
)

// The node-local API proxy's checks (issue 16), used by the HA test: the cluster built behind
// the lab's load balancer moves to the proxies, grows to four masters, loses one and shrinks.

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

// clientAt is an admin client of the API server at addr (host:port).
func (c *cluster) clientAt(addr string) kubernetes.Interface {
	c.t.Helper()
	cfg, err := c.adminConfig()
	if err != nil {
		c.t.Fatal(err)
	}
	cfg.Host = "https://" + addr
	return c.clientFor(cfg)
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
	cfg, err := c.adminConfig()
	if err != nil {
		c.t.Fatal(err)
	}
	proxy := fmt.Sprintf("127.0.0.1:%d", inventory.DefaultAPIProxyPort)
	cfg.Host = "https://" + proxy
	cfg.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return s.DialContext(ctx, network, proxy)
	}
	return c.clientFor(cfg)
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
