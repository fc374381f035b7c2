package kube

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// StaticPod is a static pod kubelet was given a new manifest for, on node Node.
type StaticPod struct {
	Node string
	Pod  *corev1.Pod // the manifest as written
}

// MirrorName is the name of the pod's mirror pod in the API: "<pod name>-<node>".
func (s StaticPod) MirrorName() string { return s.Pod.Name + "-" + s.Node }

// StaticPodWait is a wait for static pods kubelet was given new manifests for.
type StaticPodWait struct {
	Pods    []StaticPod
	Timeout time.Duration
	// Started ends the wait once each pod's containers run, without waiting for Ready: the
	// caller checks readiness itself, sooner than the kubelet's probes (whose startup probe
	// first looks after 10 s) say it.
	Started bool
}

// WaitForStaticPods waits until each pod's mirror pod in the API runs the new manifest (the
// same image, command and annotations) and is Ready (or with w.Started, its containers run):
// kubelet has replaced the old pod and the new one works. On timeout the error (a *NodesError)
// names each pod still waiting and what was last seen.
func WaitForStaticPods(ctx context.Context, c kubernetes.Interface, w StaticPodWait) error {
	ctx, cancel := context.WithTimeout(ctx, w.Timeout)
	defer cancel()
	last := map[string]string{}
	for {
		var waiting []string
		for _, s := range w.Pods {
			why := ""
			mirror, err := c.CoreV1().Pods(s.Pod.Namespace).Get(ctx, s.MirrorName(), metav1.GetOptions{})
			if err != nil {
				why = err.Error()
			} else {
				why = runsManifest(mirror, s.Pod, !w.Started)
			}
			if why != "" {
				last[s.MirrorName()] = why
				waiting = append(waiting, s.MirrorName())
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			sort.Strings(waiting)
			var d, nodes, names []string
			for _, s := range w.Pods {
				if slices.Contains(waiting, s.MirrorName()) {
					names = append(names, s.Pod.Namespace+"/"+s.MirrorName())
					if !slices.Contains(nodes, s.Node) {
						nodes = append(nodes, s.Node)
					}
				}
			}
			for _, name := range waiting {
				d = append(d, name+": "+last[name])
			}
			return &NodesError{Nodes: nodes, Pods: names, Err: fmt.Errorf("control-plane pods not restarted with their new manifests after %s: %s: %w", w.Timeout, strings.Join(d, "; "), ctx.Err())}
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// runsManifest says why mirror is not yet the Ready pod of manifest want, or with ready false
// the pod of want whose containers all run ("" when it is).
func runsManifest(mirror, want *corev1.Pod, ready bool) string {
	for k, v := range want.Annotations {
		if mirror.Annotations[k] != v {
			return fmt.Sprintf("annotation %s is %q, not yet %q", k, mirror.Annotations[k], v)
		}
	}
	if len(mirror.Spec.Containers) != len(want.Spec.Containers) {
		return "old pod"
	}
	for i, w := range want.Spec.Containers {
		m := mirror.Spec.Containers[i]
		if m.Image != w.Image || !slices.Equal(m.Command, w.Command) {
			return "still the old pod (image or command differ)"
		}
	}
	if !ready {
		running := 0
		for _, cs := range mirror.Status.ContainerStatuses {
			if cs.State.Running != nil {
				running++
			}
		}
		if running < len(want.Spec.Containers) {
			return fmt.Sprintf("%d of %d containers running", running, len(want.Spec.Containers))
		}
		return ""
	}
	for _, cond := range mirror.Status.Conditions {
		if cond.Type == corev1.PodReady {
			if cond.Status == corev1.ConditionTrue {
				return ""
			}
			return "not Ready: " + cond.Reason
		}
	}
	return "no Ready condition yet"
}
