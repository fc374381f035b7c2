package kube

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// WaitRollouts waits until every DaemonSet and Deployment that changes created or updated has
// rolled out: its controller has seen its spec (observedGeneration), and every pod it wants
// runs that spec and is available. An upgrade waits for its addons so, before it drains a
// worker: a node whose kube-proxy is being replaced does not follow the endpoints a drain
// moves. On timeout the error names each one still rolling and how far it got.
func WaitRollouts(ctx context.Context, c kubernetes.Interface, changes []Change, timeout time.Duration) error {
	var waiting []string
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		waiting = nil
		for _, ch := range changes {
			if ch.Action != Created && ch.Action != Updated {
				continue
			}
			if why := rollingOut(ctx, c, ch); why != "" {
				waiting = append(waiting, why)
			}
		}
		return len(waiting) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("still rolling out after %s: %s (kubectl -n NAMESPACE rollout status KIND/NAME says more)", timeout, strings.Join(waiting, "; "))
	}
	return nil
}

// rollingOut says how far a DaemonSet's or Deployment's rollout got, "" when it is done (or ch
// is neither).
func rollingOut(ctx context.Context, c kubernetes.Interface, ch Change) string {
	switch ch.Kind {
	case "DaemonSet":
		d, err := c.AppsV1().DaemonSets(ch.Namespace).Get(ctx, ch.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Sprintf("DaemonSet %s/%s: %v", ch.Namespace, ch.Name, err)
		}
		s := d.Status
		if s.ObservedGeneration < d.Generation || s.UpdatedNumberScheduled < s.DesiredNumberScheduled || s.NumberAvailable < s.DesiredNumberScheduled {
			return fmt.Sprintf("DaemonSet %s/%s: %d of %d pods updated, %d available", ch.Namespace, ch.Name, s.UpdatedNumberScheduled, s.DesiredNumberScheduled, s.NumberAvailable)
		}
	case "Deployment":
		d, err := c.AppsV1().Deployments(ch.Namespace).Get(ctx, ch.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Sprintf("Deployment %s/%s: %v", ch.Namespace, ch.Name, err)
		}
		s, want := d.Status, int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		if s.ObservedGeneration < d.Generation || s.UpdatedReplicas < want || s.AvailableReplicas < want || s.Replicas > want {
			return fmt.Sprintf("Deployment %s/%s: %d of %d replicas updated, %d available, %d in all", ch.Namespace, ch.Name, s.UpdatedReplicas, want, s.AvailableReplicas, s.Replicas)
		}
	}
	return ""
}
