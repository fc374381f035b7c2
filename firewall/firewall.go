// Package firewall is the one table of the ports a kforge cluster's nodes must let in, by role,
// and what a host's firewall (facts.Firewall) blocks of them, with the commands that open them.
//
// Ports only reached from the host itself are not in it: kube-controller-manager's and
// kube-scheduler's (bound to 127.0.0.1, as kubeadm binds them) and the node-local API proxy's
// (127.0.0.1; it reaches the masters' API servers, which are in the table).
package firewall

import (
	"fmt"
	"strings"

	"github.com/kforge/kforge/facts"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/scripts"
)

// Port is a range of ports one protocol of a node must let in, and what listens there.
type Port struct {
	facts.PortRange
	What string
}

// String is the port as firewalld spells it: "6443/tcp", "30000-32767/udp".
func (p Port) String() string {
	if p.From == p.To {
		return fmt.Sprintf("%d/%s", p.From, p.Proto)
	}
	return fmt.Sprintf("%d-%d/%s", p.From, p.To, p.Proto)
}

func port(proto string, from, to int, what string) Port {
	return Port{PortRange: facts.PortRange{Proto: proto, From: from, To: to}, What: what}
}

// For are the ports a node of role must let in, in cluster c (kubeadm's "Ports and Protocols",
// and what kforge adds: the pod network, the masters' registry).
func For(c *inventory.Cluster, role inventory.Role) []Port {
	var out []Port
	if role == inventory.RoleEtcd { // an external etcd's host: etcd alone, no Kubernetes node
		return []Port{port("tcp", 2379, 2380, "etcd (clients and peers)")}
	}
	if role == inventory.RoleMaster {
		out = append(out, port("tcp", pki.APIServerPort, pki.APIServerPort, "the API server"))
		if !c.ExternalEtcd() {
			out = append(out, port("tcp", 2379, 2380, "etcd (clients and peers)"))
		}
		if c.BundleFromMasters() {
			out = append(out, port("tcp", hostpath.RegistryPort, hostpath.RegistryPort, "the masters' registry of the bundle"))
		}
	}
	out = append(out,
		port("tcp", 10250, 10250, "kubelet"),
		port("tcp", 10256, 10256, "kube-proxy's health check"),
		port("tcp", 30000, 32767, "NodePort Services"),
		port("udp", 30000, 32767, "NodePort Services"))
	if c.Networking.Plugin == "flannel" {
		out = append(out, port("udp", 8472, 8472, "the pod network (flannel's VXLAN)"))
	}
	return out
}

// Blocked are the ports of want that fw does not let in.
func Blocked(fw facts.Firewall, want []Port) []Port {
	var out []Port
	for _, p := range want {
		if !fw.Allows(p.PortRange) {
			out = append(out, p)
		}
	}
	return out
}

// Sources are the subnets a node's firewall must let in whatever the port, and forward: the
// pods' (pod to pod across nodes once out of VXLAN, pods to their node) and the Services'
// (kube-proxy's rewritten connections), in each of a dual-stack cluster's families. An
// external etcd's host, no node, needs none.
func Sources(c *inventory.Cluster, role inventory.Role) []string {
	if role == inventory.RoleEtcd {
		return nil
	}
	return append(c.Networking.PodSubnets(), c.Networking.ServiceSubnets()...)
}

// Untrusted are the sources of want that fw does not let in. A firewall's rules drop what they
// do not let in even when kube-proxy's and flannel's own rules accept it: firewalld's nftables
// table, and ufw's iptables chains (with policy DROP for forwarded packets) once kube-proxy and
// flannel write nftables tables of their own (kube-proxy's nftables mode).
func Untrusted(fw facts.Firewall, want []string) []string {
	var out []string
	for _, s := range want {
		if !fw.Trusts(s) {
			out = append(out, s)
		}
	}
	return out
}

// Open is the host script (scripts/firewall-open.sh) that makes fw let in ports and sources for
// good, as `firewall: open` in the inventory asks.
func Open(fw facts.Firewall, ports []Port, sources []string) string {
	var ps []string
	for _, p := range ports {
		ps = append(ps, p.String())
	}
	return scripts.Command("firewall-open", "kind", fw.Kind, "zone", fw.Zone, "ports", scripts.Lines(ps), "sources", scripts.Lines(sources))
}

// OpenCommand is what a person runs to make a firewall of kind ("firewalld", "ufw") let in
// ports and sources for good: firewalld's permanent configuration, then a reload.
func OpenCommand(kind string, ports []Port, sources []string) string {
	var cmds []string
	switch kind {
	case "firewalld":
		var args []string
		for _, p := range ports {
			args = append(args, "--add-port="+p.String())
		}
		if len(args) > 0 {
			cmds = append(cmds, "firewall-cmd --permanent "+strings.Join(args, " "))
		}
		args = nil
		for _, s := range sources {
			args = append(args, "--add-source="+s)
		}
		if len(args) > 0 {
			cmds = append(cmds, "firewall-cmd --permanent --zone=trusted "+strings.Join(args, " "))
		}
		cmds = append(cmds, "firewall-cmd --reload")
	case "ufw":
		for _, p := range ports {
			cmds = append(cmds, "ufw allow "+strings.Replace(p.String(), "-", ":", 1))
		}
		for _, s := range sources {
			cmds = append(cmds, "ufw allow from "+s, "ufw route allow from "+s, "ufw route allow to "+s)
		}
	}
	return strings.Join(cmds, " && ")
}
