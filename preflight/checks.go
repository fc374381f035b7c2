package preflight

import (
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/kforge/kforge/facts"
	"github.com/kforge/kforge/firewall"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
)

// kubeadm's numbers (cmd/kubeadm/app/constants/constants.go, v1.36).
const (
	ControlPlaneNumCPU = 2
	ControlPlaneMemMB  = 1700
	// KubeletSkew is how many minors a kubelet may lag the control plane
	// (MinimumKubeletVersion = getSkewedKubernetesVersion(-3)).
	KubeletSkew = 3
)

// Clock skew limits. Certificates kforge issues start five minutes before issue (kubeadm's
// backdate): a host further behind than that rejects them. etcd warns above one second of skew
// between members.
const (
	ClockSkewError   = 4 * time.Minute
	ClockSkewWarning = time.Second
)

// Port is one port kubeadm checks, the component that listens there and, for static pods, the
// manifest kforge writes for it.
type Port struct {
	Port      int
	Component string // /proc/PID/comm of the component (15 characters at most)
	Manifest  string // static-pod file name; "" for kubelet
	// Role is where the port is checked: on every host (""), on masters, or on the hosts of
	// etcd's members (RoleEtcd: the etcd group's, or the masters with stacked etcd).
	Role inventory.Role
}

// checkedOn says whether port p is checked on host n of cluster c.
func (p Port) checkedOn(c *inventory.Cluster, n inventory.Node) bool {
	switch p.Role {
	case "":
		return true
	case inventory.RoleEtcd:
		return n.Role == c.EtcdRole()
	}
	return n.Role == p.Role
}

// Ports are the ports checked, in kubeadm's order.
var Ports = []Port{
	{6443, "kube-apiserver", "kube-apiserver.yaml", inventory.RoleMaster},
	{10259, "kube-scheduler", "kube-scheduler.yaml", inventory.RoleMaster},
	{10257, "kube-controller", "kube-controller-manager.yaml", inventory.RoleMaster}, // comm is cut to 15 characters
	{2379, "etcd", "etcd.yaml", inventory.RoleEtcd},
	{2380, "etcd", "etcd.yaml", inventory.RoleEtcd},
	{10250, "kubelet", "", ""},
}

// Commands a host must have (kubeadm v1.36 requires losetup, mount and cp; kforge drives
// containerd with ctr and hashes files with sha256sum) and commands whose absence is a warning
// (older kubeadm checked them; networking and debugging use them).
var (
	RequiredCommands = []string{"containerd", "runc", "ctr", "mount", "losetup", "cp", "sha256sum"}
	OptionalCommands = []string{"iptables", "conntrack", "socat", "ebtables", "ethtool", "ip", "nsenter"}
)

// kubeadm's supported kernels (k8s.io/system-validators DefaultSysSpec).
var kernelRE = regexp.MustCompile(`^(5\.4|5\.10|5\.15)\.|^([6-9]|[1-9][0-9]+)\.([0-9]+)\.([0-9]+)`)

// Cgroup controllers kubelet needs (system-validators DefaultSysSpec).
var (
	cgroupsV1         = []string{"cpu", "cpuacct", "cpuset", "devices", "freezer", "memory", "pids"}
	cgroupsV1Optional = []string{"hugetlb", "blkio"}
	cgroupsV2         = []string{"cpu", "cpuset", "devices", "freezer", "memory", "pids"}
	cgroupsV2Optional = []string{"hugetlb", "io"}
)

// Check names.
const (
	CheckPrivilegedUser = "IsPrivilegedUser"
	CheckSystem         = "SystemVerification"
	CheckInitSystem     = "InitSystem"
	CheckNumCPU         = "NumCPU"
	CheckMem            = "Mem"
	CheckSwap           = "Swap"
	CheckCRI            = "CRI"
	CheckRuntimeVersion = "ContainerRuntimeVersion"
	CheckKubeletVersion = "KubeletVersion"
	CheckHostname       = "Hostname"
	CheckMachineID      = "MachineID"
	CheckManifestsDir   = "DirAvailable--etc-kubernetes-manifests"
	CheckEtcdDataDir    = "DirAvailable--var-lib-etcd"
	CheckIPForward      = "FileContent--proc-sys-net-ipv4-ip_forward"
	CheckBridgeNF       = "FileContent--proc-sys-net-bridge-bridge-nf-call-iptables"
	CheckKernelModules  = "KernelModules"
	CheckClockSkew      = "ClockSkew"
	CheckCapSysResource = "CapSysResource"
	CheckArch           = "Arch"
	CheckEtcdQuorum     = "EtcdQuorum"
	CheckUpgradeRoute   = "UpgradeRoute"
	CheckServiceRoute   = "ServiceRoute"
	CheckResolvConf     = "ResolvConf"
	CheckSELinux        = "SELinux"
	CheckAppArmor       = "AppArmor"
	CheckFirewall       = "Firewall"
	CheckProxyMode      = "KubeProxyMode"
	CheckAPIProxyPort   = "APIProxyPort"
	CheckRegistryPort   = "RegistryPort"
	CheckVIP            = "ControlPlaneVIP"
	CheckNodeIP         = "NodeIP"
	// CheckFacts is a host whose facts could not be gathered; it cannot be ignored.
	CheckFacts = "Facts"
)

// PortCheck is the name of the check of port p (kubeadm's).
func PortCheck(p int) string { return fmt.Sprintf("Port-%d", p) }

// CommandCheck is the name of the check that command is on PATH (kubeadm's).
func CommandCheck(cmd string) string { return "FileExisting-" + cmd }

// CheckNames lists every check name --ignore-preflight-errors accepts (besides "all").
func CheckNames() []string {
	names := []string{CheckPrivilegedUser, CheckSystem, CheckInitSystem, CheckNumCPU, CheckMem, CheckSwap}
	for _, c := range append(append([]string{"kubelet"}, RequiredCommands...), OptionalCommands...) {
		names = append(names, CommandCheck(c))
	}
	names = append(names, CheckCRI, CheckRuntimeVersion, CheckKubeletVersion, CheckHostname, CheckMachineID)
	for _, p := range Ports {
		names = append(names, PortCheck(p.Port))
	}
	return append(names, CheckManifestsDir, CheckEtcdDataDir, CheckKernelModules, CheckIPForward, CheckBridgeNF, CheckClockSkew, CheckArch, CheckEtcdQuorum, CheckUpgradeRoute, CheckNodeIP, CheckServiceRoute, CheckAPIProxyPort, CheckRegistryPort, CommandCheck("curl"), CheckVIP, CheckProxyMode)
}

