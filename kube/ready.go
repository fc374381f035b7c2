package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// WaitReadyInput tunes WaitForReady.
type WaitReadyInput struct {
	// Nodes must all exist and be Ready.
	Nodes []string
	// Namespaces whose pods must all be Running and ready (finished pods are ignored) and whose
	// Deployments and DaemonSets must have all their pods ready; default kube-system.
	Namespaces []string
	// Interval between checks; default 1 s.
	Interval time.Duration
	// Progress, when set, is called after every check.
	Progress func(ReadyStatus)
}

// ReadyStatus is one check's result: what is not ready yet and why, one line each.
type ReadyStatus struct {
	Elapsed    time.Duration
	ReadyNodes int
	TotalNodes int
	Nodes      []string // "name: why"
	Pods       []string // "namespace/name on node: why"
	Workloads  []string // "Kind namespace/name: n of m ready"
}

// Ready reports whether nothing is left waiting.
func (s ReadyStatus) Ready() bool {
	return len(s.Nodes) == 0 && len(s.Pods) == 0 && len(s.Workloads) == 0
}

func (s ReadyStatus) String() string {
	if s.Ready() {
		return fmt.Sprintf("%d/%d nodes ready, all pods running", s.ReadyNodes, s.TotalNodes)
	}
	return fmt.Sprintf("%d/%d nodes ready, %d pod(s) and %d workload(s) not ready", s.ReadyNodes, s.TotalNodes, len(s.Pods), len(s.Workloads))
}

// NotReadyError names the nodes, pods and workloads that were not ready when the wait ended.
type NotReadyError struct {
	Waited time.Duration
	Last   ReadyStatus
	Cause  error
}

func (e *NotReadyError) Error() string {
	var what []string
	if n := len(e.Last.Nodes); n > 0 {
		what = append(what, fmt.Sprintf("%d node(s)", n))
	}
	if n := len(e.Last.Pods); n > 0 {
		what = append(what, fmt.Sprintf("%d pod(s)", n))
	}
	if n := len(e.Last.Workloads); n > 0 {
		what = append(what, fmt.Sprintf("%d workload(s)", n))
	}
	return fmt.Sprintf("cluster not ready after %s: %s not ready (kubectl get nodes; kubectl get pods -A)", e.Waited.Round(time.Second), strings.Join(what, ", "))
}

func (e *NotReadyError) Unwrap() error { return e.Cause }

// Details lists every node, pod and workload that was not ready and why.
func (e *NotReadyError) Details() []string {
	var d []string
	for _, l := range e.Last.Nodes {
		d = append(d, "node "+l)
	}
	for _, l := range e.Last.Pods {
		d = append(d, "pod "+l)
	}
	for _, l := range e.Last.Workloads {
		d = append(d, l)
	}
	return d
}

// WaitForReady waits until every node in in.Nodes is Ready and every pod, Deployment and
// DaemonSet in in.Namespaces is ready, checking every in.Interval and reporting through
// in.Progress. When ctx ends first it returns a *NotReadyError that names what was not ready
// and why: node conditions, pod phases, container waiting and termination reasons; when some
// nodes were not Ready, it comes wrapped in a *NodesError that names them (errors.As finds both).
func WaitForReady(ctx context.Context, c kubernetes.Interface, in WaitReadyInput) error {
	if in.Interval <= 0 {
		in.Interval = time.Second
	}
	if in.Namespaces == nil {
		in.Namespaces = []string{metav1.NamespaceSystem}
	}
	start := time.Now()
	for {
		st, err := CheckReady(ctx, c, in.Nodes, in.Namespaces)
		st.Elapsed = time.Since(start)
		if err == nil && in.Progress != nil {
			in.Progress(st)
		}
		if err == nil && st.Ready() {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("wait for cluster: %w (last check failed)", err)
			}
			nre := &NotReadyError{Waited: time.Since(start), Last: st, Cause: context.Cause(ctx)}
			if nodes := notReadyNodes(st.Nodes); len(nodes) > 0 {
				return &NodesError{Nodes: nodes, Err: nre}
			}
			return nre
		case <-time.After(in.Interval):
		}
	}
}

