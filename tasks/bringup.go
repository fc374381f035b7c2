package tasks

import (
	"context"
	"strings"

	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/templates"
)

// bringUp is how apply and restore bring a cluster up from the files render made: stage starts
// the control plane, then come the API objects, the workers, the addons and the wait for every
// node and pod to be Ready, then the tidying. Its steps come in three parts, so that restore
// puts its own between them; stage's background work is the handle staged, which the steps that
// need it finished take as their input.
type bringUp struct {
	t      *hop
	etcd   *etcdPlan // how the etcd members start (apply's etcd-members step; restore's new cluster)
	staged *staging  // stage: the workers' staging and the masters' shipments still running
}

// startSteps: stage, wait-apiserver, kubeconfig.
func (b *bringUp) startSteps(l *list) {
	rc, c := b.t.rc, b.t.inv
	all, masters := rc.fleet.Names(""), rc.fleet.Names(inventory.RoleMaster)
	rolling := ""
	if len(masters) > 1 {
		rolling = ", running ones one at a time, etcd first"
	}
	l.add("stage", OnHosts, all, func(ctx context.Context, r progress.Reporter) (err error) {
		b.staged, err = stage(ctx, b.t, *b.etcd, r)
		return err
	}, "%son every host in parallel: %s; masters then start kubelet and the static-pod control plane (%s)%s; workers finish staging meanwhile", etcdFirstWhat(c), stageWhat(c), strings.Join(masters, ", "), rolling)
	l.add("wait-apiserver", ThroughAPI, nil, rc.kubeletsSay(b.t.waitAPIServer), "wait until the API server answers, through an SSH tunnel to %s, and for control-plane pods this run replaced", masters[0])
	l.add("kubeconfig", OnWorkstation, nil, rc.writeKubeconfig, "write the admin kubeconfig to the state dir: from here on the cluster can be looked at, even when a later step fails")
}

// etcdFirstWhat is what stage does first with an external etcd, for the step's description.
func etcdFirstWhat(c *inventory.Cluster) string {
	if !c.ExternalEtcd() {
		return ""
	}
	return "first the etcd hosts (" + strings.Join(fleet.Names(c.EtcdHosts()), ", ") + "): kubelet starts etcd's static pod, a new cluster's members together, running ones one at a time, each ready before the next; then "
}

// stageWhat is what stage does on every host, for the step's description.
func stageWhat(c *inventory.Cluster) string {
	what := "configure containerd (" + c.Kubelet.CgroupDriver + " cgroup driver) and kernel settings, push its files"
	if c.Bundle != "" {
		what = "upload what it lacks from the bundle, " + what
	}
	return what
}

