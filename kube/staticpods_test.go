package kube

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestWaitForStaticPods(t *testing.T) {
	manifest := func(hash, flag string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager", Namespace: "kube-system", Annotations: map[string]string{"kforge.io/inputs-hash": hash}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-controller-manager", Image: "kcm:v1", Command: []string{"kube-controller-manager", flag}}}},
		}
	}
	mirror := func(p *corev1.Pod, ready corev1.ConditionStatus) *corev1.Pod {
		m := p.DeepCopy()
		m.Name += "-m1"
		m.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}
		return m
	}
	want := []StaticPod{{Node: "m1", Pod: manifest("new", "--leader-elect=true")}}
	for name, tc := range map[string]struct {
		mirror *corev1.Pod
		err    string
	}{
		"old credentials": {mirror(manifest("old", "--leader-elect=true"), corev1.ConditionTrue), `annotation kforge.io/inputs-hash is "old"`},
		"old flags":       {mirror(manifest("new", "--leader-elect=false"), corev1.ConditionTrue), "old pod"},
		"not ready":       {mirror(manifest("new", "--leader-elect=true"), corev1.ConditionFalse), "not Ready"},
		"no mirror pod":   {nil, "not found"},
	} {
		c := fake.NewClientset()
		if tc.mirror != nil {
			c = fake.NewClientset(tc.mirror)
		}
		err := WaitForStaticPods(context.Background(), c, StaticPodWait{Pods: want, Timeout: 600 * time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), "kube-controller-manager-m1: ") || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: err = %v, want it to name kube-controller-manager-m1 and say %q", name, err, tc.err)
		}
		// The node and the pod, for the caller to ask that node's kubelet about it.
		var ne *NodesError
		if !errors.As(err, &ne) || !slices.Equal(ne.Nodes, []string{"m1"}) || !slices.Equal(ne.Pods, []string{"kube-system/kube-controller-manager-m1"}) {
			t.Errorf("%s: err = %#v, want a *NodesError naming node m1 and pod kube-system/kube-controller-manager-m1", name, err)
		}
	}
	// Replaced and Ready while waiting.
	c := fake.NewClientset(mirror(manifest("old", "--leader-elect=false"), corev1.ConditionTrue))
	go func() {
		time.Sleep(300 * time.Millisecond)
		c.CoreV1().Pods("kube-system").Update(context.Background(), mirror(manifest("new", "--leader-elect=true"), corev1.ConditionTrue), metav1.UpdateOptions{})
	}()
	if err := WaitForStaticPods(context.Background(), c, StaticPodWait{Pods: want, Timeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}

	// Started: the new pod's containers must run (Ready is not asked).
	started := mirror(manifest("new", "--leader-elect=true"), corev1.ConditionFalse)
	c = fake.NewClientset(started)
	if err := WaitForStaticPods(context.Background(), c, StaticPodWait{Pods: want, Timeout: 600 * time.Millisecond, Started: true}); err == nil || !strings.Contains(err.Error(), "0 of 1 containers running") {
		t.Errorf("started, no container running: err = %v, want 0 of 1 containers running", err)
	}
	started.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "kube-controller-manager", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	c = fake.NewClientset(started)
	if err := WaitForStaticPods(context.Background(), c, StaticPodWait{Pods: want, Timeout: 10 * time.Second, Started: true}); err != nil {
		t.Errorf("started, its container running, not Ready: %v", err)
	}
}
