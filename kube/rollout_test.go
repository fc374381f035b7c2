package kube

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestWaitRollouts: a DaemonSet with a pod still on the old spec, and a Deployment whose
// controller has not seen its new spec, are waited on and named on timeout; once both have
// rolled out, the wait ends. What the changes left unchanged is not waited on.
func TestWaitRollouts(t *testing.T) {
	two := int32(2)
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system", Generation: 2},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 3, UpdatedNumberScheduled: 2, NumberAvailable: 3}}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system", Generation: 3},
		Spec:   appsv1.DeploymentSpec{Replicas: &two},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2}}
	stuck := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "broken", Namespace: "kube-system", Generation: 1},
		Spec: appsv1.DeploymentSpec{Replicas: &two}, Status: appsv1.DeploymentStatus{ObservedGeneration: 1}}
	c := fake.NewClientset(ds, dep, stuck)
	changes := []Change{{Kind: "DaemonSet", Namespace: "kube-system", Name: "kube-proxy", Action: Updated},
		{Kind: "Deployment", Namespace: "kube-system", Name: "coredns", Action: Updated},
		{Kind: "Deployment", Namespace: "kube-system", Name: "broken", Action: Unchanged},
		{Kind: "ConfigMap", Namespace: "kube-system", Name: "kube-proxy", Action: Updated}}
	err := WaitRollouts(context.Background(), c, changes, 1500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "DaemonSet kube-system/kube-proxy: 2 of 3 pods updated, 3 available") || !strings.Contains(err.Error(), "Deployment kube-system/coredns") {
		t.Fatalf("WaitRollouts while both roll: %v; want an error naming both and how far they got", err)
	}
	ds.Status.UpdatedNumberScheduled = 3
	dep.Status.ObservedGeneration = 3
	ctx := context.Background()
	if _, err := c.AppsV1().DaemonSets("kube-system").UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AppsV1().Deployments("kube-system").UpdateStatus(ctx, dep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := WaitRollouts(ctx, c, changes, 5*time.Second); err != nil {
		t.Fatalf("WaitRollouts once rolled out: %v", err)
	}
}