type hostCheck func(c *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding

// hostChecks run on every host, in this order (kubeadm's, roughly).
var hostChecks = []hostCheck{
	checkPrivilegedUser, checkSystem, checkInitSystem, checkCPUAndMemory, checkSwap, checkCommands,
	checkCRI, checkKubeletVersion, checkHostname, checkPorts, checkAPIProxyPort, checkBundleFromMasters, checkManifestsDir, checkEtcdDataDir,
	checkSysctls, checkNodeIPs, checkServiceRoute, checkResolvConf, checkSELinux, checkAppArmor, checkFirewall, checkClockSkew, checkCapSysResource, checkEtcdQuorum, checkUpgradeRoute,
}

func finding(n inventory.Node, check string, sev Severity, fix, format string, args ...any) Finding {
	return Finding{Host: n.Name, Check: check, Severity: sev, Seen: fmt.Sprintf(format, args...), Fix: fix}
}

func checkPrivilegedUser(_ *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	if f.UID == 0 {
		return nil
	}
	return []Finding{finding(n, CheckPrivilegedUser, Error,
		`log in as root, or give the SSH user sudo rights and set ssh.sudo (passwordless, or password with sudoPasswordEnv) in the inventory`,
		"commands run as uid %d, not root (ssh user %q, sudo %q)", f.UID, n.SSH.User, n.SSH.Sudo)}
}

func checkSystem(c *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	var out []Finding
	if !kernelRE.MatchString(f.Kernel) {
		out = append(out, finding(n, CheckSystem, Error, "upgrade the kernel to 5.4, 5.10, 5.15 or any 6.x or later",
			"kernel %s is not one kubeadm supports (5.4, 5.10, 5.15, or 6.x and later)", f.Kernel))
	}
	cg := f.Cgroup
	var required, optional, have []string
	switch {
	case cg.Version == facts.CgroupNone:
		return append(out, finding(n, CheckSystem, Error, "mount the cgroup file system (cgroup2 at /sys/fs/cgroup)", "no cgroup file system is mounted"))
	case cg.V1():
		fix := "boot the host with cgroup v2 (systemd.unified_cgroup_hierarchy=1 on the kernel command line), or, where v2 is impossible, set kubelet.allowCgroupV1: true in the inventory"
		seen := fmt.Sprintf("cgroups are %s (v1 controllers: %s); kubelet 1.35+ refuses cgroup v1 unless told otherwise, and support is being removed", cg.Version, strings.Join(cg.V1Controllers, ","))
		if c.Kubelet.AllowCgroupV1 {
			out = append(out, Finding{Host: n.Name, Check: CheckSystem, Severity: Warning, Seen: seen + "; allowed by kubelet.allowCgroupV1 (kubelet gets failCgroupV1: false)", Fix: "move the host to cgroup v2 when you can"})
		} else {
			out = append(out, finding(n, CheckSystem, Error, fix, "%s", seen))
		}
		required, optional, have = cgroupsV1, cgroupsV1Optional, cg.V1Controllers
	default:
		required, optional, have = cgroupsV2, cgroupsV2Optional, cg.V2Controllers
	}
	if miss := missing(required, have); len(miss) > 0 {
		out = append(out, finding(n, CheckSystem, Error, "enable these cgroup controllers (kernel configuration or boot parameters)",
			"missing required cgroup controllers: %s", strings.Join(miss, " ")))
	}
	if miss := missing(optional, have); len(miss) > 0 {
		out = append(out, finding(n, CheckSystem, Warning, "", "missing optional cgroup controllers: %s", strings.Join(miss, " ")))
	}
	return out
}

func missing(want, have []string) []string {
	var m []string
	for _, w := range want {
		if !slices.Contains(have, w) {
			m = append(m, w)
		}
	}
	return m
}

func checkInitSystem(_ *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	if f.Systemd && f.Binaries["systemctl"].Path != "" {
		return nil
	}
	return []Finding{finding(n, CheckInitSystem, Error, "use a host whose init system is systemd",
		"PID 1 is not systemd (or systemctl is missing): kforge runs kubelet and containerd as systemd units")}
}

func checkCPUAndMemory(_ *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	if n.Role != inventory.RoleMaster {
		return nil
	}
	var out []Finding
	if f.CPUs < ControlPlaneNumCPU {
		out = append(out, finding(n, CheckNumCPU, Error, fmt.Sprintf("give the master at least %d CPUs", ControlPlaneNumCPU),
			"the number of available CPUs %d is less than the required %d", f.CPUs, ControlPlaneNumCPU))
	}
	if mb := f.MemoryBytes >> 20; mb < ControlPlaneMemMB {
		out = append(out, finding(n, CheckMem, Error, fmt.Sprintf("give the master at least %d MB of memory", ControlPlaneMemMB),
			"the system RAM (%d MB) is less than the minimum %d MB", mb, ControlPlaneMemMB))
	}
	return out
}

// swapTolerated says whether kubelet is told not to fail on swap (kubelet.extraArgs fail-swap-on).
func swapTolerated(c *inventory.Cluster) bool {
	for k, v := range c.Kubelet.ExtraArgs {
		if strings.TrimPrefix(k, "--") == "fail-swap-on" && strings.EqualFold(v, "false") {
			return true
		}
	}
	return false
}

func checkSwap(c *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	if !f.Swap.On {
		return nil
	}
	seen := fmt.Sprintf("swap is on (%d MiB on %s)", f.Swap.TotalBytes>>20, strings.Join(f.Swap.Devices, ", "))
	if swapTolerated(c) {
		return []Finding{finding(n, CheckSwap, Warning, "see https://kubernetes.io/docs/concepts/architecture/nodes/#swap-memory for kubelet's swap settings",
			"%s; kubelet runs with fail-swap-on=false (swap is supported for cgroup v2 only)", seen)}
	}
	return []Finding{finding(n, CheckSwap, Error,
		`turn swap off (swapoff -a, and remove swap from /etc/fstab), or let kubelet run with it: kubelet.extraArgs: {fail-swap-on: "false"} in the inventory`,
		"%s; kubelet refuses to start with swap unless configured for it", seen)}
}

func checkCommands(c *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	var out []Finding
	if f.Binaries["kubelet"].Path == "" && c.Bundle == "" {
		out = append(out, finding(n, CommandCheck("kubelet"), Error,
			fmt.Sprintf("install kubelet %s on the host, or set bundle in the inventory (kforge bundle build) so kforge installs it", c.KubernetesVersion),
			"kubelet not found in system path and the inventory has no bundle to install it from"))
	}
	for _, cmd := range RequiredCommands {
		if bundledRuntime[cmd] && c.ContainerRuntime.Install == inventory.RuntimeFromBundle {
			continue // kforge installs them from the bundle
		}
		if f.Binaries[cmd].Path == "" {
			out = append(out, finding(n, CommandCheck(cmd), Error, "install it: "+installHint(f, cmd), "%s not found in system path", cmd))
		}
	}
	for _, cmd := range OptionalCommands {
		if f.Binaries[cmd].Path == "" {
			out = append(out, finding(n, CommandCheck(cmd), Warning, "install it: "+installHint(f, cmd), "%s not found in system path", cmd))
		}
	}
	return out
}

// bundledRuntime are the required commands kforge installs itself with
// containerRuntime.install: bundle.
var bundledRuntime = map[string]bool{"containerd": true, "runc": true, "ctr": true}

// debPackages and rpmPackages name the package of each command.
var (
	debPackages = map[string]string{"containerd": "containerd", "runc": "runc", "ctr": "containerd", "mount": "mount", "losetup": "mount",
		"cp": "coreutils", "sha256sum": "coreutils", "iptables": "iptables", "conntrack": "conntrack", "socat": "socat",
		"ebtables": "ebtables", "ethtool": "ethtool", "ip": "iproute2", "nsenter": "util-linux", "curl": "curl", "apparmor_parser": "apparmor"}
	rpmPackages = map[string]string{"containerd": "containerd.io", "runc": "runc", "ctr": "containerd.io", "mount": "util-linux", "losetup": "util-linux",
		"cp": "coreutils", "sha256sum": "coreutils", "iptables": "iptables", "conntrack": "conntrack-tools", "socat": "socat",
		"ebtables": "ebtables", "ethtool": "ethtool", "ip": "iproute", "nsenter": "util-linux", "curl": "curl", "apparmor_parser": "apparmor-parser"}
)

func installHint(f *facts.Facts, cmd string) string {
	switch f.OS.ID {
	case "debian", "ubuntu":
		return "apt-get install " + debPackages[cmd]
	case "rhel", "centos", "rocky", "almalinux", "fedora", "ol", "amzn":
		return "dnf install " + rpmPackages[cmd]
	}
	return "the package that provides " + cmd
}

func checkCRI(c *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	r := f.Runtime
	if c.ContainerRuntime.Install == inventory.RuntimeFromBundle {
		return nil // kforge installs, configures and starts its own containerd
	}
	if f.Binaries["ctr"].Path == "" {
		return nil // FileExisting-ctr says it; without ctr the runtime cannot be asked
	}
	fix := "start containerd (systemctl enable --now containerd) and check `journalctl -u containerd`; or fix containerRuntime.endpoint in the inventory"
	switch {
	case !r.SocketExists:
		return []Finding{finding(n, CheckCRI, Error, fix, "container runtime is not running: no socket at %s", r.Socket)}
	case !r.Answering:
		seen := "container runtime at " + r.Socket + " does not answer"
		if r.Error != "" {
			seen += ": " + lastLine(r.Error)
		}
		return []Finding{finding(n, CheckCRI, Error, fix, "%s", seen)}
	}
	v, err := version.ParseGeneric(runtimeVersion(f))
	if err != nil {
		return nil
	}
	if rel := c.Release(); int(v.Major()) < rel.HostContainerdMajor {
		return []Finding{finding(n, CheckRuntimeVersion, Error,
			fmt.Sprintf("upgrade the host's containerd to %d.x, or set containerRuntime.install: bundle so that kforge installs containerd %s from the bundle", rel.HostContainerdMajor, rel.Containerd),
			"containerd %s: kubelet %s needs containerd %d.0 or later", v, rel.Minor, rel.HostContainerdMajor)}
	}
	if v.Major() < 2 {
		return []Finding{finding(n, CheckRuntimeVersion, Warning, "upgrade to containerd 2.x before upgrading the cluster past Kubernetes 1.36",
			"containerd %s: Kubernetes 1.36 is the last minor that supports containerd 1.x", v)}
	}
	return nil
}

// runtimeVersion is the server's version, else the containerd binary's.
func runtimeVersion(f *facts.Facts) string {
	if v := facts.VersionNumber(f.Runtime.Version); v != "" {
		return v
	}
	return f.Binaries["containerd"].Version
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func checkKubeletVersion(c *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	b := f.Binaries["kubelet"]
	if b.Path == "" {
		return nil // FileExisting-kubelet, or the bundle installs it
	}
	want := c.Release().Semver
	if c.Bundle != "" {
		if b.Path != hostpath.DefaultKubeletPath {
			return []Finding{finding(n, CheckKubeletVersion, Warning, fmt.Sprintf("remove %s, or make sure the kubelet unit runs %s", b.Path, hostpath.DefaultKubeletPath),
				"a kubelet (%s) is at %s; kforge installs the bundle's kubelet at %s", or(b.Version, "unknown version"), b.Path, hostpath.DefaultKubeletPath)}
		}
		return nil // replaced by the bundle's, which matches the cluster
	}
	have, err := version.ParseGeneric(b.Version)
	if err != nil {
		return []Finding{finding(n, CheckKubeletVersion, Error, fmt.Sprintf("install kubelet %s", c.KubernetesVersion),
			"cannot read the version of %s (it printed %q)", b.Path, b.Output)}
	}
	fix := fmt.Sprintf("install kubelet %s (or use a bundle)", c.KubernetesVersion)
	if int(have.Major()) != want.Major || int(have.Minor()) > want.Minor {
		return []Finding{finding(n, CheckKubeletVersion, Error, fix,
			"the kubelet version v%s is higher than the control plane version %s: not a supported version skew", have, c.KubernetesVersion)}
	}
	if int(have.Minor())+KubeletSkew < want.Minor {
		return []Finding{finding(n, CheckKubeletVersion, Error, fix,
			"kubelet v%s is more than %d minors older than the control plane %s", have, KubeletSkew, c.KubernetesVersion)}
	}
	if int(have.Minor()) != want.Minor || int(have.Patch()) != want.Patch {
		return []Finding{finding(n, CheckKubeletVersion, Info, "", "kubelet v%s with control plane %s: a supported skew", have, c.KubernetesVersion)}
	}
	return nil
}

func or(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func checkHostname(_ *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	var out []Finding
	if errs := validation.IsDNS1123Subdomain(n.Name); len(errs) > 0 {
		out = append(out, finding(n, CheckHostname, Error, "rename the host in the inventory: lowercase letters, digits, '-' and '.'",
			"node name %q is not a valid Kubernetes node name: %s", n.Name, strings.Join(errs, "; ")))
	}
	if errs := validation.IsDNS1123Subdomain(f.Hostname); len(errs) > 0 {
		out = append(out, finding(n, CheckHostname, Warning, "set a hostname of lowercase letters, digits, '-' and '.' (hostnamectl set-hostname)",
			"hostname %q is not a valid DNS name (%s); the node is still named %q (kforge sets --hostname-override)", f.Hostname, strings.Join(errs, "; "), n.Name))
	} else if f.Hostname != n.Name {
		out = append(out, finding(n, CheckHostname, Info, "", "hostname %q differs from the node name %q; kubelet runs with --hostname-override=%s", f.Hostname, n.Name, n.Name))
	}
	return out
}

func checkPorts(c *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	var out []Finding
	for _, p := range Ports {
		if !p.checkedOn(c, n) {
			continue
		}
		ls := f.ListenersOn(p.Port)
		if len(ls) == 0 {
			continue
		}
		var held []string
		own := ownsComponent(c, f, p)
		for _, l := range ls {
			held = append(held, l.String())
			if l.Command != p.Component {
				own = false
			}
		}
		if own {
			out = append(out, finding(n, PortCheck(p.Port), Info, "", "port %d is held by kforge's own %s from an earlier run (%s)", p.Port, p.Component, strings.Join(held, ", ")))
			continue
		}
		out = append(out, finding(n, PortCheck(p.Port), Error,
			fmt.Sprintf("stop what listens on port %d (it is %s's port), or reset a node of another cluster first (kubeadm reset / kforge reset)", p.Port, p.Component),
			"port %d is in use: %s", p.Port, strings.Join(held, ", ")))
	}
	return out
}

// apiProxyCommand is the node-local API proxy's /proc/PID/comm (bundle.APIProxyFile, 15
// characters: not cut).
const apiProxyCommand = "kforge-apiproxy"

// checkAPIProxyPort refuses a node where something other than kforge's own API proxy listens on
// the proxy's port, when the cluster uses it (several masters, no controlPlaneEndpoint).
func checkAPIProxyPort(c *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	if !c.LocalAPIProxy() || n.Role == inventory.RoleEtcd {
		return nil
	}
	var held []string
	own := true
	for _, l := range f.ListenersOn(c.APIProxy.Port) {
		held = append(held, l.String())
		own = own && l.Command == apiProxyCommand
	}
	switch {
	case len(held) == 0:
		return nil
	case own:
		return []Finding{finding(n, CheckAPIProxyPort, Info, "", "port %d is held by kforge's own API proxy from an earlier run (%s)", c.APIProxy.Port, strings.Join(held, ", "))}
	}
	return []Finding{finding(n, CheckAPIProxyPort, Error,
		fmt.Sprintf("stop what listens on port %d, or choose another port for the node-local API proxy (apiProxy.port in the inventory)", c.APIProxy.Port),
		"port %d, the node-local API proxy's (several masters, no controlPlaneEndpoint), is in use: %s", c.APIProxy.Port, strings.Join(held, ", "))}
}

// registryCommand is the masters' registry's /proc/PID/comm (hostpath.RegistryPath's base name,
// 15 characters: not cut), for both its instances.
const registryCommand = "kforge-registry"

// checkBundleFromMasters warns, when the masters serve the bundle to the other nodes
// (BundleFromMasters), of what keeps a host out of that: on a master, another process on the
// registry's port or on the loopback address its writable instance is filled through; on any
// host, no curl (masters fill their registry with it, the other nodes fetch with it). Apply
// still converges, uploading from the workstation what the registries could not give, so these
// are warnings.
func checkBundleFromMasters(c *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	if !c.BundleFromMasters() || n.Role == inventory.RoleEtcd { // an etcd host's comes from the workstation
		return nil
	}
	var out []Finding
	if f.Binaries["curl"].Path == "" {
		role := "take the bundle from the masters' registries"
		if n.Role == inventory.RoleMaster {
			role = "fill its registry, from which the other nodes take the bundle"
		}
		out = append(out, finding(n, CommandCheck("curl"), Warning, "install it: "+installHint(f, "curl"),
			"curl not found in system path: this host cannot %s, so the workstation uploads to it instead", role))
	}
	if n.Role != inventory.RoleMaster {
		return out
	}
	// The registry listens on the node's address, its writable instance on loopback: a socket
	// on another address of the host is no conflict.
	fill := netip.MustParseAddrPort(hostpath.RegistryFillAddr)
	nodeIP, _ := netip.ParseAddr(n.NodeIP())
	for _, at := range []netip.AddrPort{netip.AddrPortFrom(nodeIP, hostpath.RegistryPort), fill} {
		port := int(at.Port())
		var held []string
		for _, l := range f.ListenersOn(port) {
			if (l.Addr.IsUnspecified() || l.Addr.Unmap() == at.Addr()) && l.Command != registryCommand {
				held = append(held, l.String())
			}
		}
		if len(held) == 0 {
			continue
		}
		what := "the registry's, from which the other nodes take the bundle"
		if port != hostpath.RegistryPort {
			what = "where kforge fills the registry (" + hostpath.RegistryFillAddr + ")"
		}
		out = append(out, finding(n, CheckRegistryPort, Warning,
			fmt.Sprintf("stop what listens on port %d; meanwhile the workstation uploads the bundle to every node", port),
			"port %d, %s, is in use: %s", port, what, strings.Join(held, ", ")))
	}
	return out
}

// ownsComponent says whether kforge set up port p's component on this host for this cluster:
// for a static pod, kforge's marker (of this cluster) lists its manifest and the manifest is
// there; for kubelet, kforge's drop-in is installed.
func ownsComponent(c *inventory.Cluster, f *facts.Facts, p Port) bool {
	if p.Manifest == "" {
		return f.KubeletDropIn
	}
	m := f.Manifests.Marker
	return m != nil && m.Cluster == c.Name && m.Owns(p.Manifest) && slices.Contains(f.Manifests.Entries, p.Manifest)
}

func checkManifestsDir(c *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	m := f.Manifests
	if len(m.Entries) == 0 {
		return nil
	}
	fix := "move them out of " + hostpath.ManifestsDir + " (kubeadm reset cleans a kubeadm node, kforge reset a kforge one); for a static pod you added on purpose (e.g. kube-vip), --ignore-preflight-errors=" + CheckManifestsDir
	if m.Marker != nil && m.Marker.Cluster != c.Name {
		return []Finding{finding(n, CheckManifestsDir, Error, fix, "%s holds static pods of another kforge cluster, %q: %s", hostpath.ManifestsDir, m.Marker.Cluster, strings.Join(m.Entries, ", "))}
	}
	var foreign []string
	for _, e := range m.Entries {
		if !m.Marker.Owns(e) {
			foreign = append(foreign, e)
		}
	}
	if len(foreign) > 0 {
		return []Finding{finding(n, CheckManifestsDir, Error, fix, "%s is not empty and these are not kforge's: %s", hostpath.ManifestsDir, strings.Join(foreign, ", "))}
	}
	return nil
}

func checkEtcdDataDir(c *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	if n.Role != c.EtcdRole() || len(f.EtcdDataDir) == 0 {
		return nil
	}
	m := f.Manifests.Marker
	if m != nil && m.Cluster == c.Name && m.Owns("etcd.yaml") {
		return nil // kforge's own etcd from an earlier run
	}
	return []Finding{finding(n, CheckEtcdDataDir, Error,
		"remove "+hostpath.EtcdDataDir+" if that data is no longer needed (it belongs to another etcd); kforge reset or kubeadm reset clean it",
		"%s is not empty (%s) and kforge's etcd was not set up here", hostpath.EtcdDataDir, strings.Join(f.EtcdDataDir, ", "))}
}

func checkSysctls(_ *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	var out []Finding
	switch v, ok := f.Sysctls["net.ipv4.ip_forward"]; {
	case !ok:
		out = append(out, finding(n, CheckIPForward, Error, "check that /proc/sys is mounted", "/proc/sys/net/ipv4/ip_forward cannot be read"))
	case v != "1":
		out = append(out, finding(n, CheckIPForward, Info, "", "net.ipv4.ip_forward is %s; kforge sets it to 1 in its own sysctl.d file", v))
	}
	for _, m := range []string{"overlay", "br_netfilter"} {
		switch f.Modules[m] {
		case "missing":
			out = append(out, finding(n, CheckKernelModules, Error,
				fmt.Sprintf("use a kernel with %s built in or as a module (on Ubuntu cloud images: apt-get install linux-modules-extra-$(uname -r))", m),
				"kernel module %s is neither loaded nor loadable (modprobe -n %s fails); containerd and pod networking need it", m, m))
		case "loadable":
			out = append(out, finding(n, CheckKernelModules, Info, "", "kernel module %s is not loaded; kforge loads it and lists it in %s", m, hostpath.ModulesLoadFile))
		}
	}
	switch v, ok := f.Sysctls["net.bridge.bridge-nf-call-iptables"]; {
	case !ok && f.Modules["br_netfilter"] == "loadable":
		// kforge loads it (above)
	case !ok && f.Modules["br_netfilter"] == "missing":
		// said above
	case !ok:
		out = append(out, finding(n, CheckBridgeNF, Error,
			"load the module and keep it loaded at boot: modprobe br_netfilter && echo br_netfilter > /etc/modules-load.d/br_netfilter.conf",
			"/proc/sys/net/bridge/bridge-nf-call-iptables does not exist: the br_netfilter module is not loaded"))
	case v != "1":
		out = append(out, finding(n, CheckBridgeNF, Info, "", "net.bridge.bridge-nf-call-iptables is %s; kforge sets it to 1 in its own sysctl.d file", v))
	}
	return out
}

// checkNodeIPs refuses a host that holds no interface address it is named by inside the
// cluster (internalAddress, or address, and a dual-stack cluster's ipv6Address): kubelet
// refuses a --node-ip the host does not hold. A dual-stack node's two addresses must be on one
// interface: flannel carries IPv6 over the device of the IPv4 address.
//
// A running node's --node-ip has one address per IP family of its cluster, which are fixed when
// it is made (Kubernetes gives a node its pod ranges once): an inventory that turns a cluster
// dual-stack, or back, is refused here, before anything changes.
func checkNodeIPs(_ *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	var out []Finding
	ips := n.NodeIPs()
	fields := []string{"address", "ipv6Address"} // the inventory field each of ips comes from
	if n.InternalAddress != "" {
		fields[0] = "internalAddress"
	}
	if running := strings.Split(f.KubeletNodeIP, ","); f.KubeletNodeIP != "" && len(running) != len(ips) {
		fams := map[int]string{1: "single-stack", 2: "dual-stack"}
		out = append(out, finding(n, CheckNodeIP, Error,
			fmt.Sprintf("set networking.podSubnet and serviceSubnet back to the cluster's (%s), and ipv6Address as they were: kforge does not convert a running cluster; make a new cluster and move the workloads", fams[len(running)]),
			"kubelet runs with --node-ip=%s: the cluster is %s, and the inventory makes it %s; a cluster's IP families are fixed when it is made", f.KubeletNodeIP, fams[len(running)], fams[len(ips)]))
	}
	if f.Addrs == nil { // ip could not list them: checkCommands says so
		return out
	}
	devs := make([]string, len(ips))
	for i, ip := range ips {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			continue // a DNS name: validation asked for internalAddress
		}
		if devs[i] = f.Addrs[a.String()]; devs[i] == "" {
			out = append(out, finding(n, CheckNodeIP, Error,
				fmt.Sprintf("set the host's %s to an address one of its interfaces holds (ip -o addr shows them), or give that address to the host", fields[i]),
				"no interface holds %s, the node's %s (kubelet's --node-ip): the host has %s", ip, fields[i], strings.Join(slices.Sorted(maps.Keys(f.Addrs)), ", ")))
		}
	}
	if len(ips) == 2 && devs[0] != "" && devs[1] != "" && devs[0] != devs[1] {
		out = append(out, finding(n, CheckNodeIP, Error, "give the host its ipv6Address on the interface of its IPv4 address, or name that interface's IPv6 address",
			"the node's IPv4 address %s is on %s and its IPv6 address %s on %s: flannel carries the pods' IPv6 over the device of the IPv4 address", ips[0], devs[0], ips[1], devs[1]))
	}
	return out
}

// checkServiceRoute reports a host where no route covers the Service subnet (no default route):
// kube-proxy rewrites a connection to a Service only after the kernel routed it, so processes on
// the host network — the API server calling an admission webhook — could not reach Services.
// apply adds the route (templates.ServiceRoute), which needs ip.
func checkServiceRoute(c *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	if f.ServiceRoute != facts.RouteMissing || n.Role == inventory.RoleEtcd {
		return nil
	}
	subnet := c.Networking.ServiceSubnet
	if subnet == "" {
		subnet = inventory.DefaultServiceSubnet
	}
	seen := fmt.Sprintf("no route covers the service subnet %s (the host has no default route): processes on the host network, such as the API server calling a webhook, cannot reach Services", subnet)
	if f.Binaries["ip"].Path == "" {
		return []Finding{finding(n, CheckServiceRoute, Error, "install it: "+installHint(f, "ip")+"; kforge then adds the route, or add a route for the service subnet (or a default route) yourself",
			"%s, and kforge cannot add the route: ip is not installed", seen)}
	}
	return []Finding{finding(n, CheckServiceRoute, Info, "", "%s; kforge routes it through the interface of %s (%s, at every boot)", seen, n.NodeIP(), hostpath.ServiceRouteUnit)}
}

// checkResolvConf refuses a host whose pods would get a resolv.conf that names only the host
// itself: a local stub resolver (systemd-resolved's 127.0.0.53, a dnsmasq on 127.0.0.1) is not
// reachable from a pod's network, and CoreDNS, which forwards to the servers of that file,
// would forward to itself and crash-loop. Where systemd-resolved runs, kforge gives kubelet its
// upstream file instead, as kubeadm does (facts.KubeletResolvConf); an inventory's
// kubelet.resolvConf is the user's choice.
func checkResolvConf(c *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	if n.Role == inventory.RoleEtcd || c.Kubelet.ResolvConf != "" || f.KubeletResolvConf() != "" || !f.Resolver.LoopbackOnly() {
		return nil
	}
	fix := "set kubelet.resolvConf in the inventory to a file on the hosts that lists the upstream DNS servers"
	if f.Resolver.Resolved {
		fix = "systemd-resolved runs but " + facts.ResolvedUpstream + " is missing: restart systemd-resolved, or " + fix
	}
	return []Finding{finding(n, CheckResolvConf, Error, fix,
		"/etc/resolv.conf names only %s, a resolver on the host itself, which pods cannot reach: kubelet would give pods this file, and CoreDNS would forward to itself",
		strings.Join(f.Resolver.Nameservers, ", "))}
}

// checkSELinux refuses SELinux in enforcing mode: the bundle brings no container-selinux
// policy, so the static pods' and kubelet's access to host paths would be denied; kubeadm's
// install guide, too, sets SELinux to permissive. Permissive mode is reported: SELinux logs
// what it would deny, and denies nothing.
func checkSELinux(_ *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	switch f.LSM.SELinux {
	case facts.SELinuxEnforcing:
		return []Finding{finding(n, CheckSELinux, Error,
			"setenforce 0, and set SELINUX=permissive in /etc/selinux/config so it stays so at boot (as kubeadm's install guide does); then run again",
			"SELinux is enforcing: the bundle brings no container-selinux policy, and the control plane's and kubelet's access to host paths would be denied")}
	case facts.SELinuxPermissive:
		return []Finding{finding(n, CheckSELinux, Info, "", "SELinux is permissive: it logs what it would deny and denies nothing")}
	}
	return nil
}

// checkAppArmor warns about a host whose kernel enforces AppArmor but that lacks
// apparmor_parser: containerd loads its default profile (runtime/default) with it, and without
// it takes AppArmor as unsupported and runs every container unconfined (seen on the lab's VM
// hosts: Debian 12's kernel, no apparmor package, pods running). With both, pods run under
// containerd's default profile.
func checkAppArmor(_ *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	if !f.LSM.AppArmor || f.LSM.AppArmorParser {
		return nil
	}
	return []Finding{finding(n, CheckAppArmor, Warning, "install it to confine them: "+installHint(f, "apparmor_parser"),
		"AppArmor is enabled in the kernel but apparmor_parser is not installed: containerd loads its default profile with it, and without it runs every container unconfined")}
}

// checkFirewall names the ports of the node's role (firewall.For) that the host's firewall
// (firewalld, ufw) does not let in, and the command that opens them.
func checkFirewall(c *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	blocked := firewall.Blocked(f.Firewall, firewall.For(c, n.Role))
	untrusted := firewall.Untrusted(f.Firewall, firewall.Sources(c, n.Role))
	if len(blocked) == 0 && len(untrusted) == 0 {
		return nil
	}
	var what []string
	if len(blocked) > 0 {
		var names []string
		for _, p := range blocked {
			names = append(names, p.String()+" ("+p.What+")")
		}
		what = append(what, "does not let in "+strings.Join(names, ", "))
	}
	if len(untrusted) > 0 {
		what = append(what, "does not let in everything from "+strings.Join(untrusted, " and ")+" (the pods' and the Services' subnets: pod traffic between nodes, and Services)")
	}
	fw := f.Firewall.Kind
	if f.Firewall.Zone != "" {
		fw += " (zone " + f.Firewall.Zone + ")"
	}
	if c.Firewall == inventory.FirewallOpen {
		return []Finding{finding(n, CheckFirewall, Info, "", "%s %s; kforge opens them (firewall: open)", fw, strings.Join(what, "; "))}
	}
	return []Finding{finding(n, CheckFirewall, Error, "set firewall: open in the inventory, or open them yourself: "+firewall.OpenCommand(f.Firewall.Kind, blocked, untrusted),
		"%s %s", fw, strings.Join(what, "; "))}
}

// checkEtcdQuorum warns, on the first master, about an even number of masters: stacked etcd
// needs a majority of its members, so 2 members tolerate no failure (as 1 does) and 4 tolerate
// one (as 3 do), with one more member that can fail. The message is the inventory's own
// (inventory.EtcdQuorumWarning, which `kforge inventory validate` prints), with the file:line
// of the masters list and what to do in one line, as apply prints a warning.
func checkEtcdQuorum(c *inventory.Cluster, n inventory.Node, _ *facts.Facts) []Finding {
	w := c.EtcdQuorumWarning()
	if w == nil || n.Name != c.Masters[0].Name {
		return nil
	}
	seen := w.Msg + "; " + w.Hint
	if c.File() != "" {
		seen = w.Error()
	}
	return []Finding{finding(n, CheckEtcdQuorum, Warning, "", "%s", seen)}
}

// Route runs the upgrade-route check alone on every node that has facts: apply asks it before
// it looks in the bundle, so a downgrade is refused as one even when the bundle lacks the
// inventory's release (building that bundle would not help).
func Route(c *inventory.Cluster, hosts map[string]*facts.Facts) Findings {
	var out Findings
	for _, n := range c.Nodes() {
		if f := hosts[n.Name]; f != nil {
			out = append(out, checkUpgradeRoute(c, n, f)...)
		}
	}
	return out
}

// checkUpgradeRoute compares a master's running kubelet (kforge's, at the bundle's path) with
// the inventory's version: a downgrade, or a change of major version, is refused before
// anything changes. Upgrades of one minor or several are apply's upgrade step's (it walks each
// minor, one master at a time, and refuses a route the bundle cannot serve).
func checkUpgradeRoute(c *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	b := f.Binaries["kubelet"]
	if n.Role != inventory.RoleMaster || !f.KubeletDropIn || b.Path != hostpath.DefaultKubeletPath || b.Version == "" {
		return nil // no cluster of kforge's here yet
	}
	from := "v" + strings.TrimPrefix(b.Version, "v")
	to := c.KubernetesVersion
	fv, ferr := version.ParseSemantic(from)
	tv, terr := version.ParseSemantic(to)
	if ferr != nil || terr != nil || fv.EqualTo(tv) {
		return nil
	}
	if tv.LessThan(fv) {
		return []Finding{finding(n, CheckUpgradeRoute, Error, "set kubernetesVersion back to "+from+"; to go back to "+to+", restore an etcd snapshot taken before the upgrade instead (kforge restore --snapshot FILE, onto hosts set up at "+to+"; the snapshots are listed in the state dir's snapshots/)",
			"the cluster runs %s; the inventory's %s is a downgrade, and a downgrade is not supported (Kubernetes has no downgrade path)", from, to)}
	}
	if fv.Major() != tv.Major() {
		return []Finding{finding(n, CheckUpgradeRoute, Error, "stay on a v"+fmt.Sprint(fv.Major())+".x release",
			"the cluster runs %s; Kubernetes does not upgrade across major versions to %s", from, to)}
	}
	// An upgrade, one minor or several: apply's upgrade step walks it (tasks/upgrade.go),
	// refusing a route the bundle cannot serve before anything changes.
	return nil
}

func checkClockSkew(_ *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	if f.Sent.IsZero() || f.Received.IsZero() {
		return nil // not gathered by Gather: nothing to compare with
	}
	skew, unc := f.ClockSkew()
	abs := skew
	if abs < 0 {
		abs = -abs
	}
	way := "ahead of"
	if skew < 0 {
		way = "behind"
	}
	seen := fmt.Sprintf("the host's clock is %s %s the workstation's (±%s)", abs.Round(time.Millisecond), way, unc.Round(time.Millisecond))
	fix := "synchronise the clocks with NTP on the host and the workstation (timedatectl set-ntp true, or chrony)"
	switch {
	case abs-unc > ClockSkewError:
		return []Finding{finding(n, CheckClockSkew, Error, fix, "%s: certificates start %s before issue, so TLS between the nodes fails", seen, 5*time.Minute)}
	case abs-unc > ClockSkewWarning:
		return []Finding{finding(n, CheckClockSkew, Warning, fix, "%s: etcd and certificate checks want clocks within %s", seen, ClockSkewWarning)}
	}
	return nil
}

func checkCapSysResource(_ *inventory.Cluster, n inventory.Node, f *facts.Facts) []Finding {
	if f.HasCapSysResource() {
		return nil
	}
	return []Finding{finding(n, CheckCapSysResource, Info, "",
		"no CAP_SYS_RESOURCE (a container?): containerd will run with restrict_oom_score_adj, so pods cannot get a negative oom_score_adj")}
}

// goarch maps `uname -m` to GOARCH.
var goarch = map[string]string{"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}

func checkArch(n inventory.Node, f *facts.Facts, want string) []Finding {
	if goarch[f.Arch] == want {
		return nil
	}
	return []Finding{finding(n, CheckArch, Error, "use a bundle built for "+or(goarch[f.Arch], f.Arch)+", or hosts of the bundle's architecture",
		"the host is %s but the bundle's binaries are linux/%s", f.Arch, want)}
}

// crossHost compares hosts: hostnames and machine IDs must be unique.
// checkVIP refuses a controlPlaneVIP that a master cannot hold (not in the subnet of any of
// its interfaces: ARP does not cross a router) or that something else holds (it answered ARP
// while no master has it).
func checkVIP(c *inventory.Cluster, hosts map[string]*facts.Facts) []Finding {
	vip := c.ControlPlaneVIP
	if vip == "" {
		return nil
	}
	var out []Finding
	held := false
	type answer struct{ host, mac string }
	var answers []answer
	for _, n := range c.Nodes() {
		f := hosts[n.Name]
		if n.Role != inventory.RoleMaster || f == nil {
			continue
		}
		switch {
		case f.VIP.Here:
			held = true
		case f.VIP.Device == "":
			out = append(out, finding(n, CheckVIP, Error,
				"choose a free address in the subnet the masters share (controlPlaneVIP in the inventory): a virtual IP is announced by ARP, which does not cross a router",
				"controlPlaneVIP %s is not in the subnet of any interface of this master (ip route get %s: through a gateway, or no route)", vip, vip))
		}
		if f.VIP.Neighbour != "" {
			answers = append(answers, answer{n.Name, f.VIP.Neighbour})
		}
	}
	if !held && len(answers) > 0 {
		a := answers[0]
		out = append(out, Finding{Host: a.host, Check: CheckVIP, Severity: Error,
			Seen: fmt.Sprintf("controlPlaneVIP %s is in use: %s answered ARP for it, and no master holds it", vip, a.mac),
			Fix:  "choose a free address (controlPlaneVIP in the inventory), or stop the machine with that MAC address from using it"})
	}
	return out
}

// nftablesKernel matches the kernels kube-proxy's nftables mode runs on (5.13 or later).
var nftablesKernel = regexp.MustCompile(`^(5\.(1[3-9]|[2-9][0-9])|[6-9]\.|[1-9][0-9]+\.)`)

// checkProxyMode says which mode kube-proxy takes and why, where a host decides it, and refuses
// nftables mode on a kernel older than 5.13.
func checkProxyMode(c *inventory.Cluster, hosts map[string]*facts.Facts) []Finding {
	mode := facts.ProxyMode(c, hosts)
	var out []Finding
	for _, n := range c.Nodes() {
		f := hosts[n.Name]
		if f == nil {
			continue
		}
		switch {
		case mode == inventory.ProxyModeNftables && !nftablesKernel.MatchString(f.Kernel):
			fix := "upgrade the kernel to 5.13 or later"
			if c.KubeProxy.Mode == inventory.ProxyModeAuto {
				fix += ", or set kubeProxy.mode: iptables in the inventory where every host's kernel has legacy iptables"
			} else {
				fix += ", or set kubeProxy.mode: iptables in the inventory"
			}
			out = append(out, finding(n, CheckProxyMode, Error, fix, "kube-proxy runs in nftables mode, which needs Linux 5.13 or later; this host runs %s", f.Kernel))
		case !f.LegacyIptables() && mode == inventory.ProxyModeIptables:
			out = append(out, finding(n, CheckProxyMode, Warning, "set kubeProxy.mode: auto (or nftables) in the inventory",
				"the kernel has no legacy iptables (the ip_tables module is missing) and kubeProxy.mode is iptables: kube-proxy, flannel and hostPorts go through iptables-nft's compatibility layer"))
		case !f.LegacyIptables():
			out = append(out, finding(n, CheckProxyMode, Info, "",
				"the kernel has no legacy iptables (the ip_tables module is missing): kube-proxy, flannel and hostPorts use nftables on every host"))
		}
		if mode == inventory.ProxyModeNftables && f.Binaries != nil && f.Binaries["nft"].Path == "" {
			out = append(out, finding(n, CheckProxyMode, Warning, "install nft (the Debian and RHEL package nftables)",
				"kube-proxy runs in nftables mode and nft is not installed: kforge reset cannot delete the nftables tables of kube-proxy, flannel and portmap here"))
		}
	}
	return out
}

func crossHost(nodes []inventory.Node, hosts map[string]*facts.Facts) []Finding {
	var out []Finding
	byHostname, byMachine := map[string][]string{}, map[string][]string{}
	for _, n := range nodes {
		f := hosts[n.Name]
		if f == nil {
			continue
		}
		byHostname[strings.ToLower(f.Hostname)] = append(byHostname[strings.ToLower(f.Hostname)], n.Name)
		if f.MachineID != "" {
			byMachine[f.MachineID] = append(byMachine[f.MachineID], n.Name)
		}
	}
	for _, n := range nodes {
		f := hosts[n.Name]
		if f == nil {
			continue
		}
		if same := others(byHostname[strings.ToLower(f.Hostname)], n.Name); len(same) > 0 {
			out = append(out, finding(n, CheckHostname, Error,
				"give every host its own hostname (hostnamectl set-hostname), and check the inventory does not list one machine twice",
				"hostname %q is also the hostname of %s", f.Hostname, strings.Join(same, ", ")))
		}
		if same := others(byMachine[f.MachineID], n.Name); len(same) > 0 {
			out = append(out, finding(n, CheckMachineID, Error,
				"if these are clones of one image, give each its own id (rm /etc/machine-id && systemd-machine-id-setup); if it is one machine, list it once",
				"machine-id %s is also the machine-id of %s: one machine listed twice, or cloned machines", f.MachineID, strings.Join(same, ", ")))
		}
	}
	return out
}

func others(names []string, self string) []string {
	var out []string
	for _, n := range names {
		if n != self {
			out = append(out, n)
		}
	}
	return out
}
