package kube

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

// TestNetworkPoliciesTwiceThenOff: the agent's four objects are created once and left alone the
// second time; with Admin its ClusterRole and flags take AdminNetworkPolicy in; turned off, the
// four are deleted, and a second removal finds nothing to do.
func TestNetworkPoliciesTwiceThenOff(t *testing.T) {
	ctx := context.Background()
	in := NetworkPolicyInput{Enforce: true, Image: testImages().NetworkPolicy, Endpoint: "198.51.100.11:6443"}
	c := fake.NewClientset()
	allCreated(t, twice(t, c, func(c kubernetes.Interface) ([]Change, error) { return NetworkPolicies(ctx, c, in) }), 4)
	ds, err := c.AppsV1().DaemonSets("kube-system").Get(ctx, NetworkPolicyName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := ds.Spec.Template.Spec
	ctr := spec.Containers[0]
	env := map[string]string{}
	for _, e := range ctr.Env {
		env[e.Name] = e.Value
	}
	if !spec.HostNetwork || ctr.Image != in.Image || ctr.SecurityContext == nil || !*ctr.SecurityContext.Privileged ||
		env["KUBERNETES_SERVICE_HOST"] != "198.51.100.11" || env["KUBERNETES_SERVICE_PORT"] != "6443" ||
		strings.Join(ctr.Args, " ") != "--hostname-override=$(MY_NODE_NAME) --v=2 --nfqueue-id=98" {
		t.Errorf("agent DaemonSet: host network %v, image %s, env %v, args %v", spec.HostNetwork, ctr.Image, env, ctr.Args)
	}

	in.Admin = true
	cs, err := NetworkPolicies(ctx, c, in)
	if err != nil {
		t.Fatal(err)
	}
	if a := actions(cs); a["ClusterRole "+NetworkPolicyName] != Updated || a["DaemonSet kube-system/"+NetworkPolicyName] != Updated {
		t.Errorf("with Admin: %v; want the ClusterRole and the DaemonSet updated", cs)
	}
	cr, _ := c.RbacV1().ClusterRoles().Get(ctx, NetworkPolicyName, metav1.GetOptions{})
	var resources []string
	for _, r := range cr.Rules {
		resources = append(resources, r.Resources...)
	}
	ds, _ = c.AppsV1().DaemonSets("kube-system").Get(ctx, NetworkPolicyName, metav1.GetOptions{})
	if args := ds.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--admin-network-policy") || !slices.Contains(args, "--baseline-admin-network-policy") ||
		!slices.Contains(resources, "nodes") || !slices.Contains(resources, "adminnetworkpolicies") || !slices.Contains(resources, "baselineadminnetworkpolicies") {
		t.Errorf("with Admin: args %v, ClusterRole resources %v", args, resources)
	}

	// Back without Admin: the flags and the rule go again (a shorter slice is a change).
	in.Admin = false
	cs, err = NetworkPolicies(ctx, c, in)
	if a := actions(cs); err != nil || a["ClusterRole "+NetworkPolicyName] != Updated || a["DaemonSet kube-system/"+NetworkPolicyName] != Updated {
		t.Errorf("Admin turned off again: %v %v; want the ClusterRole and the DaemonSet updated", cs, err)
	}
	ds, _ = c.AppsV1().DaemonSets("kube-system").Get(ctx, NetworkPolicyName, metav1.GetOptions{})
	if args := ds.Spec.Template.Spec.Containers[0].Args; slices.Contains(args, "--admin-network-policy") {
		t.Errorf("Admin turned off again: args %v", args)
	}

	off, err := NetworkPolicies(ctx, c, NetworkPolicyInput{})
	if err != nil || len(off) != 4 {
		t.Fatalf("turned off: %v %v; want 4 deleted", off, err)
	}
	for _, ch := range off {
		if ch.Action != Deleted || ch.Name != NetworkPolicyName {
			t.Errorf("turned off: %s", ch)
		}
	}
	if again, err := NetworkPolicies(ctx, c, NetworkPolicyInput{}); err != nil || len(again) != 0 {
		t.Errorf("turned off twice: %v %v; want nothing", again, err)
	}
	if _, err := networkPolicyObjects(NetworkPolicyInput{Enforce: true, Image: "x", Endpoint: "no-port"}); err == nil {
		t.Error("endpoint without a port accepted")
	}
}

// TestAdminNetworkPolicyCRDs: the embedded CRDs are AdminNetworkPolicy's and
// BaselineAdminNetworkPolicy's, and, where the module cache has network-policy-api at
// NetworkPolicyAPIVersion, byte for byte its config/crd/experimental files.
func TestAdminNetworkPolicyCRDs(t *testing.T) {
	ms := AdminNetworkPolicyCRDs()
	var names []string
	for _, m := range ms {
		objs, err := DecodeManifest(m)
		if err != nil || len(objs) != 1 || objs[0].GetKind() != "CustomResourceDefinition" {
			t.Fatalf("%s: %v", m.Path, err)
		}
		names = append(names, objs[0].GetName())
	}
	if want := []string{"adminnetworkpolicies.policy.networking.k8s.io", "baselineadminnetworkpolicies.policy.networking.k8s.io"}; !slices.Equal(names, want) {
		t.Errorf("CRDs %v, want %v", names, want)
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Skipf("go env GOMODCACHE: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "sigs.k8s.io", "network-policy-api@"+NetworkPolicyAPIVersion, "config", "crd", "experimental")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("network-policy-api %s is not in the module cache", NetworkPolicyAPIVersion)
	}
	for i, n := range []string{"adminnetworkpolicies", "baselineadminnetworkpolicies"} {
		want, err := os.ReadFile(filepath.Join(dir, "policy.networking.k8s.io_"+n+".yaml"))
		if err != nil || string(want) != string(ms[i].Data) {
			t.Errorf("%s differs from the module's (%v): copy it again", ms[i].Path, err)
		}
	}
}
