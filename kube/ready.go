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
	// Settle is how long every pod must have stayed ready, its containers not restarted, before
	// the wait ends: a crash-looping pod is Running and even ready for a moment between its
	// restarts. 0: ready once is enough.
	Settle time.Duration
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
	// Settling are the pods that are ready now, and since when: WaitForReady waits until each
	// has stayed ready for WaitReadyInput.Settle.
	Settling []SettlingPod
	// Unready are the pods of Pods, to read their logs.
	Unready []PodRef
}

// PodRef names a pod and the container whose log tells what is wrong with it.
type PodRef struct {
	Namespace, Name, Container string
	// Previous: the container has restarted; its last run's log tells why it ended (a
	// crash-looping container's current run has often not said it yet).
	Previous bool
}

// SettlingPod is a ready pod: its identity (UID and restarts: a restart is a new run) and when
// it became ready, by its Ready condition.
type SettlingPod struct {
	Key      string // "namespace/name on node"
	UID      string
	Restarts int32
	Since    time.Time
	Ref      PodRef
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
	// Logs are the ends of the logs of the pods that were not ready.
	Logs []PodLog
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
	var pods []string
	for _, p := range e.Last.Unready {
		pods = append(pods, p.Namespace+"/"+p.Name)
	}
	if len(pods) > 0 && len(pods) <= logPods {
		return fmt.Sprintf("cluster not ready after %s: %s not ready (%s; kubectl get pods -A)", e.Waited.Round(time.Second), strings.Join(what, ", "), strings.Join(pods, ", "))
	}
	return fmt.Sprintf("cluster not ready after %s: %s not ready (kubectl get nodes; kubectl get pods -A)", e.Waited.Round(time.Second), strings.Join(what, ", "))
}

func (e *NotReadyError) Unwrap() error { return e.Cause }

// Details lists every node, pod and workload that was not ready and why, and the last lines of
// the logs of the pods that were not.
func (e *NotReadyError) Details() []string {
	d := []string{e.Error()}
	for _, l := range e.Last.Nodes {
		d = append(d, "node "+l)
	}
	for _, l := range e.Last.Pods {
		d = append(d, "pod "+l)
	}
	for _, l := range e.Last.Workloads {
		d = append(d, l)
	}
	for _, l := range e.Logs {
		d = append(d, l.lines()...)
	}
	return d
}

// PodLog is the end of a container's log, as kforge quotes it in an error.
type PodLog struct {
	Pod   PodRef
	Lines []string
	Err   error // the log could not be read
}

func (l PodLog) lines() []string {
	which := "log"
	if l.Pod.Previous {
		which = "log of its last run"
	}
	head := fmt.Sprintf("  %s/%s, container %s, %s (kubectl logs -n %s %s -c %s", l.Pod.Namespace, l.Pod.Name, l.Pod.Container, which, l.Pod.Namespace, l.Pod.Name, l.Pod.Container)
	if l.Pod.Previous {
		head += " --previous"
	}
	head += "):"
	if l.Err != nil {
		return []string{head + " not read: " + l.Err.Error()}
	}
	if len(l.Lines) == 0 {
		return []string{head + " empty"}
	}
	out := []string{head}
	for _, line := range l.Lines {
		out = append(out, "    "+line)
	}
	return out
}

// logLines and logPods bound what a NotReadyError quotes; logTries is how often a crash-looping
// container's log is asked for while the kubelet swaps its runs.
const (
	logLines = 10
	logPods  = 5
	logTries = 3
)

// logLinesOf splits a log as the API server returned it. A kubelet that lost the container
// between the pod's status and the read answers 200 with one line of its own instead of the
// log (seen in CI: "unable to retrieve container logs for containerd://…"): that is an error.
func logLinesOf(b []byte) ([]string, error) {
	s := strings.TrimRight(string(b), "\n")
	if s == "" {
		return nil, nil
	}
	if !strings.Contains(s, "\n") && strings.HasPrefix(s, "unable to retrieve container logs for ") {
		return nil, errors.New(s)
	}
	return strings.Split(s, "\n"), nil
}