// clusterSteps: the API objects, the workers, the addons, and the wait for Ready.
func (b *bringUp) clusterSteps(l *list) {
	rc, t, c := b.t.rc, b.t, b.t.inv
	nodes, masters, workers := rc.fleet.Names(inventory.AnyNode), rc.fleet.Names(inventory.RoleMaster), rc.fleet.Names(inventory.RoleWorker)
	l.add("cluster-config", ThroughAPI, nil, rc.clusterConfig, "grant kubeadm:cluster-admins, upload kubeadm-config and kubelet-config")
	l.add("bootstrap", ThroughAPI, nil, rc.bootstrap, "create the bootstrap token, node-bootstrap RBAC, CSR auto-approval and cluster-info")
	if c.ControlPlaneVIP != "" {
		l.add("vip", OnHosts, masters, func(ctx context.Context, r progress.Reporter) error {
			return startVIP(ctx, t, b.staged, r)
		}, "start kforge-vip on every master: one at a time holds %s (the Lease kube-system/%s) and announces it by ARP; wait until one does", c.ControlPlaneVIP, templates.VIPLease)
	}
	if len(workers) > 0 {
		l.add("join-workers", OnHosts, workers, rc.kubeletsSay(func(ctx context.Context, r progress.Reporter) error {
			return joinWorkers(ctx, t, b.staged, r)
		}), "start kubelet on the staged workers (a joined worker's kubelet.conf follows the API server's address): new ones join by TLS bootstrap")
	}
	l.add("core-addons", ThroughAPI, nil, func(ctx context.Context, r progress.Reporter) error {
		return coreAddons(ctx, t, b.staged, r)
	}, "install kube-proxy and CoreDNS (kube-proxy's pods roll when its configuration changes)")
	if c.Networking.Plugin == "flannel" {
		l.add("pod-network", OnHosts, nodes, rc.kubeletsSay(t.podNetwork), "install flannel (vxlan) over %s and write each node's CNI config for its pod CIDR", strings.Join(c.Networking.PodSubnets(), " and "))
	}
	if c.Networking.NetworkPolicy == inventory.NetworkPolicyOff {
		l.add("network-policy", ThroughAPI, nil, t.addonStep("kube-network-policies", networkPolicyObjects), "remove the NetworkPolicy agent (kube-network-policies) where an earlier run installed it: networking.networkPolicy is off")
	} else {
		what := "NetworkPolicies are enforced"
		if c.Networking.AdminNetworkPolicy {
			what = "NetworkPolicies, AdminNetworkPolicies and BaselineAdminNetworkPolicies (their CRDs installed first) are enforced"
		}
		l.add("network-policy", ThroughAPI, nil, t.addonStep("kube-network-policies", networkPolicyObjects), "run the NetworkPolicy agent (SIG Network's kube-network-policies) on every node: %s", what)
	}
	if c.MetricsServer.On() {
		l.add("metrics-server", ThroughAPI, nil, t.addonStep("metrics-server", metricsServerObjects), "run metrics-server in kube-system (kubectl top, HorizontalPodAutoscalers), verifying the kubelets' serving certificates against the cluster CA")
	} else {
		l.add("metrics-server", ThroughAPI, nil, t.addonStep("metrics-server", metricsServerObjects), "remove metrics-server where an earlier run installed it: metricsServer.enabled is false")
	}
	if c.LocalVolumes.On() {
		l.add("local-volumes", ThroughAPI, nil, t.addonStep("local volumes", localVolumesObjects), "serve local volumes: local-path-provisioner in %s, the default StorageClass %s, each volume a directory under %s on its node (made and removed by kforge's helper image)", kube.LocalPathNamespace, kube.LocalPathStorageClass, c.LocalVolumes.Path)
	} else {
		l.add("local-volumes", ThroughAPI, nil, t.addonStep("local volumes", localVolumesObjects), "remove the local volumes' provisioner and StorageClass where an earlier run installed them (the volumes stay): localVolumes.enabled is false")
	}
	l.add("mark-nodes", ThroughAPI, nil, rc.kubeletsSay(rc.markNodes), "label and taint the masters, apply the inventory's labels and taints")
	if c.ScheduledSnapshots() {
		l.add("etcd-snapshots", OnHosts, rc.fleet.Names(c.EtcdRole()), func(ctx context.Context, r progress.Reporter) error {
			return startSnapshots(ctx, t, b.staged, r)
		}, "start the timer of the scheduled etcd snapshots on the %s: every %s, each one's own member into %s, verified, the newest %d kept", etcdHostsWord(c), c.EtcdSnapshots.Every, hostpath.EtcdSnapshotDir, c.EtcdSnapshots.Keep)
	}
	if len(c.Addons) > 0 {
		l.add("addons", ThroughAPI, nil, rc.addons, "apply %s (server-side)", count(len(c.Addons), "user manifest"))
	}
	if c.Networking.Plugin != "none" {
		l.add("wait-ready", ThroughAPI, nil, rc.kubeletsSay(rc.waitReady), "wait until every node is Ready and every pod of %s ready, and stayed so for %s (a crash-looping pod fails the run, its log quoted)", listed(addonNamespaces(c)), rc.o.Settle)
	}
}

// tidySteps: what the cluster no longer needs on its hosts.
func (b *bringUp) tidySteps(l *list) {
	rc, c := b.t.rc, b.t.inv
	all, workers := rc.fleet.Names(""), rc.fleet.Names(inventory.RoleWorker)
	if len(workers) > 0 {
		l.add("forget-token", OnHosts, workers, rc.forgetBootstrapToken, "remove %s from workers whose kubelet has its own credentials (kubelet.conf), as kubeadm does after TLS bootstrap", hostpath.BootstrapKubeletConfig)
	}
	if retired := retired(c); len(retired) > 0 {
		l.add("retire", OnHosts, all, rc.retire, "stop and remove, where an earlier run installed them, %s", strings.Join(retired, " and "))
	}
}
