// Package tasks holds what `kforge apply` does, as one ordered list of named steps built in
// this file: reading it top to bottom tells the whole story of apply, and listing the names
// gives `kforge plan`.
package tasks

import (
	"fmt"

	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
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

// Apply returns the steps `kforge apply` takes for cluster c, in order. Ordinary ifs decide
// what is in the list.
func Apply(c *inventory.Cluster) []Task {
	all, masters, workers := names(c.Nodes(), ""), names(c.Nodes(), inventory.RoleMaster), names(c.Nodes(), inventory.RoleWorker)
	var ts []Task
	add := func(name string, scope Scope, hosts []string, format string, args ...any) {
		ts = append(ts, Task{Name: name, Description: fmt.Sprintf(format, args...), Scope: scope, Hosts: hosts})
	}

	add("connect", OnHosts, all, "connect to %s over SSH (host keys verified) and gather facts in one round trip each", count(all, "host"))
	add("preflight", OnHosts, all, "run kubeadm's preflight checks on every host before anything changes")
	add("pki", OnWorkstation, nil, "generate or reuse the cluster's certificates (%s) and kubeconfigs in the state dir", c.PKI.KeyAlgorithm)
	add("render", OnWorkstation, nil, "render static-pod manifests, kubelet and containerd configuration for every host")
	if c.Bundle != "" {
		add("bundle", OnHosts, all, "upload what each host lacks from the bundle %s, install binaries, import images", c.Bundle)
	}
	add("runtime", OnHosts, all, "configure containerd (%s cgroup driver) and the kernel settings Kubernetes needs", c.Kubelet.CgroupDriver)
	add("control-plane", OnHosts, masters, "push PKI, kubeconfigs and static pods (etcd, kube-apiserver, kube-controller-manager, kube-scheduler), start kubelet")
	add("wait-apiserver", ThroughAPI, nil, "wait until the API server answers at %s", pki.Endpoint(c))
	add("cluster-config", ThroughAPI, nil, "upload kubeadm-config and kubelet-config, label and taint the masters")
	add("bootstrap", ThroughAPI, nil, "create the bootstrap token, node-bootstrap RBAC, CSR auto-approval and cluster-info")
	add("core-addons", ThroughAPI, nil, "install CoreDNS and kube-proxy")
	if c.Networking.Plugin == "flannel" {
		add("pod-network", ThroughAPI, nil, "install flannel (vxlan) over %s", c.Networking.PodSubnet)
	}
	if len(workers) > 0 {
		add("join-workers", OnHosts, workers, "push CA and bootstrap kubeconfig, start kubelet: workers join by TLS bootstrap")
	}
	if len(c.Addons) > 0 {
		add("addons", ThroughAPI, nil, "apply %s (server-side)", count(make([]string, len(c.Addons)), "user manifest"))
	}
	add("wait-ready", ThroughAPI, nil, "wait until every node is Ready and kube-system pods run")
	add("kubeconfig", OnWorkstation, nil, "write the admin kubeconfig to the state dir")
	return ts
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

func count(items []string, what string) string {
	if len(items) == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", len(items), what)
}
