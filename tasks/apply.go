// Package tasks holds what `kforge apply` does, as one ordered list of named steps built in
// this file: reading it top to bottom tells the whole story of apply, and listing the names
// gives `kforge plan`.
package tasks

import (
	"context"
	"fmt"
	"strings"

	"github.com/kforge/kforge/inventory"
)

// Scope says where a task does its work.
type Scope string

const (
	OnHosts       Scope = "hosts"       // over SSH, on the hosts listed in Task.Hosts
	OnWorkstation Scope = "workstation" // locally, no host is touched
	ThroughAPI    Scope = "api"         // through the Kubernetes API (client-go)
)

// Task is one named step of apply.
type Task struct {
	Name        string
	Description string
	Scope       Scope
	Hosts       []string // the hosts a task touches, when Scope is OnHosts
}

// Apply returns the tasks `kforge apply` runs for cluster c with options o (only Removed and
// Prune matter), in order: what `kforge plan` shows.
func Apply(c *inventory.Cluster, o Options) []Task {
	var ts []Task
	for _, s := range NewApplier(c, o).Steps() {
		ts = append(ts, s.Task)
	}
	return ts
}

// Steps is apply, top to bottom. Ordinary ifs decide what is in the list.
func (a *Applier) Steps() []Step {
	c := a.inv
	all, masters, workers := names(a.nodes, ""), names(a.nodes, inventory.RoleMaster), names(a.nodes, inventory.RoleWorker)
	var ss []Step
	add := func(name string, scope Scope, hosts []string, run func(context.Context, Reporter) error, format string, args ...any) {
		ss = append(ss, Step{Task: Task{Name: name, Description: fmt.Sprintf(format, args...), Scope: scope, Hosts: hosts}, Run: run})
	}

	add("connect", OnHosts, all, a.connect, "connect to %s over SSH (host keys verified) and gather facts in one round trip each", count(len(all), "host"))
	add("preflight", OnHosts, all, a.preflight, "run kubeadm's preflight checks on every host before anything changes")
	add("pki", OnWorkstation, nil, a.ensurePKI, "generate or reuse the cluster's certificates (%s), kubeconfigs and bootstrap token in the state dir", c.PKI.KeyAlgorithm)
	add("etcd-members", OnHosts, masters, a.planEtcd, "keep running etcd members as they started; masters without data join the running cluster one at a time")
	add("render", OnWorkstation, nil, a.render, "render static-pod manifests, kubelet and containerd configuration for every host")
	stageWhat := "configure containerd (" + c.Kubelet.CgroupDriver + " cgroup driver) and kernel settings, push its files"
	if c.Bundle != "" {
		stageWhat = "upload what it lacks from the bundle, " + stageWhat
	}
	add("stage", OnHosts, all, a.stage, "on every host in parallel: %s; masters then start kubelet and the static-pod control plane (%s), workers finish staging meanwhile", stageWhat, strings.Join(masters, ", "))
	add("wait-apiserver", ThroughAPI, nil, a.waitAPIServer, "wait until the API server answers, through an SSH tunnel to %s", masters[0])
	add("cluster-config", ThroughAPI, nil, a.clusterConfig, "grant kubeadm:cluster-admins, upload kubeadm-config and kubelet-config")
	add("bootstrap", ThroughAPI, nil, a.bootstrap, "create the bootstrap token, node-bootstrap RBAC, CSR auto-approval and cluster-info")
	if len(workers) > 0 {
		add("join-workers", OnHosts, workers, a.joinWorkers, "start kubelet on the staged workers: they join by TLS bootstrap")
	}
	add("core-addons", ThroughAPI, nil, a.coreAddons, "install kube-proxy and CoreDNS")
	if c.Networking.Plugin == "flannel" {
		add("pod-network", OnHosts, all, a.podNetwork, "install flannel (vxlan) over %s and write each node's CNI config for its pod CIDR", c.Networking.PodSubnet)
	}
	add("mark-nodes", ThroughAPI, nil, a.markNodes, "label and taint the masters, apply the inventory's labels and taints")
	if len(c.Addons) > 0 {
		add("addons", ThroughAPI, nil, a.addons, "apply %s (server-side)", count(len(c.Addons), "user manifest"))
	}
	if c.Networking.Plugin != "none" {
		add("wait-ready", ThroughAPI, nil, a.waitReady, "wait until every node is Ready and kube-system pods run")
	}
	if removed := names(a.o.Removed, ""); len(removed) > 0 {
		if a.o.Prune {
			add("prune", OnHosts, removed, a.prune, "one at a time: drain %s (no longer in the inventory), remove a master's etcd member, reset the host, delete the node", strings.Join(removed, ", "))
		} else {
			add("removed-hosts", OnWorkstation, nil, a.reportRemoved, "report %s: no longer in the inventory, still in the cluster (kforge apply --prune removes them)", strings.Join(removed, ", "))
		}
	}
	add("record-hosts", OnWorkstation, nil, a.recordHosts, "record the cluster's hosts in the state dir, to find hosts later removed from the inventory")
	add("kubeconfig", OnWorkstation, nil, a.writeKubeconfig, "write the admin kubeconfig to the state dir")
	return ss
}

func names(nodes []inventory.Node, role inventory.Role) []string {
	var out []string
	for _, n := range nodes {
		if role == "" || n.Role == role {
			out = append(out, n.Name)
		}
	}
	return out
}

// count is "1 what" or "n whats".
func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