// CheckReady checks once what WaitForReady waits for. Pods on nodes that are not in nodes
// (hosts leaving the cluster, such as a dead master about to be pruned, or nodes kforge does not
// manage) are not waited on, and the Deployments and DaemonSets they belong to may lack them.
func CheckReady(ctx context.Context, c kubernetes.Interface, nodes, namespaces []string) (ReadyStatus, error) {
	var st ReadyStatus
	nl, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return st, fmt.Errorf("list nodes: %w", err)
	}
	byName := map[string]*corev1.Node{}
	for i := range nl.Items {
		byName[nl.Items[i].Name] = &nl.Items[i]
	}
	st.TotalNodes = len(nodes)
	for _, name := range nodes {
		n, ok := byName[name]
		if !ok {
			st.Nodes = append(st.Nodes, name+": not registered (kubelet has not joined; journalctl -u kubelet on the host)")
			continue
		}
		if why := nodeNotReady(n); why != "" {
			st.Nodes = append(st.Nodes, name+": "+why)
			continue
		}
		st.ReadyNodes++
	}
	outside := func(p *corev1.Pod) bool { // on a registered node that is not one of nodes
		return p.Spec.NodeName != "" && byName[p.Spec.NodeName] != nil && !slices.Contains(nodes, p.Spec.NodeName)
	}
	for _, ns := range namespaces {
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return st, fmt.Errorf("list pods in %s: %w", ns, err)
		}
		// elsewhere counts, by the labels of each pod outside nodes, what workloads may lack.
		var elsewhere []map[string]string
		for i := range pods.Items {
			p := &pods.Items[i]
			if outside(p) {
				elsewhere = append(elsewhere, p.Labels)
				continue
			}
			if why := podNotReady(p); why != "" {
				where := p.Spec.NodeName
				if where == "" {
					where = "no node"
				}
				st.Pods = append(st.Pods, fmt.Sprintf("%s/%s on %s: %s", p.Namespace, p.Name, where, why))
			}
		}
		deps, err := c.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return st, fmt.Errorf("list deployments in %s: %w", ns, err)
		}
		for _, d := range deps.Items {
			want := int32(1)
			if d.Spec.Replicas != nil {
				want = *d.Spec.Replicas
			}
			want -= selected(d.Spec.Selector, elsewhere)
			if d.Status.ReadyReplicas < want || d.Status.UpdatedReplicas < want {
				st.Workloads = append(st.Workloads, fmt.Sprintf("Deployment %s/%s: %d of %d pods ready", ns, d.Name, d.Status.ReadyReplicas, want))
			}
		}
		dss, err := c.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return st, fmt.Errorf("list daemonsets in %s: %w", ns, err)
		}
		for _, d := range dss.Items {
			s := d.Status
			want := s.DesiredNumberScheduled - selected(d.Spec.Selector, elsewhere)
			if s.ObservedGeneration < d.Generation || s.NumberReady < want || s.UpdatedNumberScheduled < want {
				st.Workloads = append(st.Workloads, fmt.Sprintf("DaemonSet %s/%s: %d of %d pods ready", ns, d.Name, s.NumberReady, s.DesiredNumberScheduled))
			}
		}
	}
	sort.Strings(st.Pods)
	return st, nil
}

// selected counts the label sets sel matches.
func selected(sel *metav1.LabelSelector, sets []map[string]string) int32 {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || s.Empty() {
		return 0
	}
	var n int32
	for _, l := range sets {
		if s.Matches(labels.Set(l)) {
			n++
		}
	}
	return n
}

// nodeNotReady says why a node is not Ready, or "".
func nodeNotReady(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			return ""
		}
		return fmt.Sprintf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)
	}
	return "no Ready condition yet"
}

// podNotReady says why a pod is not running and ready, or "" (also for finished pods).
func podNotReady(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return "" // going away; its controller's count says whether a replacement is ready
	}
	switch p.Status.Phase {
	case corev1.PodSucceeded:
		return ""
	case corev1.PodFailed:
		if metav1.GetControllerOf(p) != nil {
			// An evicted or failed pod a controller has replaced stays until garbage
			// collection: the workload check judges the replacement.
			return ""
		}
		return fmt.Sprintf("Failed: %s %s", p.Status.Reason, p.Status.Message)
	case corev1.PodRunning:
	default:
		why := string(p.Status.Phase)
		if why == "" {
			why = "Pending"
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
				return fmt.Sprintf("%s, not scheduled: %s %s", why, c.Reason, c.Message)
			}
		}
		if cs := containersNotReady(p); cs != "" {
			return why + ", " + cs
		}
		if p.Status.Reason != "" || p.Status.Message != "" {
			return strings.TrimSpace(fmt.Sprintf("%s, %s %s", why, p.Status.Reason, p.Status.Message))
		}
		return why
	}
	if podReady(p) {
		return ""
	}
	if cs := containersNotReady(p); cs != "" {
		return "Running, " + cs
	}
	return "Running, not ready"
}

// containersNotReady lists the containers that are not ready with their waiting or last
// termination reason.
func containersNotReady(p *corev1.Pod) string {
	var out []string
	all := append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...)
	for _, c := range all {
		if c.Ready {
			continue
		}
		switch {
		case c.State.Waiting != nil:
			s := fmt.Sprintf("container %s waiting: %s", c.Name, c.State.Waiting.Reason)
			if m := c.State.Waiting.Message; m != "" {
				s += " (" + firstLine(m) + ")"
			}
			if t := c.LastTerminationState.Terminated; t != nil {
				s += fmt.Sprintf(", last exit %d %s", t.ExitCode, t.Reason)
			}
			out = append(out, s)
		case c.State.Terminated != nil:
			t := c.State.Terminated
			if t.ExitCode == 0 && slices.ContainsFunc(p.Status.InitContainerStatuses, func(s corev1.ContainerStatus) bool { return s.Name == c.Name }) {
				continue // a finished init container
			}
			out = append(out, fmt.Sprintf("container %s terminated: exit %d %s", c.Name, t.ExitCode, t.Reason))
		case c.State.Running != nil:
			out = append(out, fmt.Sprintf("container %s running, not ready (restarts %d)", c.Name, c.RestartCount))
		}
	}
	return strings.Join(out, "; ")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// NodesError is a wait that ended with some nodes at fault: the nodes, by name, and the error.
// The caller, which can reach the hosts, adds what their kubelets say (tasks: KubeletsError).
type NodesError struct {
	Nodes []string
	// Pods, when set, are the pods ("namespace/name") the wait was for: what those nodes'
	// kubelets said of them is the first thing to read.
	Pods []string
	Err  error
}

func (e *NodesError) Error() string { return e.Err.Error() }
func (e *NodesError) Unwrap() error { return e.Err }

// Details passes the wrapped error's details on.
func (e *NodesError) Details() []string {
	var d interface{ Details() []string }
	if errors.As(e.Err, &d) {
		return d.Details()
	}
	return []string{e.Error()}
}

// notReadyNodes are the names of the nodes of a status line list ("name: why").
func notReadyNodes(lines []string) []string {
	var out []string
	for _, l := range lines {
		name, _, _ := strings.Cut(l, ":")
		out = append(out, name)
	}
	return out
}
