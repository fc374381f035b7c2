package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Drain does what `kubectl drain --ignore-daemonsets --delete-emptydir-data` does to a node
// that is leaving the cluster: it cordons the node, evicts every pod on it except mirror pods
// and DaemonSet pods (the Eviction API, so PodDisruptionBudgets are respected: a refused
// eviction is retried every second), and waits until the evicted pods are gone. On timeout the
// error names the pods still there. A node that does not exist is already drained. It returns
// the pods it evicted.
func Drain(ctx context.Context, c kubernetes.Interface, node string, timeout time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"unschedulable": true}})
	n, err := c.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("cordon node %s: %w", node, err)
	}
	// A node whose kubelet is gone never confirms a pod's end: its evicted pods stay
	// terminating until the node is deleted (the pod garbage collector then removes them), so
	// there is nothing to wait for once they are evicted.
	dead := nodeNotReady(n) != ""
	evicted := map[string]bool{}
	// stuck says what the last round found; the deadline may come in the middle of a round (its
	// list or an eviction), and the error still names the pods and the budgets.
	stuck := "pods still on it: unknown (the deadline came before the first round ended)"
	timedOut := func() error {
		<-ctx.Done() // at most the rate limiter's wait away (deadlineCut)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("drain node %s: not done within %s: %s", node, timeout, stuck)
		}
		return fmt.Errorf("drain node %s: %s: %w", node, stuck, ctx.Err())
	}
	for {
		// A kubelet that stops answering during the drain (its host just went down) is dead
		// from the moment the node controller marks it: look again each round.
		if n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
			dead = nodeNotReady(n) != ""
		}
		list, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
		if err != nil {
			if deadlineCut(ctx, err) {
				return keys(evicted), timedOut()
			}
			return keys(evicted), fmt.Errorf("drain node %s: list its pods: %w", node, err)
		}
		var left, refused []string
		for _, p := range list.Items {
			if !evictable(&p) {
				continue
			}
			name := p.Namespace + "/" + p.Name
			left = append(left, name)
			if p.DeletionTimestamp != nil {
				if dead {
					left = left[:len(left)-1]
				}
				continue // on its way out
			}
			err := c.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
			switch {
			case err == nil:
				evicted[name] = true
				if dead {
					left = left[:len(left)-1]
				}
			case apierrors.IsNotFound(err):
			case apierrors.IsTooManyRequests(err):
				refused = append(refused, name+" ("+disruptionBudgetOf(ctx, c, &p)+" allows no disruption now)")
			case deadlineCut(ctx, err):
				return keys(evicted), timedOut()
			default:
				return keys(evicted), fmt.Errorf("drain node %s: evict %s: %w", node, name, err)
			}
		}
		if len(left) == 0 {
			return keys(evicted), nil
		}
		sort.Strings(left)
		stuck = "pods still on it: " + strings.Join(left, ", ")
		if len(refused) > 0 {
			stuck += "; evictions refused: " + strings.Join(refused, ", ")
		}
		select {
		case <-ctx.Done():
			return keys(evicted), timedOut()
		case <-time.After(time.Second):
		}
	}
}

// disruptionBudgetOf names the PodDisruptionBudgets that select pod ("its PodDisruptionBudget"
// when they cannot be listed).
func disruptionBudgetOf(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod) string {
	list, err := c.PolicyV1().PodDisruptionBudgets(pod.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "its PodDisruptionBudget"
	}
	var names []string
	for _, b := range list.Items {
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(pod.Labels)) {
			names = append(names, pod.Namespace+"/"+b.Name)
		}
	}
	if len(names) == 0 {
		return "its PodDisruptionBudget"
	}
	return "PodDisruptionBudget " + strings.Join(names, ", ")
}

// evictable is a pod drain moves: not a mirror pod (kubelet's static pods) and not a
// DaemonSet's (the DaemonSet would put it back).
func evictable(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Controller != nil && *o.Controller {
			return false
		}
	}
	return true
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// DeleteNode deletes a node object; one that is gone already is fine.
func DeleteNode(ctx context.Context, c kubernetes.Interface, node string) (bool, error) {
	err := c.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("delete node %s: %w", node, err)
	}
	return true, nil
}

// DeletePodsOfLostNode deletes at once (grace period 0) the pods bound to node, a node that is
// gone for good (a master lost before a restore): nothing will ever stop their containers or
// report on them, and the pod garbage collector would wait 40 s before it deletes them, while
// their Deployments count them as ready and make no replacement. It returns how many it
// deleted.
func DeletePodsOfLostNode(ctx context.Context, c kubernetes.Interface, node string) (int, error) {
	pods, err := c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return 0, fmt.Errorf("list the pods of node %s: %w", node, err)
	}
	zero := int64(0)
	n := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName != node { // a fake clientset ignores field selectors
			continue
		}
		err := c.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("delete pod %s/%s of node %s: %w", p.Namespace, p.Name, node, err)
		}
		n++
	}
	return n, nil
}
