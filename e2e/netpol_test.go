package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
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
	c.waitNetworkPolicyAgent(ctx, nodes)
	f := c.newPolicyFixture(ctx, "np", wl, server, client)
	defer f.cleanup()
	f.expect("no policy", true, true)
	f.create(denyAllIngress(f.server))
	f.expect("default deny in "+f.server, false, false)
	f.create(allowFriend(f.server, f.client))
	f.expect("default deny, and allow role=friend from "+f.client, true, false)
}

// waitNetworkPolicyAgent waits until the agent's DaemonSet is ready on nodes nodes.
func (c *cluster) waitNetworkPolicyAgent(ctx context.Context, nodes int) {
	t := c.t
	t.Helper()
	k := c.client()
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		ds, err := k.AppsV1().DaemonSets("kube-system").Get(ctx, kube.NetworkPolicyName, metav1.GetOptions{})
		return err == nil && ds.Status.NumberReady == int32(nodes) && ds.Status.DesiredNumberScheduled == int32(nodes) && ds.Status.UpdatedNumberScheduled == int32(nodes), nil
	}); err != nil {
		out, _ := c.kubectl(ctx, "-n", "kube-system", "get", "ds,pods", "-l", "app="+kube.NetworkPolicyName, "-o", "wide")
		t.Fatalf("the NetworkPolicy agent is not ready on %d nodes: %v\n%s", nodes, err, out)
	}
}

// policyFixture is a server pod (role=server) in namespace <prefix>-server on one node, and two
// pods, friend (role=friend) and stranger, in <prefix>-client on another.
type policyFixture struct {
	c              *cluster
	ctx            context.Context
	server, client string   // the namespaces
	urls           []string // the server pod's, one per IP family (IPv4 first)
}

func (c *cluster) newPolicyFixture(ctx context.Context, prefix string, wl workload, serverNode, clientNode string) *policyFixture {
	t := c.t
	t.Helper()
	k := c.client()
	f := &policyFixture{c: c, ctx: ctx, server: prefix + "-server", client: prefix + "-client"}
	for _, ns := range []string{f.server, f.client} {
		if _, err := k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pods := []struct{ ns, name, node, role string }{{f.server, "server", serverNode, "server"}, {f.client, "friend", clientNode, "friend"}, {f.client, "stranger", clientNode, "stranger"}}
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
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, p := range pods {
			got, err := k.CoreV1().Pods(p.ns).Get(ctx, p.name, metav1.GetOptions{})
			if err != nil || got.Status.Phase != corev1.PodRunning || got.Status.PodIP == "" {
				return false, nil
			}
			if p.name == "server" {
				f.urls = nil
				for _, ip := range got.Status.PodIPs {
					f.urls = append(f.urls, "http://"+net.JoinHostPort(ip.IP, "8080")+"/")
				}
				if c.dualStack() && len(f.urls) != 2 {
					return false, fmt.Errorf("the server pod of a dual-stack cluster has addresses %v; want one of each family", got.Status.PodIPs)
				}
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the NetworkPolicy check's pods are not running: %v", err)
	}
	return f
}

// cleanup deletes the fixture's namespaces.
func (f *policyFixture) cleanup() {
	for _, ns := range []string{f.server, f.client} {
		if err := f.c.client().CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil {
			f.c.t.Errorf("delete namespace %s: %v", ns, err)
		}
	}
}

// reaches says, for each of the server's addresses (one per IP family), whether pod reaches it.
func (f *policyFixture) reaches(pod string) []bool {
	var out []bool
	for _, u := range f.urls {
		got, err := f.c.kubectl(f.ctx, "-n", f.client, "exec", pod, "--", "/agent", "get", u, "3s")
		out = append(out, err == nil && strings.TrimSpace(got) == "server")
	}
	return out
}

// expect waits until friend and stranger reach the server as wanted, over each IP family of
// the cluster (the agents follow a policy within seconds), and says how long that took.
func (f *policyFixture) expect(what string, friend, stranger bool) {
	t := f.c.t
	t.Helper()
	start := time.Now()
	all := func(want bool, got []bool) bool {
		return !slices.ContainsFunc(got, func(b bool) bool { return b != want })
	}
	var fr, st []bool
	for range 15 {
		if fr, st = f.reaches("friend"), f.reaches("stranger"); all(friend, fr) && all(stranger, st) {
			t.Logf("%s: friend reaches the server %v, stranger %v, at %s (after %s)", what, friend, stranger, strings.Join(f.urls, " and "), time.Since(start).Round(100*time.Millisecond))
			return
		}
		time.Sleep(time.Second)
	}
	t.Errorf("%s: friend reaches the server at %s: %v, stranger %v; want %v, %v", what, strings.Join(f.urls, " and "), fr, st, friend, stranger)
}

func (f *policyFixture) create(p *networkingv1.NetworkPolicy) {
	f.c.t.Helper()
	if _, err := f.c.client().NetworkingV1().NetworkPolicies(p.Namespace).Create(f.ctx, p, metav1.CreateOptions{}); err != nil {
		f.c.t.Fatal(err)
	}
}

// denyAllIngress is a default deny of ingress in namespace ns.
func denyAllIngress(ns string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "default-deny", Namespace: ns},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}
}

