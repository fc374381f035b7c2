package tasks

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
)

// An external etcd (the inventory's etcd group) runs on hosts of its own, each a standalone
// kubelet with etcd's static pod (kubeadm's guide to an etcd cluster). stage starts them before
// any master: a new cluster's members together, running members one at a time (each ready
// before the next, so the cluster keeps its quorum), hosts joining the running cluster one at a
// time, each added as a member first.

// startEtcdHosts stages and starts the etcd group's hosts as ep says, and waits until each
// member answers its readiness check.
func startEtcdHosts(ctx context.Context, t *hop, ep etcdPlan, r progress.Reporter) error {
	f := t.rc.fleet
	fresh, rolling, joining := ep.startOrder(f.Nodes(inventory.RoleEtcd))
	if err := fleet.EachOf(ctx, f, fresh, func(ctx context.Context, n inventory.Node, _ remote.Host) error {
		return t.startEtcdHost(ctx, n, ep, nil, r)
	}); err != nil {
		return err
	}
	// A new cluster's members answer once a quorum of them runs: wait for them together.
	if err := fleet.EachOf(ctx, f, fresh, func(ctx context.Context, n inventory.Node, _ remote.Host) error {
		return waitEtcdHost(ctx, t.rc, t.files, n, "")
	}); err != nil {
		return err
	}
	for _, n := range ep.remove {
		removed, err := removeEtcdMember(ctx, t.rc, ep.seed, n)
		if err != nil {
			return fmt.Errorf("%s: remove its etcd member before a new host joins: %w", n.Name, err)
		}
		if removed {
			r(progress.Event{Kind: progress.Info, Host: n.Name, Message: "etcd member removed (no longer in the inventory), before a new host joins"})
		}
	}
	for _, n := range append(rolling, joining...) {
		if err := t.rollEtcdHost(ctx, n, ep, nil, r); err != nil {
			return remote.WithHost(n.Name, err)
		}
	}
	return nil
}

// rollEtcdHost brings one running (or joining) etcd host to this hop's files and waits until its
// member runs them and answers its readiness check (waitEtcdRolled). The next host waits for
// it: the cluster never has two members restarting at once. st is an upgrade's (its files land
// under the new kubelet), nil otherwise.
func (t *hop) rollEtcdHost(ctx context.Context, n inventory.Node, ep etcdPlan, st *staging, r progress.Reporter) error {
	before := etcdStarted(ctx, t.rc, t.files, n)
	if err := t.startEtcdHost(ctx, n, ep, st, r); err != nil {
		return err
	}
	if err := ep.waitMember(ctx, t.rc, n); err != nil {
		return err
	}
	return waitEtcdRolled(ctx, t.rc, t.files, n, before)
}

// startEtcdHost stages etcd host n (its runtime, its part of the bundle, its files) and starts
// its kubelet, which starts etcd; a host joining the running cluster is added as a member
// first. With an upgrade's st, the new kubelet started with the files (pushUnderRestartedKubelet).
func (t *hop) startEtcdHost(ctx context.Context, n inventory.Node, ep etcdPlan, st *staging, r progress.Reporter) error {
	start := t.rc.o.Now()
	did, err := t.stageHost(ctx, n, st, r)
	if err != nil {
		return err
	}
	if err := ep.addMember(ctx, t.rc, n); err != nil {
		return err
	}
	if st == nil || !st.newKubelet {
		msg, err := startKubelet(ctx, t.files, t.rc.fleet.Host(n.Name))
		if err != nil {
			return err
		}
		did = append(did, msg)
	}
	reportStaged(r, t.rc.o.Now, n, start, did)
	return nil
}

// etcdMember is how etcd host n's member is looked at: its static pod as this run renders it,
// the host's SSH dialer, and its metrics URL (process_start_time_seconds, beside its readiness
// check).
func etcdMember(rc *runContext, files *hostFiles, n inventory.Node) (*corev1.Pod, remote.Dialer, string, error) {
	var pod *corev1.Pod
	for _, f := range files.get(n.Name, func(p string) bool { return p == etcdManifest }) {
		pod = &corev1.Pod{}
		if err := yaml.Unmarshal(f.Data, pod); err != nil {
			return nil, nil, "", fmt.Errorf("%s: %s: %w", n.Name, f.Path, err)
		}
	}
	if pod == nil {
		return nil, nil, "", fmt.Errorf("%s: no etcd manifest rendered", n.Name)
	}
	d, err := rc.fleet.Dialer(n.Name)
	if err != nil {
		return nil, nil, "", err
	}
	metrics, _, err := etcdFirstAddrs(pod, pod, n.NodeIP())
	if err != nil {
		return nil, nil, "", fmt.Errorf("%s: %w", n.Name, err)
	}
	return pod, d, metrics, nil
}

// etcdStarted is when etcd host n's member process started (its metrics' start time), "" when
// it does not answer.
func etcdStarted(ctx context.Context, rc *runContext, files *hostFiles, n inventory.Node) string {
	_, d, metrics, err := etcdMember(rc, files, n)
	if err != nil {
		return ""
	}
	return etcdStartTime(ctx, d, metrics)
}

// waitEtcdRolled waits, after this run pushed etcd host n's files, until its member answers its
// readiness check: as a new process (one that did not start at before) when its manifest was
// written (a new etcd version, a certificate it reads when it starts), the same one otherwise.
func waitEtcdRolled(ctx context.Context, rc *runContext, files *hostFiles, n inventory.Node, before string) error {
	if !files.wrote(n.Name, func(p string) bool { return p == etcdManifest }) {
		before = "" // not restarted: ready is enough
	}
	return waitEtcdHost(ctx, rc, files, n, before)
}

// waitEtcdHost waits until etcd host n's member runs (a process other than the one that started
// at before, when before is set) and answers its readiness check.
func waitEtcdHost(ctx context.Context, rc *runContext, files *hostFiles, n inventory.Node, before string) error {
	pod, d, metrics, err := etcdMember(rc, files, n)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, rc.o.Timeout)
	defer cancel()
	if why := until(ctx, func() string {
		if now := etcdStartTime(ctx, d, metrics); now == "" || now == before {
			return "it has not started with its new manifest (" + metrics + ")"
		}
		return probeNow(ctx, d, n.NodeIP(), pod)
	}); why != "" {
		return fmt.Errorf("%s: etcd did not answer its readiness check within %s (%s): look at etcd's log on the host (/var/log/pods/kube-system_etcd-*), then run the command again", n.Name, rc.o.Timeout, why)
	}
	return nil
}
