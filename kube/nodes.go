package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/kforge/kforge/inventory"
)

// Labels and the taint kubeadm puts on control-plane nodes.
const (
	LabelControlPlane          = "node-role.kubernetes.io/control-plane"
	LabelExcludeFromExternalLB = "node.kubernetes.io/exclude-from-external-load-balancers"
)

// NodeMarks are the labels and taints one node must carry. Labels and taints the node has
// beyond these are kept: kforge never removes a mark, so one dropped from the inventory stays on
// the node until someone removes it (kubectl label/taint).
type NodeMarks struct {
	Name   string
	Labels map[string]string
	// Taints are matched by key and effect: a taint with the same key and effect but another
	// value gets this value.
	Taints []corev1.Taint
}

// NodeMarksFor is every node's marks from the inventory: the host's labels and taints, and on
// masters kubeadm's control-plane label, exclude-from-external-load-balancers label and
// node-role.kubernetes.io/control-plane:NoSchedule taint (unless the host lists a taint with that
// key itself, whose effect then wins).
func NodeMarksFor(c *inventory.Cluster) []NodeMarks {
	var out []NodeMarks
	for _, n := range c.Nodes() {
		m := NodeMarks{Name: n.Name, Labels: maps.Clone(n.Labels)}
		ownCP := false
		for _, t := range n.Taints {
			m.Taints = append(m.Taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
			ownCP = ownCP || t.Key == LabelControlPlane
		}
		if n.Role == inventory.RoleMaster {
			if m.Labels == nil {
				m.Labels = map[string]string{}
			}
			m.Labels[LabelControlPlane] = ""
			m.Labels[LabelExcludeFromExternalLB] = ""
			if !ownCP {
				m.Taints = append(m.Taints, corev1.Taint{Key: LabelControlPlane, Effect: corev1.TaintEffectNoSchedule})
			}
		}
		out = append(out, m)
	}
	return out
}

// MarkNodes patches each node to carry its marks (one merge patch per node that lacks some;
// nodes that already carry them are not written). A node that has not registered yet is waited
// for, polling every interval (default 1 s), until ctx ends; the error then names the nodes that
// never appeared.
func MarkNodes(ctx context.Context, c kubernetes.Interface, nodes []NodeMarks, interval time.Duration) ([]Change, error) {
	if interval <= 0 {
		interval = time.Second
	}
	var out []Change
	pending := slices.Clone(nodes)
	for {
		var missing []NodeMarks
		for _, m := range pending {
			ch, err := markNode(ctx, c, m)
			if apierrors.IsNotFound(err) {
				missing = append(missing, m)
				continue
			}
			if err != nil {
				return out, err
			}
			out = append(out, ch)
		}
		if len(missing) == 0 {
			return out, nil
		}
		pending = missing
		select {
		case <-ctx.Done():
			var names []string
			for _, m := range missing {
				names = append(names, m.Name)
			}
			return out, &NodesError{Nodes: names, Err: fmt.Errorf("mark nodes: node(s) %s never registered with the API server (%w); check kubelet on those hosts: journalctl -u kubelet", strings.Join(names, ", "), context.Cause(ctx))}
		case <-time.After(interval):
		}
	}
}

func markNode(ctx context.Context, c kubernetes.Interface, m NodeMarks) (Change, error) {
	ch := Change{Kind: "Node", Name: m.Name, Action: Unchanged}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.CoreV1().Nodes().Get(ctx, m.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		labels := map[string]string{}
		for k, v := range m.Labels {
			if hv, ok := n.Labels[k]; !ok || hv != v {
				labels[k] = v
			}
		}
		taints, taintsChanged := mergeTaints(n.Spec.Taints, m.Taints)
		if len(labels) == 0 && !taintsChanged {
			ch.Action = Unchanged
			return nil
		}
		patch := map[string]any{}
		meta := map[string]any{}
		if len(labels) > 0 {
			meta["labels"] = labels
		}
		if taintsChanged {
			// A merge patch replaces the whole list: guard it with the resourceVersion it was
			// computed from, so a concurrent change to the taints is a conflict, not lost.
			meta["resourceVersion"] = n.ResourceVersion
			patch["spec"] = map[string]any{"taints": taints}
		}
		patch["metadata"] = meta
		b, err := json.Marshal(patch)
		if err != nil {
			return err
		}
		_, err = c.CoreV1().Nodes().Patch(ctx, m.Name, types.MergePatchType, b, metav1.PatchOptions{})
		ch.Action = Updated
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return ch, fmt.Errorf("mark node %s: %w", m.Name, err)
	}
	return ch, err
}

// mergeTaints returns have with every taint of want present (same key and effect → want's
// value), and whether that differs from have.
func mergeTaints(have, want []corev1.Taint) ([]corev1.Taint, bool) {
	out := slices.Clone(have)
	changed := false
	for _, w := range want {
		i := slices.IndexFunc(out, func(t corev1.Taint) bool { return t.Key == w.Key && t.Effect == w.Effect })
		switch {
		case i < 0:
			out = append(out, corev1.Taint{Key: w.Key, Value: w.Value, Effect: w.Effect})
			changed = true
		case out[i].Value != w.Value:
			out[i].Value = w.Value
			changed = true
		}
	}
	return out, changed
}

// RestartDaemonSet restarts a DaemonSet's pods as `kubectl rollout restart` does: a new
// kubectl.kubernetes.io/restartedAt annotation on its pod template, which the controller rolls
// out within the DaemonSet's update strategy. For components that read their configuration
// only when they start (kube-proxy's kubeconfig).
func RestartDaemonSet(ctx context.Context, c kubernetes.Interface, namespace, name string, now time.Time) error {
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, now.UTC().Format(time.RFC3339))
	if _, err := c.AppsV1().DaemonSets(namespace).Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("restart daemonset %s/%s: %w", namespace, name, err)
	}
	return nil
}
