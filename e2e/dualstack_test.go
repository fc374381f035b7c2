package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
)

// checkDualStack checks a dual-stack cluster in both IP families:
//   - every node carries its IPv4 and its IPv6 address (kubelet's --node-ip) and a pod range of
//     each family;
//   - a pod on server gets an address of each family;
//   - a Service that requires both families gets a cluster IP of each, and answers on both from
//     a pod on client (another node: flannel's IPv4 and IPv6 VXLAN, kube-proxy's rules of both
//     families), and from client's host network (the Service route of each family);
//   - CoreDNS answers the Service's name with both addresses.
func (c *cluster) checkDualStack(ctx context.Context, wl workload, server, client string) {
	t := c.t
	t.Helper()
	k := c.client()
	nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	for _, h := range c.lab.Hosts {
		want[h.Name] = []string{h.Address, h.Address6}
	}
	for _, n := range nodes.Items {
		var internal []string
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				internal = append(internal, a.Address)
			}
		}
		if !slices.Equal(internal, want[n.Name]) || len(n.Spec.PodCIDRs) != 2 || !isFamily(n.Spec.PodCIDRs[0], false) || !isFamily(n.Spec.PodCIDRs[1], true) {
			t.Errorf("node %s: internal IPs %v, pod CIDRs %v; want %v and a pod range of each family", n.Name, internal, n.Spec.PodCIDRs, want[n.Name])
		}
	}

	const ns = "dual"
	if _, err := k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := k.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete namespace %s: %v", ns, err)
		}
	}()
	for _, p := range []struct{ name, node string }{{"server", server}, {"client", client}} {
		if _, err := k.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Labels: map[string]string{"app": p.name}},
			Spec: corev1.PodSpec{NodeName: p.node, TerminationGracePeriodSeconds: new(int64), Containers: []corev1.Container{{
				Name: "agent", Image: wl.image, ImagePullPolicy: wl.pull, Args: []string{"serve"},
			}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	policy := corev1.IPFamilyPolicyRequireDualStack
	svc, err := k.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "server"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "server"}, IPFamilyPolicy: &policy,
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a Service requiring both IP families: %v", err)
	}
	if len(svc.Spec.ClusterIPs) != 2 || !isFamily(svc.Spec.ClusterIPs[0], false) || !isFamily(svc.Spec.ClusterIPs[1], true) {
		t.Fatalf("the dual-stack Service's cluster IPs %v: want an IPv4 and an IPv6 one", svc.Spec.ClusterIPs)
	}
	var podIPs []corev1.PodIP
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, name := range []string{"server", "client"} {
			p, err := k.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning {
				return false, nil
			}
			if name == "server" {
				podIPs = p.Status.PodIPs
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the dual-stack check's pods are not running: %v", err)
	}
	if len(podIPs) != 2 || !isFamily(podIPs[0].IP, false) || !isFamily(podIPs[1].IP, true) {
		t.Errorf("the server pod's addresses %v: want an IPv4 and an IPv6 one", podIPs)
	}

	// Each check may take a few tries while kube-proxy programs the new Service.
	eventually := func(what string, try func() (string, error), ok func(string) bool) {
		t.Helper()
		start := time.Now()
		var out string
		var err error
		for range 15 {
			if out, err = try(); err == nil && ok(out) {
				t.Logf("%s: %s (after %s)", what, strings.Join(strings.Fields(out), " "), time.Since(start).Round(100*time.Millisecond))
				return
			}
			time.Sleep(2 * time.Second)
		}
		t.Errorf("%s: %v\n%s", what, err, out)
	}
	isServer := func(out string) bool { return strings.TrimSpace(out) == "server" }
	for _, ip := range svc.Spec.ClusterIPs {
		url := "http://" + net.JoinHostPort(ip, "80") + "/"
		eventually("the Service at "+url+" from a pod on "+client, func() (string, error) {
			return c.kubectl(ctx, "-n", ns, "exec", "client", "--", "/agent", "get", url, "3s")
		}, isServer)
		eventually("the Service at "+url+" from "+client+"'s host network", func() (string, error) {
			out, err := c.lab.Exec(ctx, client, "curl", "-sS", "-g", "--max-time", "3", url)
			return string(out), err
		}, isServer)
	}
	name := fmt.Sprintf("server.%s.svc.cluster.local", ns)
	eventually("CoreDNS for "+name, func() (string, error) {
		return c.kubectl(ctx, "-n", ns, "exec", "client", "--", "/agent", "lookup", name)
	}, func(out string) bool {
		got := strings.Fields(out)
		slices.Sort(got)
		ips := slices.Clone(svc.Spec.ClusterIPs)
		slices.Sort(ips)
		return slices.Equal(got, ips)
	})
}

// isFamily tells whether s, an address or a CIDR, is IPv6 (v6) or IPv4 (!v6).
func isFamily(s string, v6 bool) bool {
	a, err := netip.ParseAddr(s)
	if err != nil {
		p, perr := netip.ParsePrefix(s)
		if perr != nil {
			return false
		}
		a = p.Addr()
	}
	return a.Is6() == v6 && !a.Is4In6()
}
