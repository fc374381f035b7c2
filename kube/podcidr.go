package kube

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// WaitForPodCIDRs waits until every named node is registered and kube-controller-manager has
// given it a pod CIDR, and returns them by node name. On timeout the error names the nodes
// still without one.
func WaitForPodCIDRs(ctx context.Context, c kubernetes.Interface, nodes []string, timeout time.Duration) (map[string]string, error) {
	cidrs := map[string]string{}
	var missing []string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil // the API server may be restarting; keep waiting
		}
		for _, n := range list.Items {
			if n.Spec.PodCIDR != "" {
				cidrs[n.Name] = n.Spec.PodCIDR
			}
		}
		missing = missing[:0]
		for _, n := range nodes {
			if cidrs[n] == "" {
				missing = append(missing, n)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("waiting for the nodes' pod CIDRs: %w", ctx.Err())
		}
		sort.Strings(missing)
		return nil, fmt.Errorf("nodes without a pod CIDR after %s: %s (is kubelet running there, and kube-controller-manager with --allocate-node-cidrs?): %w", timeout, strings.Join(missing, ", "), err)
	}
	return cidrs, nil
}
