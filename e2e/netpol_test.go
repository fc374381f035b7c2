package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/lab"
)

// checkNetworkPolicy: NetworkPolicy is enforced with no setting. The agent runs on every node;
// a server in namespace np-server (on node server) answers pods of namespace np-client (on node
// client) until a default-deny policy shuts them all out; an allow rule then lets the pod
// labelled role=friend through and no other. The namespaces go at the end.
func (c *cluster) checkNetworkPolicy(ctx context.Context, wl workload, server, client string, nodes int) {
	t := c.t
	t.Helper()
	k := c.client()
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		ds, err := k.AppsV1().DaemonSets("kube-system").Get(ctx, kube.NetworkPolicyName, metav1.GetOptions{})
		return err == nil && ds.Status.NumberReady == int32(nodes) && ds.Status.DesiredNumberScheduled == int32(nodes), nil
	}); err != nil {
		out, _ := c.kubectl(ctx, "-n", "kube-system", "get", "ds,pods", "-l", "app="+kube.NetworkPolicyName, "-o", "wide")
		t.Fatalf("the NetworkPolicy agent is not ready on %d nodes: %v\n%s", nodes, err, out)
	}
	const sns, cns = "np-server", "np-client"
	for _, ns := range []string{sns, cns} {
		if _, err := k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, ns := range []string{sns, cns} {
			if err := k.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil {
				t.Errorf("delete namespace %s: %v", ns, err)
			}
		}
	}()
	pods := []struct{ ns, name, node, role string }{{sns, "server", server, "server"}, {cns, "friend", client, "friend"}, {cns, "stranger", client, "stranger"}}
	for _, p := range pods {
		if _, err := k.CoreV1().Pods(p.ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Labels: map[string]string{"role": p.role}},
			Spec: corev1.PodSpec{NodeName: p.node, TerminationGracePeriodSeconds: new(int64), Containers: []corev1.Container{{
				Name: "agent", Image: wl.image, ImagePullPolicy: wl.pull, Args: []string{"serve"},
			}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var serverIP string
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, p := range pods {
			got, err := k.CoreV1().Pods(p.ns).Get(ctx, p.name, metav1.GetOptions{})
			if err != nil || got.Status.Phase != corev1.PodRunning || got.Status.PodIP == "" {
				return false, nil
			}
			if p.name == "server" {
				serverIP = got.Status.PodIP
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the NetworkPolicy check's pods are not running: %v", err)
	}
	url := fmt.Sprintf("http://%s:8080/", serverIP)
	reaches := func(pod string) bool {
		out, err := c.kubectl(ctx, "-n", cns, "exec", pod, "--", "/agent", "get", url, "3s")
		return err == nil && strings.TrimSpace(out) == "server"
	}
	// expect waits until friend and stranger reach the server as wanted (the agent follows a
	// policy within seconds), and says how long that took.
	expect := func(what string, friend, stranger bool) {
		t.Helper()
		start := time.Now()
		var f, s bool
		for range 15 {
			if f, s = reaches("friend"), reaches("stranger"); f == friend && s == stranger {
				t.Logf("%s: friend reaches the server %v, stranger %v (after %s)", what, f, s, time.Since(start).Round(100*time.Millisecond))
				return
			}
			time.Sleep(time.Second)
		}
		t.Errorf("%s: friend reaches the server %v, stranger %v; want %v, %v", what, f, s, friend, stranger)
	}
	expect("no policy", true, true)
	deny := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "default-deny", Namespace: sns},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}
	if _, err := k.NetworkingV1().NetworkPolicies(sns).Create(ctx, deny, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("default deny in "+sns, false, false)
	port := intstr.FromInt32(8080)
	allow := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "allow-friend", Namespace: sns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": cns}},
					PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"role": "friend"}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: &port}},
			}},
		},
	}
	if _, err := k.NetworkingV1().NetworkPolicies(sns).Create(ctx, allow, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("default deny, and allow role=friend from "+cns, true, false)
}

// networkPolicyOffAndOn turns enforcement off in the inventory: plan shows the agent's
// DaemonSet deleted, apply deletes it, and its nftables table leaves every host; turned on
// again, the next apply brings it back, ready.
func (c *cluster) networkPolicyOffAndOn(ctx context.Context, masters, workers []lab.Host) {
	t := c.t
	t.Helper()
	k := c.client()
	c.networkPolicy = inventory.NetworkPolicyOff
	c.writeInventory(masters, workers)
	const deleted = "deleted  DaemonSet kube-system/" + kube.NetworkPolicyName
	if plan, code := c.plan(); code != 4 || !strings.Contains(plan, deleted) {
		t.Errorf("plan with networking.networkPolicy off: exit %d; want 4 and %q:\n%s", code, deleted, plan)
	}
	if out, err := c.run("apply", "--timeout", "4m"); err != nil {
		t.Fatalf("apply with networking.networkPolicy off: %v\n%s", err, out)
	}
	if _, err := k.AppsV1().DaemonSets("kube-system").Get(ctx, kube.NetworkPolicyName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the agent's DaemonSet after apply with networkPolicy off: %v; want it gone", err)
	}
	hosts := append(slices.Clone(masters), workers...)
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, h := range hosts {
			if strings.TrimSpace(c.exec(ctx, h.Name, "nft list table inet "+kube.NetworkPolicyTable+" >/dev/null 2>&1 && echo there; true")) != "" {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Errorf("the agent's nftables table is still on a host a minute after it was turned off: %v", err)
	}
	c.networkPolicy = ""
	c.writeInventory(masters, workers)
	if out, err := c.run("apply", "--timeout", "4m"); err != nil || !strings.Contains(out, "kube-network-policies: 4 created") {
		t.Errorf("apply with NetworkPolicy enforced again: %v; want the agent's 4 objects created\n%s", err, out)
	}
}
