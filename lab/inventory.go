package lab

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/kforge/kforge/inventory"
)

// LabEvictionHard is the kubelet eviction thresholds of lab inventories.
const LabEvictionHard = "memory.available<100Mi,nodefs.available<1Gi,imagefs.available<1Gi,nodefs.inodesFree<5%"

// The subnets of a lab with IPv6 addresses: the inventory skeleton's cluster is dual-stack.
const (
	SkeletonPodSubnets     = inventory.DefaultPodSubnet + ",fd00:10:244::/56"
	SkeletonServiceSubnets = inventory.DefaultServiceSubnet + ",fd00:10:96::/112"
)

// inventory renders the lab's inventory skeleton: masters then workers, root over SSH with the
// lab's key and known_hosts, the load balancer as control-plane endpoint.
func (l *Lab) inventory() ([]byte, error) {
	c := inventory.Cluster{
		APIVersion: inventory.APIVersion,
		Kind:       inventory.Kind,
		Name:       l.Name,
		SSH: inventory.SSH{
			User:           "root",
			Port:           22,
			IdentityFile:   l.IdentityFile,
			KnownHostsFile: l.KnownHostsFile,
		},
	}
	if l.st.Hosts[0].Address6 != "" {
		c.Networking.PodSubnet, c.Networking.ServiceSubnet = SkeletonPodSubnets, SkeletonServiceSubnets
	}
	for _, h := range l.st.Hosts {
		ih := inventory.Host{Name: h.Name, Address: h.Address, IPv6Address: h.Address6}
		switch h.Role {
		case RoleMaster:
			c.Masters = append(c.Masters, ih)
		case RoleWorker:
			c.Workers = append(c.Workers, ih)
		case RoleLoadBalancer:
			c.ControlPlaneEndpoint = net.JoinHostPort(h.Address, strconv.Itoa(6443))
		}
	}
	// Several masters without the lab's load balancer: no endpoint, so every node reaches
	// them through its local API proxy; the workstation through the reserved VIP, if any.
	if l.st.VIP != "" && c.ControlPlaneEndpoint == "" && len(c.Masters) > 1 {
		c.ControlPlaneVIP = l.st.VIP
	}
	// nspawn hosts share this machine's kernel: kube-proxy must leave its conntrack table
	// alone, and with cgroup v1 here, kubelet must be allowed it (kforge gives kubelet
	// failCgroupV1: false only on hosts that are on cgroup v1: not on VM hosts). A lab of VMs
	// only, each with its own kernel, needs neither.
	if l.sharesKernel() {
		zero := 0
		c.KubeProxy.ConntrackMaxPerCore = &zero
		if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
			c.Kubelet.AllowCgroupV1 = true
		}
	}
	// They share this machine's disk too: kubelet's default eviction thresholds
	// (imagefs.available<15%, nodefs.available<10%) would measure a disk that build caches and
	// other labs fill, and evict every pod of the lab for it (seen: a 252 GiB disk with 31 GiB
	// free). Absolute thresholds keep the lab working until the disk is really short.
	c.Kubelet.ExtraArgs = map[string]string{"eviction-hard": LabEvictionHard}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Inventory skeleton for kforge lab %q, written by `kforge lab up`.\n# Hosts: %s\n", l.Name, l.Dir)
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&c); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// sharesKernel says whether a cluster host of the lab is an nspawn host, on this machine's kernel.
func (l *Lab) sharesKernel() bool {
	for _, h := range l.st.Hosts {
		if h.Role != RoleLoadBalancer && !h.VM {
			return true
		}
	}
	return false
}
