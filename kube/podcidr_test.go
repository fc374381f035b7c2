package kube

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestWaitForPodCIDRs(t *testing.T) {
	node := func(name, cidr string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr}}
	}
	c := fake.NewClientset(node("m1", "10.244.0.0/24"), node("w1", ""))
	_, err := WaitForPodCIDRs(context.Background(), c, []string{"m1", "w1", "w2"}, 1200*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "w1, w2") || strings.Contains(err.Error(), "m1,") {
		t.Fatalf("err = %v; want it to name w1 and w2", err)
	}

	go func() {
		time.Sleep(300 * time.Millisecond)
		n := node("w1", "10.244.1.0/24")
		c.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
	}()
	got, err := WaitForPodCIDRs(context.Background(), c, []string{"m1", "w1"}, 10*time.Second)
	if err != nil || got["m1"] != "10.244.0.0/24" || got["w1"] != "10.244.1.0/24" {
		t.Fatalf("got %v, %v", got, err)
	}
}
