package kube

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// RestartPods replaces the pods in namespaces that a DaemonSet or a ReplicaSet runs, one at a
// time per controller: each is deleted, and the controller's next only once it has a Ready
// replacement, so a DaemonSet keeps every other node's pod and a Deployment of two keeps one.
// The controllers go side by side, as a DaemonSet's rolling update does for each (kube-proxy,
// flannel and the NetworkPolicy agent of one node may restart together: the rules they wrote
// stay in the kernel meanwhile). Static pods and bare pods are left alone. It is how pods that
// read their service-account CA once at start (kube-proxy, CoreDNS, flannel) come to trust a new
// cluster CA; the objects are not changed, so a later apply has nothing to undo. It returns the
// pods replaced, "namespace/name", in the order they were replaced.
func RestartPods(ctx context.Context, c kubernetes.Interface, namespaces []string, timeout time.Duration) ([]string, error) {
	var owners []types.UID
	byOwner := map[types.UID][]corev1.Pod{}
	for _, ns := range namespaces {
		list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list pods in %s: %w", ns, err)
		}
		for _, p := range list.Items {
			owner := metav1.GetControllerOf(&p)
			if owner == nil || owner.Kind != "DaemonSet" && owner.Kind != "ReplicaSet" || p.DeletionTimestamp != nil {
				continue
			}
			if byOwner[owner.UID] == nil {
				owners = append(owners, owner.UID)
			}
			byOwner[owner.UID] = append(byOwner[owner.UID], p)
		}
	}
	var mu sync.Mutex
	var done []string
	g, gctx := errgroup.WithContext(ctx)
	for _, uid := range owners {
		g.Go(func() error {
			for _, p := range byOwner[uid] {
				if err := replacePod(gctx, c, &p, *metav1.GetControllerOf(&p), timeout); err != nil {
					return err
				}
				mu.Lock()
				done = append(done, p.Namespace+"/"+p.Name)
				mu.Unlock()
			}
			return nil
		})
	}
	err := g.Wait()
	return done, err
}

// replacePod deletes p and waits until its controller runs a Ready pod in its place: on the same
// node for a DaemonSet, anywhere for a ReplicaSet.
func replacePod(ctx context.Context, c kubernetes.Interface, p *corev1.Pod, owner metav1.OwnerReference, timeout time.Duration) error {
	err := c.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := "not seen yet"
	for {
		list, err := c.CoreV1().Pods(p.Namespace).List(ctx, metav1.ListOptions{})
		if err == nil {
			var ready, old bool
			var states []string
			for _, q := range list.Items {
				o := metav1.GetControllerOf(&q)
				if o == nil || o.UID != owner.UID {
					continue
				}
				if q.UID == p.UID {
					old = true
					continue
				}
				if owner.Kind == "DaemonSet" && q.Spec.NodeName != p.Spec.NodeName {
					continue
				}
				if q.DeletionTimestamp == nil && podReady(&q) {
					ready = true
				}
				states = append(states, q.Name+" "+string(q.Status.Phase))
			}
			if ready && !old {
				return nil
			}
			last = strings.Join(states, ", ")
			if old {
				last = "the old pod is still terminating; " + last
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod %s/%s (%s %s) not replaced by a Ready pod within %s: %s", p.Namespace, p.Name, owner.Kind, owner.Name, timeout, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ConfigMapHolds waits until ConfigMap ns/name's key holds every one of want (PEM blocks, say)
// and, when exact, nothing else but them and whitespace: for the cluster CA that
// kube-controller-manager publishes to every namespace (kube-root-ca.crt), which pods'
// service-account volumes carry.
func ConfigMapHolds(ctx context.Context, c kubernetes.Interface, ns, name, key string, want []string, exact bool, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	for {
		cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			have := cm.Data[key]
			rest := have
			all := true
			for _, w := range want {
				all = all && strings.Contains(have, w)
				rest = strings.Replace(rest, w, "", 1)
			}
			if all && (!exact || strings.TrimSpace(rest) == "") {
				return nil
			}
			last = fmt.Sprintf("%s holds %d certificates", key, strings.Count(have, "BEGIN CERTIFICATE"))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ConfigMap %s/%s does not hold the expected certificates after %s: %s", ns, name, timeout, last)
		case <-time.After(time.Second):
		}
	}
}
