package kube

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestEvictable(t *testing.T) {
	yes := true
	for name, tc := range map[string]struct {
		pod  corev1.Pod
		want bool
	}{
		"plain":      {corev1.Pod{}, true},
		"replicaset": {corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Controller: &yes}}}}, true},
		"mirror":     {corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "x"}}}, false},
		"daemonset":  {corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Controller: &yes}}}}, false},
		"succeeded":  {corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, false},
		"failed":     {corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed}}, false},
	} {
		if got := evictable(&tc.pod); got != tc.want {
			t.Errorf("%s: evictable %v, want %v", name, got, tc.want)
		}
	}
}

func TestDrain(t *testing.T) {
	yes := true
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", Controller: &yes}}},
			Spec: corev1.PodSpec{NodeName: "w1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	node := func(ready corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
	}
	podsGVR := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	// evictions answers every eviction: deleting the pod (a live kubelet confirms at once),
	// marking it terminating (a dead kubelet never confirms), or refusing (a PDB).
	evictions := func(c *fake.Clientset, how string) {
		c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "eviction" {
				return false, nil, nil
			}
			name := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction).Name
			switch how {
			case "delete":
				return true, nil, c.Tracker().Delete(podsGVR, "default", name)
			case "terminate":
				p := pod(name)
				now := metav1.Now()
				p.DeletionTimestamp = &now
				return true, nil, c.Tracker().Update(podsGVR, p, "default")
			}
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 1)
		})
	}

	c := fake.NewClientset(node(corev1.ConditionTrue), pod("a"), pod("b"))
	evictions(c, "delete")
	if got, err := Drain(context.Background(), c, "w1", 10*time.Second); err != nil || len(got) != 2 {
		t.Errorf("live node: evicted %v, %v", got, err)
	}
	if n, _ := c.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{}); !n.Spec.Unschedulable {
		t.Error("node not cordoned")
	}

	c = fake.NewClientset(node(corev1.ConditionUnknown), pod("a"))
	evictions(c, "terminate")
	start := time.Now()
	if got, err := Drain(context.Background(), c, "w1", 10*time.Second); err != nil || len(got) != 1 || time.Since(start) > 2*time.Second {
		t.Errorf("dead node: evicted %v, %v after %s (must not wait for a kubelet that is gone)", got, err, time.Since(start))
	}

	// A refusal names the pod and the PodDisruptionBudget that selects it, and ends in time.
	a := pod("a")
	a.Labels = map[string]string{"app": "web"}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	c = fake.NewClientset(node(corev1.ConditionTrue), a, pdb)
	evictions(c, "refuse")
	start = time.Now()
	_, err := Drain(context.Background(), c, "w1", 1500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "default/a (PodDisruptionBudget default/web allows no disruption now)") || !strings.Contains(err.Error(), "not done within 1.5s") || time.Since(start) > 3*time.Second {
		t.Errorf("refused eviction: %v after %s", err, time.Since(start))
	}

	if got, err := Drain(context.Background(), fake.NewClientset(), "gone", time.Second); err != nil || len(got) != 0 {
		t.Errorf("missing node: %v, %v", got, err)
	}
}

// TestDeletePodsOfLostNode: the pods bound to a lost node go at once, with no grace period;
// other nodes' pods stay.
func TestDeletePodsOfLostNode(t *testing.T) {
	pod := func(ns, name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{NodeName: node}}
	}
	c := fake.NewClientset(pod("kube-system", "coredns-a", "lost"), pod("default", "web-1", "lost"), pod("default", "web-2", "w1"))
	n, err := DeletePodsOfLostNode(context.Background(), c, "lost")
	if err != nil || n != 2 {
		t.Fatalf("DeletePodsOfLostNode = %d, %v; want 2", n, err)
	}
	left, _ := c.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if len(left.Items) != 1 || left.Items[0].Name != "web-2" {
		t.Errorf("pods left: %v; want web-2 alone", left.Items)
	}
	for _, a := range c.Actions() {
		if d, ok := a.(k8stesting.DeleteActionImpl); ok && (d.DeleteOptions.GracePeriodSeconds == nil || *d.DeleteOptions.GracePeriodSeconds != 0) {
			t.Errorf("%s deleted with grace period %v, want 0", d.Name, d.DeleteOptions.GracePeriodSeconds)
		}
	}
	if n, err := DeletePodsOfLostNode(context.Background(), c, "lost"); err != nil || n != 0 {
		t.Errorf("again: %d, %v; want nothing to do", n, err)
	}
}
