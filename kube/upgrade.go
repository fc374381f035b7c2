package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// UpgradeCordonAnnotation marks a node kforge cordoned for its upgrade: a run interrupted
// between the drain and the uncordon finds it, and uncordons the node once it runs the new
// version. A node an administrator cordoned is never uncordoned by kforge.
const UpgradeCordonAnnotation = "kforge.dev/cordoned-for-upgrade"

// CordonForUpgrade marks node unschedulable, annotated with the version it moves to.
func CordonForUpgrade(ctx context.Context, c kubernetes.Interface, node, version string) error {
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{UpgradeCordonAnnotation: version}},
		"spec":     map[string]any{"unschedulable": true},
	})
	_, err := c.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("cordon node %s: %w", node, err)
	}
	return nil
}

// UncordonAfterUpgrade makes node schedulable again and removes the annotation, when kforge
// cordoned it (UpgradeCordonAnnotation); it says whether it did.
func UncordonAfterUpgrade(ctx context.Context, c kubernetes.Interface, node string) (bool, error) {
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if _, ok := n.Annotations[UpgradeCordonAnnotation]; !ok {
		return false, nil
	}
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{UpgradeCordonAnnotation: nil}},
		"spec":     map[string]any{"unschedulable": nil},
	})
	if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return false, fmt.Errorf("uncordon node %s: %w", node, err)
	}
	return true, nil
}

// WaitNodeVersion waits until node is Ready with its kubelet reporting version, polling every
// 500 ms until timeout; the error says what the node last reported.
func WaitNodeVersion(ctx context.Context, c kubernetes.Interface, node, version string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := "not found"
	for {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		switch {
		case err != nil:
			last = err.Error()
		case n.Status.NodeInfo.KubeletVersion != version:
			last = "kubelet reports " + n.Status.NodeInfo.KubeletVersion
		case nodeNotReady(n) != "":
			last = nodeNotReady(n)
		default:
			return nil
		}
		select {
		case <-ctx.Done():
			return &NodesError{Nodes: []string{node}, Err: fmt.Errorf("node %s not Ready at %s after %s: %s: %w", node, version, timeout, last, ctx.Err())}
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// CordonedForUpgrade are the nodes kforge cordoned for an upgrade and has not uncordoned, each
// with the kubelet version it reports.
func CordonedForUpgrade(ctx context.Context, c kubernetes.Interface) (map[string]string, error) {
	nl, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, n := range nl.Items {
		if _, ok := n.Annotations[UpgradeCordonAnnotation]; ok {
			out[n.Name] = n.Status.NodeInfo.KubeletVersion
		}
	}
	return out, nil
}

// podReady says whether p's Ready condition is true.
func podReady(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	})
}
