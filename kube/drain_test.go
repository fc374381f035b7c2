package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