// allowFriend lets pods labelled role=friend of namespace from reach the server of ns on 8080.
func allowFriend(ns, from string) *networkingv1.NetworkPolicy {
	port := intstr.FromInt32(8080)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "allow-friend", Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": from}},
					PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"role": "friend"}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: &port}},
			}},
		},
	}
}

// checkAdminNetworkPolicy turns networking.adminNetworkPolicy on (apply installs the CRDs and
// gives the agent the flags), then, between two fresh namespaces: a BaselineAdminNetworkPolicy
// denying the client namespace shuts both pods out; a NetworkPolicy letting friend in wins over
// it; an AdminNetworkPolicy denying the client namespace wins over that. The policies and
// namespaces go, and adminNetworkPolicy is turned off again (the CRDs stay).
func (c *cluster) checkAdminNetworkPolicy(ctx context.Context, masters, workers []lab.Host, wl workload, server, client string) {
	t := c.t
	t.Helper()
	c.adminNetworkPolicy = true
	c.writeInventory(masters, workers)
	out, err := c.run("apply", "--timeout", "4m")
	if err != nil || !strings.Contains(out, "kube-network-policies: 2 created, 2 updated, 2 unchanged") {
		t.Fatalf("apply with adminNetworkPolicy: %v; want the CRDs created, the agent's ClusterRole and DaemonSet updated\n%s", err, linesWith(out, "kube-network-policies"))
	}
	c.waitNetworkPolicyAgent(ctx, len(masters)+len(workers))
	f := c.newPolicyFixture(ctx, "anp", wl, server, client)
	defer f.cleanup()
	apply := func(name, doc string) {
		t.Helper()
		file := filepath.Join(filepath.Dir(c.inventory), name+".yaml")
		if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := c.kubectl(ctx, "apply", "-f", file); err != nil {
			t.Fatalf("kubectl apply %s: %v\n%s", name, err, out)
		}
	}
	subject := fmt.Sprintf("  subject:\n    namespaces:\n      matchLabels: {kubernetes.io/metadata.name: %s}\n", f.server)
	deny := fmt.Sprintf("  ingress:\n  - name: deny-%s\n    action: Deny\n    from:\n    - namespaces:\n        matchLabels: {kubernetes.io/metadata.name: %s}\n", f.client, f.client)
	apply("banp", "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: BaselineAdminNetworkPolicy\nmetadata: {name: default}\nspec:\n"+subject+deny)
	defer c.kubectl(context.Background(), "delete", "baselineadminnetworkpolicy", "default")
	f.expect("a BaselineAdminNetworkPolicy denying "+f.client, false, false)
	f.create(allowFriend(f.server, f.client))
	f.expect("and a NetworkPolicy letting friend in (it wins over the baseline)", true, false)
	apply("anp", "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: AdminNetworkPolicy\nmetadata: {name: e2e-deny}\nspec:\n  priority: 10\n"+subject+deny)
	defer c.kubectl(context.Background(), "delete", "adminnetworkpolicy", "e2e-deny")
	f.expect("and an AdminNetworkPolicy denying "+f.client+" (it wins over the NetworkPolicy)", false, false)

	c.adminNetworkPolicy = false
	c.writeInventory(masters, workers)
	if out, err := c.run("apply", "--timeout", "4m"); err != nil || !strings.Contains(out, "kube-network-policies: 2 updated, 2 unchanged") {
		t.Errorf("apply with adminNetworkPolicy off again: %v; want the agent's ClusterRole and DaemonSet updated (the CRDs stay)\n%s", err, linesWith(out, "kube-network-policies"))
	}
	c.waitNetworkPolicyAgent(ctx, len(masters)+len(workers))
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
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, time.Minute, true, func(context.Context) (bool, error) {
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
