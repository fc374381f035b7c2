package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/lab"
)

// BenchmarkNetworkPolicy is what enforcing NetworkPolicy costs (issue 33), in one run:
//   - apply: hosts up → 3 nodes Ready (1 master, 2 workers, bare hosts), once with
//     networking.networkPolicy off and once with the default (the agent on every node), each on
//     a fresh lab, and their ratio (target: ≤ 1.0, no slower);
//   - on the cluster with the agent: 1000 requests, one after another, each on a new
//     connection, through a Service from a pod on one worker to a server on the other, without
//     NetworkPolicies and then with 50 selecting the server (one of them lets the client in):
//     their latency (p50, p99), and the agent's CPU time (all nodes) and resident memory (per
//     node) meanwhile.
func BenchmarkNetworkPolicy(b *testing.B) {
	testenv.Require(b, lab.Prerequisites())
	ctx, dir, kforge, bundleDir := labBench(b, 30*time.Minute)
	agent := buildAgentImage(b, b.TempDir())
	id := os.Getpid() % 100000
	b.ResetTimer()
	off := runKforge(ctx, b, kforge, bundleDir, filepath.Join(dir, "off"), fmt.Sprintf("npf%d", id), kforgeSide{hosts: 3, networkPolicy: inventory.NetworkPolicyOff})
	var none, fifty policyCost
	on := runKforge(ctx, b, kforge, bundleDir, filepath.Join(dir, "on"), fmt.Sprintf("npn%d", id), kforgeSide{hosts: 3, then: func(c *cluster) {
		none, fifty = measurePolicyCost(ctx, c, agent)
	}})
	b.StopTimer()
	ratio := on.total.Seconds() / off.total.Seconds()
	b.Logf("hosts up -> all 3 nodes Ready: networkPolicy off %s, enforce %s, enforce/off %.2f (target <= 1.00); load average at start: off %s, enforce %s",
		secs(off.total), secs(on.total), ratio, off.load, on.load)
	b.Logf("through a Service, 1000 requests on new connections: no policy %s; 50 policies %s", none, fifty)
	b.ReportMetric(off.total.Seconds(), "off-s")
	b.ReportMetric(on.total.Seconds(), "enforce-s")
	b.ReportMetric(ratio, "enforce/off")
	for _, m := range []struct {
		name string
		c    policyCost
	}{{"0", none}, {"50", fifty}} {
		b.ReportMetric(m.c.p50.Seconds()*1000, "p50-ms-"+m.name+"-policies")
		b.ReportMetric(m.c.p99.Seconds()*1000, "p99-ms-"+m.name+"-policies")
		b.ReportMetric(m.c.agentCPU.Seconds(), "agent-cpu-s-"+m.name+"-policies")
		b.ReportMetric(float64(m.c.agentRSSMiB), "agent-rss-MiB-max-"+m.name+"-policies")
	}
}

// policyCost is one measurement of measurePolicyCost.
type policyCost struct {
	requests, failed int
	p50, p99, max    time.Duration
	agentCPU         time.Duration // the agents' CPU time on all nodes during the requests
	agentRSSMiB      int64         // the largest agent's resident memory after them
}

func (p policyCost) String() string {
	return fmt.Sprintf("%d requests, %d failed, p50 %s, p99 %s, max %s; the agents' CPU %s (all nodes), resident memory up to %d MiB per node",
		p.requests, p.failed, p.p50.Round(10*time.Microsecond), p.p99.Round(10*time.Microsecond), p.max.Round(10*time.Microsecond), p.agentCPU.Round(time.Millisecond), p.agentRSSMiB)
}

// measurePolicyCost runs a server on the first worker behind a Service and a client on the
// second, and measures the client's requests without NetworkPolicies, then with 50 selecting
// the server.
func measurePolicyCost(ctx context.Context, c *cluster, agentArchive string) (none, fifty policyCost) {
	t := c.t
	t.Helper()
	h := c.lab.Hosts
	w1, w2 := h[1].Name, h[2].Name
	for _, w := range []string{w1, w2} {
		c.importImage(ctx, w, agentArchive)
	}
	k := c.client()
	for _, p := range []struct{ name, node, role string }{{"server", w1, "server"}, {"client", w2, "client"}} {
		if _, err := k.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Labels: map[string]string{"role": p.role}},
			Spec: corev1.PodSpec{NodeName: p.node, Containers: []corev1.Container{{
				Name: "agent", Image: agentImage, ImagePullPolicy: corev1.PullNever, Args: []string{"serve"},
			}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := k.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "server"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"role": "server"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + svc.Spec.ClusterIP + "/"
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := c.kubectl(ctx, "exec", "client", "--", "/agent", "get", url, "2s")
		return err == nil && strings.TrimSpace(out) == "server", nil
	}); err != nil {
		t.Fatalf("the client does not reach the server through its Service: %v", err)
	}
	none = c.policyRequests(ctx, url)

	port := intstr.FromInt32(8080)
	for i := range 50 {
		from := fmt.Sprintf("client-%d", i)
		if i == 0 {
			from = "client"
		}
		if _, err := k.NetworkingV1().NetworkPolicies("default").Create(ctx, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("allow-%02d", i)},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "server"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": from}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Port: &port}},
				}},
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Second) // the agents take the policies in
	fifty = c.policyRequests(ctx, url)
	return none, fifty
}

// policyRequests runs the client's 1000 requests to url and reads the agents' cost meanwhile.
func (c *cluster) policyRequests(ctx context.Context, url string) policyCost {
	t := c.t
	t.Helper()
	cpu0, _ := c.agentUsage(ctx)
	out, err := c.kubectl(ctx, "exec", "client", "--", "/agent", "bench", url, "1000")
	if err != nil {
		t.Fatalf("agent bench: %v\n%s", err, out)
	}
	cpu1, rss := c.agentUsage(ctx)
	var p policyCost
	for _, f := range strings.Fields(out) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "requests":
			p.requests, _ = strconv.Atoi(v)
		case "failed":
			p.failed, _ = strconv.Atoi(v)
		case "p50":
			p.p50, err = time.ParseDuration(v)
		case "p99":
			p.p99, err = time.ParseDuration(v)
		case "max":
			p.max, err = time.ParseDuration(v)
		}
		if err != nil {
			t.Fatalf("agent bench said %q: %v", out, err)
		}
	}
	if p.requests != 1000 {
		t.Fatalf("agent bench said %q", out)
	}
	p.agentCPU, p.agentRSSMiB = cpu1-cpu0, rss
	return p
}

// agentUsage is the NetworkPolicy agents' CPU time (user and system) summed over the lab's
// hosts, and the largest one's resident memory in MiB, read from /proc on each host.
func (c *cluster) agentUsage(ctx context.Context) (cpu time.Duration, rssMiB int64) {
	t := c.t
	t.Helper()
	for _, h := range c.lab.Hosts {
		out := c.exec(ctx, h.Name, `for d in /proc/[0-9]*; do [ "$(cat $d/comm 2>/dev/null)" = netpol ] && { awk '{print $14+$15}' $d/stat; awk '/^VmRSS/{print $2}' $d/status; break; }; done`)
		f := strings.Fields(out)
		if len(f) != 2 {
			t.Fatalf("%s: no NetworkPolicy agent process (netpol): %q", h.Name, out)
		}
		ticks, err1 := strconv.ParseInt(f[0], 10, 64)
		kib, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: the agent's /proc says %q", h.Name, out)
		}
		cpu += time.Duration(ticks) * 10 * time.Millisecond // USER_HZ is 100
		rssMiB = max(rssMiB, kib/1024)
	}
	return cpu, rssMiB
}
