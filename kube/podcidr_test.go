package kube

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func podCIDRNode(name, cidr string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr}}
	if cidr != "" {
		n.Spec.PodCIDRs = []string{cidr}
	}
	return n
}

func TestPodCIDRsWaitsForTheControllerManager(t *testing.T) {
	c := fake.NewClientset(podCIDRNode("m1", "10.244.0.0/24"), podCIDRNode("w1", ""))
	_, _, err := PodCIDRs(context.Background(), c, PodCIDRsInput{Nodes: []string{"m1", "w1", "w2"}, Timeout: 1200 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "w1, w2") || strings.Contains(err.Error(), "m1,") {
		t.Fatalf("err = %v; want it to name w1 and w2", err)
	}

	go func() {
		time.Sleep(300 * time.Millisecond)
		c.CoreV1().Nodes().Update(context.Background(), podCIDRNode("w1", "10.244.1.0/24"), metav1.UpdateOptions{})
	}()
	got, changes, err := PodCIDRs(context.Background(), c, PodCIDRsInput{Nodes: []string{"m1", "w1"}, Timeout: 10 * time.Second})
	if err != nil || strings.Join(got["m1"], ",") != "10.244.0.0/24" || strings.Join(got["w1"], ",") != "10.244.1.0/24" || len(changes) != 0 {
		t.Fatalf("got %v, %v, %v", got, changes, err)
	}
}

// TestPodCIDRsLosesARaceGracefully: when the controller-manager sets the node's pod CIDR
// between kforge's look and its patch, the API server refuses kforge's; PodCIDRs then takes the
// controller-manager's.
func TestPodCIDRsLosesARaceGracefully(t *testing.T) {
	c := fake.NewClientset(podCIDRNode("w1", ""))
	raced := false
	c.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if raced {
			return false, nil, nil
		}
		raced = true
		if err := c.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, podCIDRNode("w1", "10.244.0.0/24"), ""); err != nil {
			t.Error(err)
		}
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Node"}, "w1", field.ErrorList{field.Forbidden(field.NewPath("spec", "podCIDRs"), "node updates may not change podCIDR except from \"\" to valid")})
	})
	got, changes, err := PodCIDRs(context.Background(), c, PodCIDRsInput{Nodes: []string{"w1"}, Subnets: []string{"10.244.0.0/16"}, MaskSizes: []int{24}, Timeout: 5 * time.Second, Interval: 10 * time.Millisecond})
	if err != nil || strings.Join(got["w1"], ",") != "10.244.0.0/24" || len(changes) != 0 || !raced {
		t.Fatalf("got %v, changes %v, err %v, raced %v", got, changes, err, raced)
	}
}

// TestPodCIDRsLeavesAFullUpperHalfToTheControllerManager: kforge only hands out ranges of the
// subnet's upper half.
func TestPodCIDRsLeavesAFullUpperHalfToTheControllerManager(t *testing.T) {
	// a /23 cut into /24s: the upper half is 10.244.1.0/24 alone
	c := fake.NewClientset(podCIDRNode("a", "10.244.1.0/24"), podCIDRNode("w1", ""))
	_, changes, err := PodCIDRs(context.Background(), c, PodCIDRsInput{Nodes: []string{"w1"}, Subnets: []string{"10.244.0.0/23"}, MaskSizes: []int{24}, Timeout: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "w1") || len(changes) != 0 {
		t.Fatalf("changes %v, err %v: want w1 left without one", changes, err)
	}
}

// TestPodCIDRsDualStack: a dual-stack node gets a range of each family in one patch (the API
// server takes a node's pod CIDRs once), the IPv4 one first; a node whose IPv6 half is full is
// left to the controller-manager, its IPv4 range not handed out alone.
func TestPodCIDRsDualStack(t *testing.T) {
	c := fake.NewClientset(podCIDRNode("w1", ""))
	var patches int
	c.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) { patches++; return false, nil, nil })
	have := map[string][]string{}
	in := PodCIDRsInput{Nodes: []string{"w1"}, Subnets: []string{"10.244.0.0/16", "fd00:10:244::/56"}, MaskSizes: []int{24, 64}, Timeout: 5 * time.Second, Interval: 10 * time.Millisecond,
		Have: func(n string, cidrs []string) { have[n] = cidrs }}
	got, changes, err := PodCIDRs(context.Background(), c, in)
	want := "10.244.255.0/24,fd00:10:244:ff::/64"
	if err != nil || strings.Join(got["w1"], ",") != want || strings.Join(have["w1"], ",") != want || len(changes) != 1 || patches != 1 {
		t.Fatalf("got %v (reported %v), changes %v, patches %d, err %v; want %s in one patch", got, have, changes, patches, err, want)
	}
	n, err := c.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{})
	if err != nil || n.Spec.PodCIDR != "10.244.255.0/24" || strings.Join(n.Spec.PodCIDRs, ",") != want {
		t.Fatalf("node spec %q %v, err %v", n.Spec.PodCIDR, n.Spec.PodCIDRs, err)
	}

	// a /63 cut into /64s: the upper half is fd00:10:244:1::/64 alone, and a node has it
	full := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: corev1.NodeSpec{PodCIDR: "10.244.0.0/24", PodCIDRs: []string{"10.244.0.0/24", "fd00:10:244:1::/64"}}}
	c = fake.NewClientset(full, podCIDRNode("w2", ""))
	in = PodCIDRsInput{Nodes: []string{"w2"}, Subnets: []string{"10.244.0.0/16", "fd00:10:244::/63"}, MaskSizes: []int{24, 64}, Timeout: 300 * time.Millisecond, Interval: 10 * time.Millisecond}
	if _, changes, err := PodCIDRs(context.Background(), c, in); err == nil || len(changes) != 0 {
		t.Fatalf("changes %v, err %v: want w2 left without a range", changes, err)
	}
}

func TestCIDRRanges(t *testing.T) {
	for _, tc := range []struct {
		subnet string
		mask   int
		used   []string
		want   string
	}{
		{"10.244.0.0/16", 24, nil, "10.244.255.0/24"},
		{"10.244.0.0/16", 24, []string{"10.244.255.0/24", "10.244.254.0/24"}, "10.244.253.0/24"},
		{"10.244.0.0/16", 26, nil, "10.244.255.192/26"},
		{"10.244.7.0/16", 24, nil, "10.244.255.0/24"}, // host bits in the subnet are ignored
		{"10.0.0.0/8", 24, nil, "10.255.255.0/24"},
		{"fd00:10::/56", 64, nil, "fd00:10:0:ff::/64"},
		{"fd00:10::/56", 64, []string{"fd00:10:0:ff::/64"}, "fd00:10:0:fe::/64"},
		{"10.244.0.0/23", 24, []string{"10.244.1.0/24"}, ""},
	} {
		r, err := newCIDRRanges(tc.subnet, tc.mask)
		if err != nil {
			t.Fatalf("%s /%d: %v", tc.subnet, tc.mask, err)
		}
		used := map[string]bool{}
		for _, u := range tc.used {
			used[u] = true
		}
		if got := r.highestFree(used); got != tc.want {
			t.Errorf("%s /%d used %v: %q, want %q", tc.subnet, tc.mask, tc.used, got, tc.want)
		}
	}
	for _, bad := range []struct {
		subnet string
		mask   int
	}{{"10.244.0.0/16", 16}, {"10.244.0.0/16", 33}, {"10.0.0.0/8", 25}, {"nonsense", 24}} {
		if _, err := newCIDRRanges(bad.subnet, bad.mask); err == nil {
			t.Errorf("%s /%d accepted", bad.subnet, bad.mask)
		}
	}
}