// TailLogs reads the last lines of each pod's container log (its last run's when it has
// restarted), for up to logPods pods.
func TailLogs(ctx context.Context, c kubernetes.Interface, pods []PodRef) []PodLog {
	var out []PodLog
	tail := int64(logLines)
	for _, p := range pods[:min(len(pods), logPods)] {
		if p.Container == "" {
			continue
		}
		read := func(p PodRef) PodLog {
			b, err := c.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: p.Container, Previous: p.Previous, TailLines: &tail}).DoRaw(ctx)
			l := PodLog{Pod: p, Err: err}
			if err == nil {
				l.Lines, l.Err = logLinesOf(b)
			}
			return l
		}
		var l PodLog
		for try := 0; try < logTries; try++ {
			if try > 0 {
				select {
				case <-ctx.Done():
					return append(out, l)
				case <-time.After(time.Second):
				}
			}
			l = read(p)
			if !p.Previous || (l.Err == nil && len(l.Lines) > 0) {
				break
			}
			// The last run's log may be gone already (the kubelet removed that container
			// as the next one started): the current run's says the same of a crash loop.
			cur := p
			cur.Previous = false
			if running := read(cur); running.Err == nil && len(running.Lines) > 0 {
				l = running
				break
			}
		}
		out = append(out, l)
	}
	return out
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
	seen := map[string]time.Time{} // by pod UID and restarts: when this wait first saw it ready
	var prev ReadyStatus
	checked := false
	for {
		st, err := CheckReady(ctx, c, in.Nodes, in.Namespaces)
		st.Elapsed = time.Since(start)
		switch {
		case err == nil:
			st.Pods = append(st.Pods, unsettled(&st, seen, time.Now(), in.Settle)...)
			sort.Strings(st.Pods)
			prev, checked = st, true
		case checked && deadlineCut(ctx, err):
			st, err = prev, nil // the deadline cut this check short: the last one stands
		}
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
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			logs := TailLogs(lctx, c, st.Unready)
			cancel()
			nre := &NotReadyError{Waited: time.Since(start), Last: st, Cause: context.Cause(ctx), Logs: logs}
			if nodes := notReadyNodes(st.Nodes); len(nodes) > 0 {
				return &NodesError{Nodes: nodes, Err: nre}
			}
			return nre
		case <-time.After(in.Interval):
		}
	}
}

// unsettled are the ready pods of st that have not stayed ready for settle yet, each as a line
// of ReadyStatus.Pods (and added to st.Unready): ready since their Ready condition says (a
// restart makes the pod unready, and ready again later), or, when it says nothing, since this
// wait first saw that run of the pod ready (seen keeps it across checks, by UID and restarts).
func unsettled(st *ReadyStatus, seen map[string]time.Time, now time.Time, settle time.Duration) []string {
	if settle <= 0 {
		return nil
	}
	var out []string
	for _, p := range st.Settling {
		since := p.Since
		if since.IsZero() {
			id := fmt.Sprintf("%s/%d", p.UID, p.Restarts)
			if _, ok := seen[id]; !ok {
				seen[id] = now
			}
			since = seen[id]
		}
		if now.Sub(since) >= settle {
			continue
		}
		why := fmt.Sprintf("ready for %s only; waiting until it has stayed so for %s", max(now.Sub(since), 0).Round(time.Second), settle)
		if p.Restarts > 0 {
			why += fmt.Sprintf(" (its containers restarted %d times)", p.Restarts)
		}
		out = append(out, p.Key+": "+why)
		st.Unready = append(st.Unready, p.Ref)
	}
	return out
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
			where := p.Spec.NodeName
			if where == "" {
				where = "no node"
			}
			key := fmt.Sprintf("%s/%s on %s", p.Namespace, p.Name, where)
			if why := podNotReady(p); why != "" {
				st.Pods = append(st.Pods, key+": "+why)
				st.Unready = append(st.Unready, podRef(p))
			} else if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				st.Settling = append(st.Settling, SettlingPod{Key: key, UID: string(p.UID), Restarts: restarts(p), Since: readySince(p), Ref: podRef(p)})
			}
		}
		deps, err := c.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return st, fmt.Errorf("list deployments in %s: %w", ns, err)
		}
		for _, d := range deps.Items {
			spec := int32(1)
			if d.Spec.Replicas != nil {
				spec = *d.Spec.Replicas
			}
			want := spec - selected(d.Spec.Selector, elsewhere)
			switch s := d.Status; {
			case s.ReadyReplicas < want:
				st.Workloads = append(st.Workloads, fmt.Sprintf("Deployment %s/%s: %d of %d pods ready", ns, d.Name, s.ReadyReplicas, want))
			case s.ObservedGeneration < d.Generation || s.UpdatedReplicas < want || s.Replicas > spec:
				// A rollout: its new spec not seen yet, or old pods still there.
				st.Workloads = append(st.Workloads, fmt.Sprintf("Deployment %s/%s: rolling out, %d of %d pods updated, %d in all", ns, d.Name, s.UpdatedReplicas, spec, s.Replicas))
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

// podRef is the pod and the container whose log says most: the first that is not ready, else
// the first that restarted, else the first.
func podRef(p *corev1.Pod) PodRef {
	r := PodRef{Namespace: p.Namespace, Name: p.Name}
	all := append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...)
	pick := func(c corev1.ContainerStatus) {
		r.Container = c.Name
		r.Previous = c.RestartCount > 0 && c.LastTerminationState.Terminated != nil
	}
	for _, c := range all {
		if !c.Ready && !(c.State.Terminated != nil && c.State.Terminated.ExitCode == 0) {
			pick(c)
			return r
		}
	}
	for _, c := range all {
		if c.RestartCount > 0 {
			pick(c)
			return r
		}
	}
	if len(p.Spec.Containers) > 0 {
		r.Container = p.Spec.Containers[0].Name
	}
	return r
}

// restarts is the sum of a pod's containers' restarts.
func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

// readySince is when a pod's Ready condition last became true (zero when unknown).
func readySince(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
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
