package preflight

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/facts"
	"github.com/kforge/kforge/inventory"
)

var t0 = time.Date(2026, 11, 21, 21, 0, 0, 0, time.UTC)

func cluster() *inventory.Cluster {
	c := &inventory.Cluster{
		Name:    "demo",
		SSH:     inventory.SSH{User: "root", Sudo: "auto"},
		Masters: []inventory.Host{{Name: "m1", Address: "198.51.100.10"}},
		Workers: []inventory.Host{{Name: "w1", Address: "198.51.100.11"}},
	}
	at(c, "v1.36.3")
	return c
}

// at puts c at Kubernetes version v, with v's release row (inventory.AtVersion).
func at(c *inventory.Cluster, v string) {
	cv, err := c.AtVersion(v)
	if err != nil {
		panic(err)
	}
	*c = *cv
}

// healthy returns the facts of a host every check passes.
func healthy(name string) *facts.Facts {
	bins := map[string]facts.Binary{"kubelet": {Path: "/usr/bin/kubelet", Version: "1.36.3", Output: "Kubernetes v1.36.3"}, "systemctl": {Path: "/usr/bin/systemctl", Version: "252"}}
	for _, c := range append(append([]string{}, RequiredCommands...), OptionalCommands...) {
		bins[c] = facts.Binary{Path: "/usr/bin/" + c, Version: "1.0"}
	}
	bins["containerd"] = facts.Binary{Path: "/usr/bin/containerd", Version: "2.1.4"}
	bins["nft"] = facts.Binary{Path: "/usr/sbin/nft", Version: "1.0.6"}
	return &facts.Facts{
		Host: name, Hostname: name, MachineID: "id-" + name,
		OS: facts.OS{ID: "debian", VersionID: "12"}, Arch: "x86_64", Kernel: "6.1.0-28-amd64", Systemd: true,
		CPUs: 2, MemoryBytes: 4 << 30,
		Cgroup: facts.Cgroup{Version: facts.CgroupV2, V2Controllers: []string{"cpu", "cpuset", "devices", "freezer", "hugetlb", "io", "memory", "pids"}},
		UID:    0, CapEff: 0x1ffffffffff,
		Sysctls:  map[string]string{"net.ipv4.ip_forward": "1", "net.bridge.bridge-nf-call-iptables": "1"},
		Binaries: bins,
		Runtime:  facts.Runtime{Socket: "/run/containerd/containerd.sock", SocketExists: true, Answering: true, Version: "v2.1.4"},
		Clock:    t0.Add(50 * time.Millisecond), Sent: t0, Received: t0.Add(100 * time.Millisecond),
	}
}

// dualStack makes the cluster dual-stack, w1's IPv6 address 2001:db8::11.
func dualStack(c *inventory.Cluster) {
	c.Networking.PodSubnet, c.Networking.ServiceSubnet = "10.244.0.0/16,fd00:10:244::/56", "10.96.0.0/12,fd00:10:96::/112"
	c.Masters[0].IPv6Address, c.Workers[0].IPv6Address = "2001:db8::10", "2001:db8::11"
}

// bundleFromMasters makes the masters serve the bundle to the other nodes.
func bundleFromMasters(c *inventory.Cluster) {
	c.Bundle, c.ContainerRuntime.Install = "b", inventory.RuntimeFromBundle
}

func healthyHosts() map[string]*facts.Facts {
	return map[string]*facts.Facts{"m1": healthy("m1"), "w1": healthy("w1")}
}

func TestHealthyClusterHasNoFindings(t *testing.T) {
	fs := Check(cluster(), healthyHosts(), Options{BundleArch: "amd64"})
	if len(fs) != 0 || fs.Err() != nil {
		t.Fatalf("findings on healthy hosts: %v", fs)
	}
}

func listener(port int, pid int, comm string) facts.Listener {
	return listenerAt("0.0.0.0", port, pid, comm)
}

// listenerAt is a socket listening on addr only.
func listenerAt(addr string, port int, pid int, comm string) facts.Listener {
	return facts.Listener{Addr: netip.MustParseAddr(addr), Port: port, Inode: uint64(port), PID: pid, Command: comm}
}

func kforgeMarker(cluster string) facts.Manifests {
	all := []string{"etcd.yaml", "kube-apiserver.yaml", "kube-controller-manager.yaml", "kube-scheduler.yaml"}
	return facts.Manifests{Exists: true, Entries: all, Marker: &facts.Marker{Cluster: cluster, Files: all}}
}

// TestChecks: for every check, facts (or inventory) that fail it and what the finding says;
// cases with want "" pass (no finding of that check on that host).
func TestChecks(t *testing.T) {
	for _, c := range []struct {
		name     string
		host     string
		facts    func(f *facts.Facts)
		cluster  func(c *inventory.Cluster)
		check    string
		severity Severity
		want     string // substring of Seen; "" = no finding of check on host
	}{
		{"root", "w1", func(f *facts.Facts) { f.UID = 1000 }, nil, CheckPrivilegedUser, Error, "commands run as uid 1000, not root"},
		{"old kernel", "m1", func(f *facts.Facts) { f.Kernel = "4.19.0-21-amd64" }, nil, CheckSystem, Error, "kernel 4.19.0-21-amd64 is not one kubeadm supports"},
		{"kernel 5.10", "m1", func(f *facts.Facts) { f.Kernel = "5.10.0-30-amd64" }, nil, CheckSystem, Error, ""},
		{"cgroup v1", "w1", func(f *facts.Facts) {
			f.Cgroup = facts.Cgroup{Version: facts.CgroupHybrid, V1Controllers: []string{"blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "hugetlb", "memory", "pids"}}
		}, nil, CheckSystem, Error, "cgroups are hybrid"},
		{"cgroup v1 allowed", "w1", func(f *facts.Facts) {
			f.Cgroup = facts.Cgroup{Version: facts.CgroupV1, V1Controllers: []string{"blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "hugetlb", "memory", "pids"}}
		}, func(c *inventory.Cluster) { c.Kubelet.AllowCgroupV1 = true }, CheckSystem, Warning, "allowed by kubelet.allowCgroupV1"},
		{"cgroup v1 missing pids", "w1", func(f *facts.Facts) {
			f.Cgroup = facts.Cgroup{Version: facts.CgroupV1, V1Controllers: []string{"cpu", "cpuacct", "cpuset", "devices", "freezer", "memory"}}
		}, func(c *inventory.Cluster) { c.Kubelet.AllowCgroupV1 = true }, CheckSystem, Error, "missing required cgroup controllers: pids"},
		{"cgroup v2 optional", "m1", func(f *facts.Facts) {
			f.Cgroup.V2Controllers = []string{"cpu", "cpuset", "devices", "freezer", "memory", "pids"}
		}, nil, CheckSystem, Warning, "missing optional cgroup controllers: hugetlb io"},
		{"no cgroups", "m1", func(f *facts.Facts) { f.Cgroup = facts.Cgroup{} }, nil, CheckSystem, Error, "no cgroup file system"},
		{"no systemd", "w1", func(f *facts.Facts) { f.Systemd = false }, nil, CheckInitSystem, Error, "PID 1 is not systemd"},
		{"cpus master", "m1", func(f *facts.Facts) { f.CPUs = 1 }, nil, CheckNumCPU, Error, "the number of available CPUs 1 is less than the required 2"},
		{"cpus worker", "w1", func(f *facts.Facts) { f.CPUs = 1 }, nil, CheckNumCPU, Error, ""},
		{"memory master", "m1", func(f *facts.Facts) { f.MemoryBytes = 1600 << 20 }, nil, CheckMem, Error, "the system RAM (1600 MB) is less than the minimum 1700 MB"},
		{"memory exactly", "m1", func(f *facts.Facts) { f.MemoryBytes = 1700 << 20 }, nil, CheckMem, Error, ""},
		{"memory worker", "w1", func(f *facts.Facts) { f.MemoryBytes = 512 << 20 }, nil, CheckMem, Error, ""},
		{"swap", "w1", func(f *facts.Facts) {
			f.Swap = facts.Swap{On: true, TotalBytes: 2 << 30, Devices: []string{"/dev/sda2"}}
		}, nil, CheckSwap, Error, "swap is on (2048 MiB on /dev/sda2)"},
		{"swap tolerated", "w1", func(f *facts.Facts) {
			f.Swap = facts.Swap{On: true, TotalBytes: 2 << 30, Devices: []string{"/swapfile"}}
		},
			func(c *inventory.Cluster) { c.Kubelet.ExtraArgs = map[string]string{"--fail-swap-on": "False"} }, CheckSwap, Warning, "fail-swap-on=false"},
		{"required command", "m1", func(f *facts.Facts) { delete(f.Binaries, "losetup") }, nil, CommandCheck("losetup"), Error, "losetup not found in system path"},
		{"optional command", "m1", func(f *facts.Facts) { delete(f.Binaries, "socat") }, nil, CommandCheck("socat"), Warning, "socat not found"},
		{"node IP held", "w1", func(f *facts.Facts) { f.Addrs = map[string]string{"198.51.100.11": "eth0"} }, nil, CheckNodeIP, Error, ""},
		{"node IP not gathered", "w1", func(f *facts.Facts) { f.Addrs = nil }, nil, CheckNodeIP, Error, ""},
		{"node IP not held", "w1", func(f *facts.Facts) { f.Addrs = map[string]string{"192.168.9.3": "eth1", "10.0.0.7": "eth0"} }, nil, CheckNodeIP, Error,
			"no interface holds 198.51.100.11, the node's address (kubelet's --node-ip): the host has 10.0.0.7, 192.168.9.3"},
		{"internal address not held", "w1", func(f *facts.Facts) { f.Addrs = map[string]string{"198.51.100.11": "eth0"} },
			func(c *inventory.Cluster) { c.Workers[0].InternalAddress = "10.1.0.11" }, CheckNodeIP, Error, "no interface holds 10.1.0.11, the node's internalAddress"},
		{"IPv6 address not held", "w1", func(f *facts.Facts) { f.Addrs = map[string]string{"198.51.100.11": "eth0"} }, dualStack, CheckNodeIP, Error,
			"no interface holds 2001:db8::11, the node's ipv6Address"},
		{"dual-stack on two interfaces", "w1", func(f *facts.Facts) { f.Addrs = map[string]string{"198.51.100.11": "eth0", "2001:db8::11": "eth1"} }, dualStack, CheckNodeIP, Error,
			"the node's IPv4 address 198.51.100.11 is on eth0 and its IPv6 address 2001:db8::11 on eth1"},
		{"made dual-stack", "w1", func(f *facts.Facts) { f.KubeletNodeIP = "198.51.100.11" }, dualStack, CheckNodeIP, Error,
			"kubelet runs with --node-ip=198.51.100.11: the cluster is single-stack, and the inventory makes it dual-stack"},
		{"made single-stack", "w1", func(f *facts.Facts) { f.KubeletNodeIP = "198.51.100.11,2001:db8::11" }, nil, CheckNodeIP, Error,
			"the cluster is dual-stack, and the inventory makes it single-stack"},
		{"still dual-stack", "w1", func(f *facts.Facts) { f.KubeletNodeIP = "198.51.100.11,2001:db8::11" }, dualStack, CheckNodeIP, Error, ""},
		{"dual-stack on one interface", "w1", func(f *facts.Facts) { f.Addrs = map[string]string{"198.51.100.11": "eth0", "2001:db8::11": "eth0"} }, dualStack, CheckNodeIP, Error, ""},
		{"service subnet routed", "w1", func(f *facts.Facts) { f.ServiceRoute = facts.RouteCovered }, nil, CheckServiceRoute, Info, ""},
		{"service subnet unrouted", "w1", func(f *facts.Facts) { f.ServiceRoute = facts.RouteMissing }, nil, CheckServiceRoute, Info, "no route covers the service subnet 10.96.0.0/12"},
		{"resolv.conf upstream", "w1", func(f *facts.Facts) { f.Resolver = facts.Resolver{Nameservers: []string{"192.0.2.53"}} }, nil, CheckResolvConf, Error, ""},
		{"systemd-resolved's stub: its upstream file", "w1", func(f *facts.Facts) {
			f.Resolver = facts.Resolver{Nameservers: []string{"127.0.0.53"}, Resolved: true}
			f.Files = map[string]string{facts.ResolvedUpstream: "ab"}
		}, nil, CheckResolvConf, Error, ""},
		{"systemd-resolved's stub without its upstream file", "w1", func(f *facts.Facts) {
			f.Resolver = facts.Resolver{Nameservers: []string{"127.0.0.53"}, Resolved: true}
		}, nil, CheckResolvConf, Error, "/etc/resolv.conf names only 127.0.0.53, a resolver on the host itself, which pods cannot reach: kubelet would give pods this file, and CoreDNS would forward to itself"},
		{"a local resolver", "w1", func(f *facts.Facts) { f.Resolver = facts.Resolver{Nameservers: []string{"127.0.0.1"}} }, nil, CheckResolvConf, Error, "names only 127.0.0.1"},
		{"a local resolver, kubelet.resolvConf set", "w1", func(f *facts.Facts) { f.Resolver = facts.Resolver{Nameservers: []string{"127.0.0.1"}} },
			func(c *inventory.Cluster) { c.Kubelet.ResolvConf = "/etc/kforge/upstream.conf" }, CheckResolvConf, Error, ""},
		{"service subnet unrouted without ip", "w1", func(f *facts.Facts) { f.ServiceRoute = facts.RouteMissing; delete(f.Binaries, "ip") }, nil, CheckServiceRoute, Error, "kforge cannot add the route: ip is not installed"},
		{"no kubelet", "w1", func(f *facts.Facts) { delete(f.Binaries, "kubelet") }, nil, CommandCheck("kubelet"), Error, "no bundle to install it from"},
		{"no kubelet, bundle", "w1", func(f *facts.Facts) { delete(f.Binaries, "kubelet") }, func(c *inventory.Cluster) { c.Bundle = "bundle" }, CommandCheck("kubelet"), Error, ""},
		{"runtime down", "w1", func(f *facts.Facts) { f.Runtime.SocketExists, f.Runtime.Answering = false, false }, nil, CheckCRI, Error, "no socket at /run/containerd/containerd.sock"},
		{"runtime silent", "w1", func(f *facts.Facts) {
			f.Runtime.Answering, f.Runtime.Error = false, "Client:\n  Version: 1.6.20\nctr: failed to dial \"/run/containerd/containerd.sock\": connection refused"
		}, nil, CheckCRI, Error, "does not answer: ctr: failed to dial"},
		{"containerd 1.x", "w1", func(f *facts.Facts) { f.Runtime.Version = "1.6.20~ds1" }, nil, CheckRuntimeVersion, Warning, "containerd 1.6.20"},
		// Upgrades, of one minor or several, are apply's upgrade step's to walk (tasks).
		{"upgrade one minor", "m1", func(f *facts.Facts) {
			f.KubeletDropIn, f.Binaries["kubelet"] = true, facts.Binary{Path: "/usr/bin/kubelet", Version: "1.35.4"}
		}, func(c *inventory.Cluster) { c.Bundle = "b" }, CheckUpgradeRoute, Warning, ""},
		{"upgrade two minors", "m1", func(f *facts.Facts) {
			f.KubeletDropIn, f.Binaries["kubelet"] = true, facts.Binary{Path: "/usr/bin/kubelet", Version: "1.35.4"}
		}, func(c *inventory.Cluster) { c.Bundle = "b"; at(c, "v1.37.2") }, CheckUpgradeRoute, Error, ""},
		{"downgrade", "m1", func(f *facts.Facts) {
			f.KubeletDropIn, f.Binaries["kubelet"] = true, facts.Binary{Path: "/usr/bin/kubelet", Version: "1.37.2"}
		}, func(c *inventory.Cluster) { c.Bundle = "b" }, CheckUpgradeRoute, Error, "the cluster runs v1.37.2; the inventory's v1.36.3 is a downgrade"},
		{"same version", "m1", func(f *facts.Facts) {
			f.KubeletDropIn, f.Binaries["kubelet"] = true, facts.Binary{Path: "/usr/bin/kubelet", Version: "1.36.3"}
		}, func(c *inventory.Cluster) { c.Bundle = "b" }, CheckUpgradeRoute, Error, ""},
		{"two masters", "m1", nil, func(c *inventory.Cluster) {
			c.Masters = append(c.Masters, inventory.Host{Name: "w1", Address: "198.51.100.11"}) // a second master (with w1's facts)
			c.ControlPlaneEndpoint = "lb:6443"
		}, CheckEtcdQuorum, Warning, "2 masters run 2 stacked etcd members, and N members tolerate (N-1)/2 failures, rounded down: 2 tolerate none, as 1 does, and lose quorum when either master fails; use an odd number: 1, 3 or 5 masters"},
		{"one master", "m1", nil, nil, CheckEtcdQuorum, Warning, ""},
		{"containerd 1.x on 1.37", "w1", func(f *facts.Facts) { f.Runtime.Version = "1.7.24" },
			func(c *inventory.Cluster) { at(c, "v1.37.2") }, CheckRuntimeVersion, Error, "containerd 1.7.24: kubelet v1.37 needs containerd 2.0 or later"},
		{"containerd 2 on 1.37", "w1", func(f *facts.Facts) { f.Runtime.Version = "2.1.4" },
			func(c *inventory.Cluster) { at(c, "v1.37.2") }, CheckRuntimeVersion, Error, ""},
		{"kubelet newer", "w1", func(f *facts.Facts) {
			f.Binaries["kubelet"] = facts.Binary{Path: "/usr/bin/kubelet", Version: "1.37.0"}
		}, nil, CheckKubeletVersion, Error, "v1.37.0 is higher than the control plane version v1.36.3"},
		{"kubelet too old", "w1", func(f *facts.Facts) {
			f.Binaries["kubelet"] = facts.Binary{Path: "/usr/bin/kubelet", Version: "1.32.9"}
		}, nil, CheckKubeletVersion, Error, "more than 3 minors older"},
		{"kubelet skew ok", "w1", func(f *facts.Facts) {
			f.Binaries["kubelet"] = facts.Binary{Path: "/usr/bin/kubelet", Version: "1.33.0"}
		}, nil, CheckKubeletVersion, Info, "a supported skew"},
		{"kubelet unreadable", "w1", func(f *facts.Facts) {
			f.Binaries["kubelet"] = facts.Binary{Path: "/usr/bin/kubelet", Output: "Segmentation fault"}
		}, nil, CheckKubeletVersion, Error, `it printed "Segmentation fault"`},
		{"kubelet elsewhere, bundle", "w1", func(f *facts.Facts) {
			f.Binaries["kubelet"] = facts.Binary{Path: "/usr/local/bin/kubelet", Version: "1.30.0"}
		},
			func(c *inventory.Cluster) { c.Bundle = "b" }, CheckKubeletVersion, Warning, "at /usr/local/bin/kubelet"},
		{"kubelet replaced by bundle", "w1", func(f *facts.Facts) {
			f.Binaries["kubelet"] = facts.Binary{Path: "/usr/bin/kubelet", Version: "1.30.0"}
		},
			func(c *inventory.Cluster) { c.Bundle = "b" }, CheckKubeletVersion, Error, ""},
		{"hostname invalid", "w1", func(f *facts.Facts) { f.Hostname = "W1_box" }, nil, CheckHostname, Warning, `hostname "W1_box" is not a valid DNS name`},
		{"hostname differs", "w1", func(f *facts.Facts) { f.Hostname = "box-17" }, nil, CheckHostname, Info, "--hostname-override=w1"},
		{"node name invalid", "w1", nil, func(c *inventory.Cluster) { c.Workers[0].Name = "W1" }, CheckHostname, Error, `node name "W1" is not a valid Kubernetes node name`},
		{"port taken", "m1", func(f *facts.Facts) { f.Listeners = []facts.Listener{listener(6443, 812, "nginx")} }, nil, PortCheck(6443), Error, "port 6443 is in use: 0.0.0.0:6443 by PID 812 (nginx)"},
		{"port owner unknown", "m1", func(f *facts.Facts) { f.Listeners = []facts.Listener{listener(2380, 0, "")} }, nil, PortCheck(2380), Error, "port 2380 is in use: 0.0.0.0:2380"},
		{"API proxy port taken", "w1", func(f *facts.Facts) { f.Listeners = []facts.Listener{listener(6444, 77, "haproxy")} }, func(c *inventory.Cluster) {
			c.Masters = append(c.Masters, inventory.Host{Name: "w1", Address: "198.51.100.11"}) // a second master (with w1's facts)
			c.APIProxy.Port = 6444
		}, CheckAPIProxyPort, Error, "port 6444, the node-local API proxy's (several masters, no controlPlaneEndpoint), is in use: 0.0.0.0:6444 by PID 77 (haproxy)"},
		{"API proxy port ours", "w1", func(f *facts.Facts) { f.Listeners = []facts.Listener{listener(6444, 77, "kforge-apiproxy")} }, func(c *inventory.Cluster) {
			c.Masters = append(c.Masters, inventory.Host{Name: "w1", Address: "198.51.100.11"}) // a second master (with w1's facts)
			c.APIProxy.Port = 6444
		}, CheckAPIProxyPort, Info, "kforge's own API proxy"},
		{"API proxy port with an endpoint", "w1", func(f *facts.Facts) { f.Listeners = []facts.Listener{listener(6444, 77, "haproxy")} }, func(c *inventory.Cluster) {
			c.Masters = append(c.Masters, inventory.Host{Name: "w1", Address: "198.51.100.11"})
			c.ControlPlaneEndpoint, c.APIProxy.Port = "lb:6443", 6444
		}, CheckAPIProxyPort, Error, ""},
		{"registry port taken", "m1", func(f *facts.Facts) { f.Listeners = []facts.Listener{listener(5000, 41, "docker-proxy")} }, bundleFromMasters,
			CheckRegistryPort, Warning, "port 5000, the registry's, from which the other nodes take the bundle, is in use: 0.0.0.0:5000 by PID 41 (docker-proxy)"},
		{"registry port ours", "m1", func(f *facts.Facts) { f.Listeners = []facts.Listener{listener(5000, 41, "kforge-registry")} }, bundleFromMasters, CheckRegistryPort, Warning, ""},
		{"registry port on loopback", "m1", func(f *facts.Facts) { f.Listeners = []facts.Listener{listenerAt("127.0.0.1", 5000, 41, "python3")} }, bundleFromMasters, CheckRegistryPort, Warning, ""},
		{"registry port on the node's address", "m1", func(f *facts.Facts) { f.Listeners = []facts.Listener{listenerAt("198.51.100.10", 5000, 41, "nginx")} }, bundleFromMasters, CheckRegistryPort, Warning, "is in use: 198.51.100.10:5000 by PID 41 (nginx)"},
		{"registry port on another address", "m1", func(f *facts.Facts) { f.Listeners = []facts.Listener{listenerAt("198.51.100.99", 5000, 41, "nginx")} }, bundleFromMasters, CheckRegistryPort, Warning, ""},
		{"registry fill port taken", "m1", func(f *facts.Facts) { f.Listeners = []facts.Listener{listenerAt("127.0.0.1", 5001, 42, "python3")} }, bundleFromMasters, CheckRegistryPort, Warning, "port 5001, where kforge fills the registry (127.0.0.1:5001), is in use: 127.0.0.1:5001 by PID 42 (python3)"},
		{"registry fill port elsewhere", "m1", func(f *facts.Facts) { f.Listeners = []facts.Listener{listenerAt("198.51.100.10", 5001, 42, "python3")} }, bundleFromMasters, CheckRegistryPort, Warning, ""},
		{"registry port without the masters' registry", "m1", func(f *facts.Facts) { f.Listeners = []facts.Listener{listener(5000, 41, "docker-proxy")} }, nil, CheckRegistryPort, Warning, ""},
		{"registry port on worker", "w1", func(f *facts.Facts) { f.Listeners = []facts.Listener{listener(5000, 41, "docker-proxy")} }, bundleFromMasters, CheckRegistryPort, Warning, ""},
		{"no curl on a master", "m1", nil, bundleFromMasters, CommandCheck("curl"), Warning, "curl not found in system path: this host cannot fill its registry"},
		{"no curl on a worker", "w1", nil, bundleFromMasters, CommandCheck("curl"), Warning, "this host cannot take the bundle from the masters' registries, so the workstation uploads to it instead"},
		{"curl", "w1", func(f *facts.Facts) { f.Binaries["curl"] = facts.Binary{Path: "/usr/bin/curl", Version: "7.88.1"} }, bundleFromMasters, CommandCheck("curl"), Warning, ""},
		{"no curl without the masters' registry", "w1", nil, nil, CommandCheck("curl"), Warning, ""},
		{"master port on worker", "w1", func(f *facts.Facts) { f.Listeners = []facts.Listener{listener(6443, 812, "nginx")} }, nil, PortCheck(6443), Error, ""},
		{"kubelet port on worker", "w1", func(f *facts.Facts) { f.Listeners = []facts.Listener{listener(10250, 99, "kubelet")} }, nil, PortCheck(10250), Error, "port 10250 is in use"},
		{"kforge's kubelet", "w1", func(f *facts.Facts) {
			f.Listeners = []facts.Listener{listener(10250, 99, "kubelet")}
			f.KubeletDropIn = true
		}, nil, PortCheck(10250), Info, "kforge's own kubelet"},
		{"kforge's apiserver", "m1", func(f *facts.Facts) {
			f.Listeners = []facts.Listener{listener(6443, 900, "kube-apiserver")}
			f.Manifests = kforgeMarker("demo")
		}, nil, PortCheck(6443), Info, "kforge's own kube-apiserver"},
		{"kubeadm's apiserver", "m1", func(f *facts.Facts) {
			f.Listeners = []facts.Listener{listener(6443, 900, "kube-apiserver")}
			f.Manifests = facts.Manifests{Exists: true, Entries: []string{"kube-apiserver.yaml"}}
		}, nil, PortCheck(6443), Error, "by PID 900 (kube-apiserver)"},
		{"other cluster's apiserver", "m1", func(f *facts.Facts) {
			f.Listeners = []facts.Listener{listener(6443, 900, "kube-apiserver")}
			f.Manifests = kforgeMarker("prod")
		}, nil, PortCheck(6443), Error, "port 6443 is in use"},
		{"impostor on apiserver port", "m1", func(f *facts.Facts) {
			f.Listeners = []facts.Listener{listener(6443, 900, "kube-apiserver"), {Addr: netip.MustParseAddr("::"), Port: 6443, PID: 5, Command: "haproxy"}}
			f.Manifests = kforgeMarker("demo")
		}, nil, PortCheck(6443), Error, "(haproxy)"},
		{"manifests foreign", "m1", func(f *facts.Facts) {
			f.Manifests = facts.Manifests{Exists: true, Entries: []string{"kube-apiserver.yaml", "kube-vip.yaml"}}
		}, nil, CheckManifestsDir, Error, "not kforge's: kube-apiserver.yaml, kube-vip.yaml"},
		{"manifests plus extra", "m1", func(f *facts.Facts) {
			f.Manifests = kforgeMarker("demo")
			f.Manifests.Entries = append(f.Manifests.Entries, "kube-vip.yaml")
		}, nil, CheckManifestsDir, Error, "not kforge's: kube-vip.yaml"},
		{"manifests kforge's", "m1", func(f *facts.Facts) { f.Manifests = kforgeMarker("demo") }, nil, CheckManifestsDir, Error, ""},
		{"manifests empty", "w1", func(f *facts.Facts) { f.Manifests = facts.Manifests{Exists: true} }, nil, CheckManifestsDir, Error, ""},
		{"manifests other cluster", "m1", func(f *facts.Facts) { f.Manifests = kforgeMarker("prod") }, nil, CheckManifestsDir, Error, `another kforge cluster, "prod"`},
		{"manifests on worker", "w1", func(f *facts.Facts) { f.Manifests = facts.Manifests{Exists: true, Entries: []string{"nginx.yaml"}} }, nil, CheckManifestsDir, Error, "not kforge's: nginx.yaml"},
		{"etcd data", "m1", func(f *facts.Facts) { f.EtcdDataDir = []string{"member"} }, nil, CheckEtcdDataDir, Error, "/var/lib/etcd is not empty (member)"},
		{"etcd data kforge's", "m1", func(f *facts.Facts) { f.EtcdDataDir = []string{"member"}; f.Manifests = kforgeMarker("demo") }, nil, CheckEtcdDataDir, Error, ""},
		{"etcd data on worker", "w1", func(f *facts.Facts) { f.EtcdDataDir = []string{"member"} }, nil, CheckEtcdDataDir, Error, ""},
		{"ip_forward off", "w1", func(f *facts.Facts) { f.Sysctls["net.ipv4.ip_forward"] = "0" }, nil, CheckIPForward, Info, "kforge sets it to 1"},
		{"ip_forward unreadable", "w1", func(f *facts.Facts) { delete(f.Sysctls, "net.ipv4.ip_forward") }, nil, CheckIPForward, Error, "cannot be read"},
		{"bridge-nf off", "m1", func(f *facts.Facts) { f.Sysctls["net.bridge.bridge-nf-call-iptables"] = "0" }, nil, CheckBridgeNF, Info, "kforge sets it to 1"},
		{"no br_netfilter", "m1", func(f *facts.Facts) { delete(f.Sysctls, "net.bridge.bridge-nf-call-iptables") }, nil, CheckBridgeNF, Error, "br_netfilter module is not loaded"},
		{"overlay missing", "w1", func(f *facts.Facts) { f.Modules = map[string]string{"overlay": "missing", "br_netfilter": "loaded"} }, nil, CheckKernelModules, Error, "kernel module overlay is neither loaded nor loadable"},
		{"br_netfilter loadable", "m1", func(f *facts.Facts) {
			f.Modules = map[string]string{"overlay": "loaded", "br_netfilter": "loadable"}
			delete(f.Sysctls, "net.bridge.bridge-nf-call-iptables")
		}, nil, CheckKernelModules, Info, "kernel module br_netfilter is not loaded; kforge loads it"},
		{"br_netfilter loadable is no bridge-nf error", "m1", func(f *facts.Facts) {
			f.Modules = map[string]string{"overlay": "loaded", "br_netfilter": "loadable"}
			delete(f.Sysctls, "net.bridge.bridge-nf-call-iptables")
		}, nil, CheckBridgeNF, Error, ""},
		{"br_netfilter missing", "w1", func(f *facts.Facts) {
			f.Modules = map[string]string{"overlay": "loaded", "br_netfilter": "missing"}
			delete(f.Sysctls, "net.bridge.bridge-nf-call-iptables")
		}, nil, CheckKernelModules, Error, "kernel module br_netfilter is neither loaded nor loadable"},
		{"clock far behind", "w1", func(f *facts.Facts) { f.Clock = t0.Add(-10 * time.Minute) }, nil, CheckClockSkew, Error, "10m0.05s behind the workstation's (±50ms)"},
		{"clock ahead", "w1", func(f *facts.Facts) { f.Clock = t0.Add(3 * time.Second) }, nil, CheckClockSkew, Warning, "2.95s ahead of"},
		{"clock within uncertainty", "w1", func(f *facts.Facts) { f.Clock, f.Received = t0.Add(2500*time.Millisecond), t0.Add(4*time.Second) }, nil, CheckClockSkew, Warning, ""},
		{"no CAP_SYS_RESOURCE", "w1", func(f *facts.Facts) { f.CapEff = 0x1fffeffffff }, nil, CheckCapSysResource, Info, "restrict_oom_score_adj"},
		{"arch", "w1", func(f *facts.Facts) { f.Arch = "aarch64" }, nil, CheckArch, Error, "the host is aarch64 but the bundle's binaries are linux/amd64"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := cluster()
			hosts := healthyHosts()
			if c.cluster != nil {
				c.cluster(cl)
				if cl.Workers[0].Name != "w1" { // the node was renamed
					hosts[cl.Workers[0].Name] = hosts["w1"]
					c.host = cl.Workers[0].Name
				}
			}
			if c.facts != nil {
				c.facts(hosts[c.host])
			}
			fs := Check(cl, hosts, Options{BundleArch: "amd64"})
			var got []Finding
			for _, f := range fs {
				if f.Check == c.check && f.Host == c.host {
					got = append(got, f)
				}
			}
			if c.want == "" {
				if len(got) > 0 {
					t.Fatalf("want no %s finding on %s, got %v", c.check, c.host, got)
				}
				return
			}
			var f *Finding
			for i := range got {
				if strings.Contains(got[i].Seen, c.want) {
					f = &got[i]
				}
			}
			if f == nil {
				t.Fatalf("no %s finding on %s says %q; got %v", c.check, c.host, c.want, got)
			}
			if f.Severity != c.severity {
				t.Errorf("got %s, want severity %s", f, c.severity)
			}
			if f.Severity == Error && f.Fix == "" {
				t.Errorf("%s has no fix", f)
			}
			if (f.Severity == Error) != (fs.Err() != nil) {
				t.Errorf("Err() = %v with findings %v", fs.Err(), fs)
			}
		})
	}
}

func TestCrossHostDuplicates(t *testing.T) {
	c := cluster()
	c.Workers = append(c.Workers, inventory.Host{Name: "w2", Address: "198.51.100.12"})
	hosts := healthyHosts()
	hosts["w2"] = healthy("w2")
	hosts["w1"].Hostname = "M1" // case-insensitively m1's
	hosts["w2"].MachineID = hosts["m1"].MachineID
	fs := Check(c, hosts, Options{})
	want := []string{
		`[ERROR Hostname] m1: hostname "m1" is also the hostname of w1`,
		`[ERROR MachineID] m1: machine-id id-m1 is also the machine-id of w2: one machine listed twice, or cloned machines`,
		`[ERROR Hostname] w1: hostname "M1" is also the hostname of m1`,
		`[ERROR MachineID] w2: machine-id id-m1 is also the machine-id of m1: one machine listed twice, or cloned machines`,
	}
	var got []string
	for _, f := range fs.Errors() {
		got = append(got, f.String())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestMissingFacts(t *testing.T) {
	hosts := healthyHosts()
	delete(hosts, "w1")
	ig, _ := ParseIgnore([]string{"all"})
	fs := Check(cluster(), hosts, Options{Ignore: ig})
	if len(fs) != 1 || fs[0].Host != "w1" || fs[0].Check != "Facts" || fs[0].Severity != Error {
		t.Errorf("findings %v, want Facts (which cannot be ignored)", fs)
	}
	var fe *FailedError
	if !errors.As(fs.Err(), &fe) || strings.Contains(strings.Join(fe.Details(), "\n"), "--ignore-preflight-errors") {
		t.Errorf("details suggest ignoring what cannot be: %v", fs.Err())
	}
}

// TestOrderAndAllHosts: every host is checked and findings come host by host in inventory
// order, whatever the order of the checks that found them.
func TestOrderAndAllHosts(t *testing.T) {
	hosts := healthyHosts()
	hosts["m1"].UID = 1000
	hosts["m1"].Swap = facts.Swap{On: true, Devices: []string{"/swap"}}
	hosts["w1"].UID = 1000
	hosts["w1"].Hostname = "m1"
	fs := Check(cluster(), hosts, Options{})
	var got []string
	for _, f := range fs {
		got = append(got, f.Host+"/"+f.Check)
	}
	want := "m1/IsPrivilegedUser m1/Swap m1/Hostname w1/IsPrivilegedUser w1/Hostname w1/Hostname"
	if strings.Join(got, " ") != want {
		t.Errorf("order %v, want %s", got, want)
	}
}

func TestIgnore(t *testing.T) {
	hosts := healthyHosts()
	hosts["m1"].Listeners = []facts.Listener{listener(6443, 1, "nginx")}
	hosts["w1"].Swap = facts.Swap{On: true, Devices: []string{"/swap"}}

	ig, err := ParseIgnore([]string{"port-6443,SWAP"})
	if err != nil {
		t.Fatal(err)
	}
	fs := Check(cluster(), hosts, Options{Ignore: ig})
	if err := fs.Err(); err != nil {
		t.Fatalf("errors left: %v", err)
	}
	if ws := fs.Warnings(); len(ws) != 2 || !ws[0].Ignored || !strings.HasPrefix(ws[0].String(), "[WARNING (ignored error) Port-6443] m1: ") {
		t.Errorf("warnings %v", ws)
	}

	ig, _ = ParseIgnore([]string{"Swap"})
	if errs := Check(cluster(), hosts, Options{Ignore: ig}).Errors(); len(errs) != 1 || errs[0].Check != "Port-6443" {
		t.Errorf("with Swap ignored, errors %v", errs)
	}
	ig, _ = ParseIgnore([]string{"all"})
	if err := Check(cluster(), hosts, Options{Ignore: ig}).Err(); err != nil {
		t.Errorf("all: %v", err)
	}
	hosts["w1"].Arch = "s390x"
	ig, _ = ParseIgnore([]string{"arch", "swap"})
	if errs := Check(cluster(), hosts, Options{Ignore: ig, BundleArch: "amd64"}).Errors(); len(errs) != 1 || errs[0].Check != "Port-6443" {
		t.Errorf("with Arch and Swap ignored, errors %v", errs)
	}

	for in, want := range map[string]string{
		"all,Swap":    "together with 'all'",
		"Prot-6443":   "unknown check prot-6443",
		"Port-1234":   "unknown check port-1234",
		"Swap,,Bogus": "unknown check bogus",
	} {
		if _, err := ParseIgnore([]string{in}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseIgnore(%q) = %v, want %q", in, err, want)
		}
	}
	for _, n := range CheckNames() {
		if _, err := ParseIgnore([]string{n}); err != nil {
			t.Errorf("ParseIgnore(%q): %v", n, err)
		}
	}
}

func TestFailedError(t *testing.T) {
	hosts := healthyHosts()
	hosts["m1"].Listeners = []facts.Listener{listener(6443, 812, "nginx")}
	hosts["w1"].Swap = facts.Swap{On: true, TotalBytes: 1 << 30, Devices: []string{"/dev/sda2"}}
	hosts["w1"].Sysctls["net.ipv4.ip_forward"] = "0"
	err := fmt.Errorf("apply: %w", Check(cluster(), hosts, Options{}).Err())

	var fe *FailedError
	if !errors.As(err, &fe) || fe.ExitCode() != 3 {
		t.Fatalf("error %v is not a FailedError with exit code 3", err)
	}
	if fe.Error() != "preflight failed: 2 errors on m1, w1" {
		t.Errorf("Error() = %q", fe.Error())
	}
	want := []string{
		"preflight failed: 2 errors on 2 hosts (every host was checked; nothing was changed)",
		"[ERROR Port-6443] m1: port 6443 is in use: 0.0.0.0:6443 by PID 812 (nginx)",
		"    fix: stop what listens on port 6443 (it is kube-apiserver's port), or reset a node of another cluster first (kubeadm reset / kforge reset)",
		"[ERROR Swap] w1: swap is on (1024 MiB on /dev/sda2); kubelet refuses to start with swap unless configured for it",
		`    fix: turn swap off (swapoff -a, and remove swap from /etc/fstab), or let kubelet run with it: kubelet.extraArgs: {fail-swap-on: "false"} in the inventory`,
		"If you know what you are doing, make a check non-fatal with --ignore-preflight-errors=Port-6443,Swap",
	}
	if got := fe.Details(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Details\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestFindingJSON(t *testing.T) {
	b, err := json.Marshal(Finding{Host: "m1", Check: "Swap", Severity: Warning, Seen: "swap is on", Fix: "swapoff -a", Ignored: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"host":"m1","check":"Swap","severity":"WARNING","seen":"swap is on","fix":"swapoff -a","ignored":true}`; string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
}

// BenchmarkCheck100Hosts: the central evaluation of 3 masters and 97 workers.
func BenchmarkCheck100Hosts(b *testing.B) {
	c := cluster()
	c.Masters, c.Workers = nil, nil
	hosts := map[string]*facts.Facts{}
	for i := range 100 {
		name := fmt.Sprintf("n%d", i)
		if i < 3 {
			c.Masters = append(c.Masters, inventory.Host{Name: name})
		} else {
			c.Workers = append(c.Workers, inventory.Host{Name: name})
		}
		hosts[name] = healthy(name)
	}
	for b.Loop() {
		if err := Check(c, hosts, Options{}).Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/100, "µs/host")
}

// TestControlPlaneVIP: a VIP no master reaches without a gateway is refused on that master; a
// VIP that answers ARP while no master holds it is refused, naming the MAC; a VIP a master
// holds (a later run), or nobody answers for, passes.
func TestControlPlaneVIP(t *testing.T) {
	c := cluster()
	c.Masters = append(c.Masters, inventory.Host{Name: "m2", Address: "198.51.100.12"})
	c.ControlPlaneVIP = "198.51.100.50"
	errorsOf := func(set func(m1, m2 *facts.Facts)) []string {
		hosts := healthyHosts()
		hosts["m2"] = healthy("m2")
		hosts["m1"].VIP = facts.VIP{Device: "eth0"}
		hosts["m2"].VIP = facts.VIP{Device: "eth0"}
		set(hosts["m1"], hosts["m2"])
		var out []string
		for _, f := range Check(c, hosts, Options{}).Errors() {
			out = append(out, f.String())
		}
		return out
	}
	for _, tc := range []struct {
		name string
		set  func(m1, m2 *facts.Facts)
		want []string
	}{
		{"free, in the subnet", func(_, _ *facts.Facts) {}, nil},
		{"held by a master", func(m1, m2 *facts.Facts) { m1.VIP = facts.VIP{Here: true}; m2.VIP.Neighbour = "52:54:00:00:00:01" }, nil},
		{"outside a master's subnet", func(_, m2 *facts.Facts) { m2.VIP = facts.VIP{} },
			[]string{"[ERROR ControlPlaneVIP] m2: controlPlaneVIP 198.51.100.50 is not in the subnet of any interface of this master (ip route get 198.51.100.50: through a gateway, or no route)"}},
		{"in use by a stranger", func(m1, m2 *facts.Facts) {
			m1.VIP.Neighbour = "52:54:00:aa:bb:cc"
			m2.VIP.Neighbour = "52:54:00:aa:bb:cc"
		},
			[]string{"[ERROR ControlPlaneVIP] m1: controlPlaneVIP 198.51.100.50 is in use: 52:54:00:aa:bb:cc answered ARP for it, and no master holds it"}},
	} {
		if got := errorsOf(tc.set); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s: errors\n%s\nwant\n%s", tc.name, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
	c.ControlPlaneVIP = ""
	if got := errorsOf(func(m1, _ *facts.Facts) { m1.VIP = facts.VIP{} }); len(got) != 0 {
		t.Errorf("without a VIP: %v", got)
	}
}

// TestResolvConfMessage: the whole message of a host whose resolv.conf names only its own stub
// while systemd-resolved's upstream file is missing, and of one with a local resolver.
func TestResolvConfMessage(t *testing.T) {
	for _, c := range []struct {
		resolver facts.Resolver
		want     []string
	}{
		{facts.Resolver{Nameservers: []string{"127.0.0.53"}, Resolved: true}, []string{
			"[ERROR ResolvConf] w1: /etc/resolv.conf names only 127.0.0.53, a resolver on the host itself, which pods cannot reach: kubelet would give pods this file, and CoreDNS would forward to itself",
			"    fix: systemd-resolved runs but /run/systemd/resolve/resolv.conf is missing: restart systemd-resolved, or set kubelet.resolvConf in the inventory to a file on the hosts that lists the upstream DNS servers",
		}},
		{facts.Resolver{Nameservers: []string{"127.0.0.1", "::1"}}, []string{
			"[ERROR ResolvConf] w1: /etc/resolv.conf names only 127.0.0.1, ::1, a resolver on the host itself, which pods cannot reach: kubelet would give pods this file, and CoreDNS would forward to itself",
			"    fix: set kubelet.resolvConf in the inventory to a file on the hosts that lists the upstream DNS servers",
		}},
	} {
		hosts := healthyHosts()
		hosts["w1"].Resolver = c.resolver
		got := linesOf(Check(cluster(), hosts, Options{}), CheckResolvConf)
		if !slices.Equal(got, c.want) {
			t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
	}
}

// TestSecurityModules: SELinux enforcing is refused with the fix, permissive is reported;
// AppArmor without apparmor_parser is refused with the package to install.
func TestSecurityModules(t *testing.T) {
	for _, c := range []struct {
		name string
		lsm  facts.LSM
		os   string
		want []string
	}{
		{"SELinux enforcing", facts.LSM{SELinux: facts.SELinuxEnforcing}, "rocky", []string{
			"[ERROR SELinux] w1: SELinux is enforcing: the bundle brings no container-selinux policy, and the control plane's and kubelet's access to host paths would be denied",
			"    fix: setenforce 0, and set SELINUX=permissive in /etc/selinux/config so it stays so at boot (as kubeadm's install guide does); then run again",
		}},
		{"SELinux permissive", facts.LSM{SELinux: facts.SELinuxPermissive}, "rocky", []string{
			"[INFO SELinux] w1: SELinux is permissive: it logs what it would deny and denies nothing",
		}},
		{"AppArmor without its parser", facts.LSM{AppArmor: true}, "debian", []string{
			"[WARNING AppArmor] w1: AppArmor is enabled in the kernel but apparmor_parser is not installed: containerd loads its default profile with it, and without it runs every container unconfined",
			"    fix: install it to confine them: apt-get install apparmor",
		}},
		{"AppArmor with its parser", facts.LSM{AppArmor: true, AppArmorParser: true}, "ubuntu", nil},
	} {
		hosts := healthyHosts()
		hosts["w1"].LSM, hosts["w1"].OS.ID = c.lsm, c.os
		got := linesOf(Check(cluster(), hosts, Options{}), CheckSELinux, CheckAppArmor)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: got\n%s\nwant\n%s", c.name, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
	}
}

// TestFirewall: a master behind firewalld's public zone with only SSH open is told each port
// its role needs, the pod and Service subnets its trusted zone lacks, and the commands that open
// them; a worker behind ufw with some rules is told the rest, and with firewall: open that
// kforge opens them; the trusted zone and ufw's "Anywhere" rule let
// everything in.
func TestFirewall(t *testing.T) {
	pr := func(proto string, from, to int) facts.PortRange {
		return facts.PortRange{Proto: proto, From: from, To: to}
	}
	for _, c := range []struct {
		name, host string
		fw         facts.Firewall
		want       []string
	}{
		{"firewalld, SSH only", "m1", facts.Firewall{Kind: "firewalld", Zone: "public", Open: []facts.PortRange{pr("tcp", 22, 22)}}, []string{
			"[ERROR Firewall] m1: firewalld (zone public) does not let in 6443/tcp (the API server), 2379-2380/tcp (etcd (clients and peers)), 10250/tcp (kubelet), 10256/tcp (kube-proxy's health check), 30000-32767/tcp (NodePort Services), 30000-32767/udp (NodePort Services), 8472/udp (the pod network (flannel's VXLAN)); does not let in everything from 10.244.0.0/16 and 10.96.0.0/12 (the pods' and the Services' subnets: pod traffic between nodes, and Services)",
			"    fix: set firewall: open in the inventory, or open them yourself: firewall-cmd --permanent --add-port=6443/tcp --add-port=2379-2380/tcp --add-port=10250/tcp --add-port=10256/tcp --add-port=30000-32767/tcp --add-port=30000-32767/udp --add-port=8472/udp && firewall-cmd --permanent --zone=trusted --add-source=10.244.0.0/16 --add-source=10.96.0.0/12 && firewall-cmd --reload",
		}},
		{"firewalld, ports open, the Service subnet not trusted", "w1", facts.Firewall{Kind: "firewalld", Zone: "public", Open: []facts.PortRange{pr("tcp", 10250, 10250), pr("tcp", 10256, 10256), pr("tcp", 30000, 32767), pr("udp", 30000, 32767), pr("udp", 8472, 8472)}, Sources: []string{"10.244.0.0/16"}}, []string{
			"[ERROR Firewall] w1: firewalld (zone public) does not let in everything from 10.96.0.0/12 (the pods' and the Services' subnets: pod traffic between nodes, and Services)",
			"    fix: set firewall: open in the inventory, or open them yourself: firewall-cmd --permanent --zone=trusted --add-source=10.96.0.0/12 && firewall-cmd --reload",
		}},
		{"ufw, some rules", "w1", facts.Firewall{Kind: "ufw", Open: []facts.PortRange{pr("tcp", 22, 22), pr("tcp", 10250, 10250), pr("", 30000, 32767)}, Sources: []string{"10.244.0.0/16"}}, []string{
			"[ERROR Firewall] w1: ufw does not let in 10256/tcp (kube-proxy's health check), 8472/udp (the pod network (flannel's VXLAN)); does not let in everything from 10.96.0.0/12 (the pods' and the Services' subnets: pod traffic between nodes, and Services)",
			"    fix: set firewall: open in the inventory, or open them yourself: ufw allow 10256/tcp && ufw allow 8472/udp && ufw allow from 10.96.0.0/12 && ufw route allow from 10.96.0.0/12 && ufw route allow to 10.96.0.0/12",
		}},
		{"ufw, some rules, firewall: open", "w1", facts.Firewall{Kind: "ufw", Open: []facts.PortRange{pr("tcp", 22, 22), pr("tcp", 10250, 10250), pr("", 30000, 32767)}}, []string{
			"[INFO Firewall] w1: ufw does not let in 10256/tcp (kube-proxy's health check), 8472/udp (the pod network (flannel's VXLAN)); does not let in everything from 10.244.0.0/16 and 10.96.0.0/12 (the pods' and the Services' subnets: pod traffic between nodes, and Services); kforge opens them (firewall: open)",
		}},
		{"firewalld, trusted zone", "m1", facts.Firewall{Kind: "firewalld", Zone: "trusted"}, nil},
		{"ufw, everything from anywhere", "w1", facts.Firewall{Kind: "ufw", Open: []facts.PortRange{{}}, Sources: []string{"Anywhere"}}, nil},
		{"no firewall", "m1", facts.Firewall{Kind: "none"}, nil},
	} {
		hosts := healthyHosts()
		hosts[c.host].Firewall = c.fw
		cl := cluster()
		cl.Networking.Plugin = "flannel"
		if strings.HasSuffix(c.name, "firewall: open") {
			cl.Firewall = inventory.FirewallOpen
		}
		got := linesOf(Check(cl, hosts, Options{}), CheckFirewall)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: got\n%s\nwant\n%s", c.name, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
	}
}

// TestProxyMode: a host without legacy iptables makes auto take nftables on every host, said
// once for that host; an old kernel is refused nftables mode with the setting that avoids it;
// iptables mode named by the user on such a host is a warning, and so is nftables mode on a
// host without nft (reset needs it).
func TestProxyMode(t *testing.T) {
	for _, c := range []struct {
		name   string
		mode   string
		legacy map[string]string // host: ip_tables module state
		kernel map[string]string
		want   []string
	}{
		{"every host has legacy iptables", inventory.ProxyModeAuto, nil, nil, nil},
		{"one without, auto", inventory.ProxyModeAuto, map[string]string{"w1": "missing"}, nil, []string{
			"[INFO KubeProxyMode] w1: the kernel has no legacy iptables (the ip_tables module is missing): kube-proxy, flannel and hostPorts use nftables on every host",
		}},
		{"one without, auto, another with an old kernel", inventory.ProxyModeAuto, map[string]string{"w1": "missing"}, map[string]string{"m1": "5.10.0-28-amd64"}, []string{
			"[ERROR KubeProxyMode] m1: kube-proxy runs in nftables mode, which needs Linux 5.13 or later; this host runs 5.10.0-28-amd64",
			"    fix: upgrade the kernel to 5.13 or later, or set kubeProxy.mode: iptables in the inventory where every host's kernel has legacy iptables",
			"[INFO KubeProxyMode] w1: the kernel has no legacy iptables (the ip_tables module is missing): kube-proxy, flannel and hostPorts use nftables on every host",
		}},
		{"one without, iptables named", inventory.ProxyModeIptables, map[string]string{"w1": "missing"}, nil, []string{
			"[WARNING KubeProxyMode] w1: the kernel has no legacy iptables (the ip_tables module is missing) and kubeProxy.mode is iptables: kube-proxy, flannel and hostPorts go through iptables-nft's compatibility layer",
			"    fix: set kubeProxy.mode: auto (or nftables) in the inventory",
		}},
		{"nftables named, 5.15 and 6.x", inventory.ProxyModeNftables, nil, map[string]string{"m1": "5.15.0-1-generic", "w1": "6.12.48+deb13-amd64"}, nil},
		{"nftables named, 5.4", inventory.ProxyModeNftables, nil, map[string]string{"w1": "5.4.0-200-generic"}, []string{
			"[ERROR KubeProxyMode] w1: kube-proxy runs in nftables mode, which needs Linux 5.13 or later; this host runs 5.4.0-200-generic",
			"    fix: upgrade the kernel to 5.13 or later, or set kubeProxy.mode: iptables in the inventory",
		}},
		{"nftables named, no nft on w1", inventory.ProxyModeNftables, nil, nil, []string{
			"[WARNING KubeProxyMode] w1: kube-proxy runs in nftables mode and nft is not installed: kforge reset cannot delete the nftables tables of kube-proxy, flannel and portmap here",
			"    fix: install nft (the Debian and RHEL package nftables)",
		}},
	} {
		hosts := healthyHosts()
		for h, state := range c.legacy {
			hosts[h].Modules = map[string]string{"ip_tables": state}
		}
		for h, k := range c.kernel {
			hosts[h].Kernel = k
		}
		if strings.Contains(c.name, "no nft") {
			delete(hosts["w1"].Binaries, "nft")
		}
		cl := cluster()
		cl.KubeProxy.Mode = c.mode
		got := linesOf(Check(cl, hosts, Options{}), CheckProxyMode)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: got\n%s\nwant\n%s", c.name, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
	}
}

// linesOf are the printed lines of the findings of the named checks, in order.
func linesOf(fs Findings, checks ...string) []string {
	var out []string
	for _, f := range fs {
		if slices.Contains(checks, f.Check) {
			out = append(out, f.Lines()...)
		}
	}
	return out
}
