// Package facts learns what kforge needs to know about a host before changing it, in one round
// trip: Script is one POSIX shell script run with remote.Host.Run, Parse (a pure function)
// turns its output into a typed Facts. Both come from one table (table.go) whose rows each hold
// a fact's shell command (inline, or a script of package scripts) and the Go that reads that
// command's lines. Nothing here decides whether a host is fit: package preflight judges Facts
// centrally.
package facts

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kforge/kforge/hostpath"

	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/remote"
)

// Binaries are the commands whose presence and version Facts reports, in this order.
var Binaries = []string{
	"kubelet", "kubeadm", "kubectl", "containerd", "runc", "ctr", "iptables", "ip6tables", "conntrack",
	"socat", "ebtables", "ethtool", "nsenter", "mount", "losetup", "ip", "cp", "sha256sum", "systemctl",
	"curl", "nft",
}

// Facts are one host's facts, as gathered by Script and parsed by Parse.
type Facts struct {
	// Host is the inventory name of the host (remote.Host.Name); set by Gather.
	Host string

	Hostname  string // the kernel's hostname (uname -n)
	MachineID string // /etc/machine-id; "" when absent
	OS        OS
	Arch      string // uname -m: x86_64, aarch64, ...
	Kernel    string // uname -r
	Systemd   bool   // /run/systemd/system exists: PID 1 is systemd

	CPUs        int    // processors this shell may run on (nproc)
	MemoryBytes uint64 // MemTotal
	Swap        Swap
	Cgroup      Cgroup

	// UID is the effective user id commands run as (0 when root or sudo works).
	UID int
	// EtcdUser is the system user etcd runs as on a master (EtcdUserName); nil where there is none.
	EtcdUser *User
	// CapEff is the effective capability set of the commands kforge runs (/proc/self/status).
	CapEff uint64

	// Sysctls maps a key of SysctlKeys (net.ipv4.ip_forward) to its value; a key the kernel lacks (e.g.
	// net.bridge.* without br_netfilter) is absent.
	Sysctls map[string]string
	// Modules maps each kernel module kforge looks at (overlay, br_netfilter, ip_tables) to
	// "loaded" (or built in), "loadable" (modprobe -n finds it) or "missing"; empty when the
	// host did not say.
	Modules map[string]string

	// Listeners are the TCP sockets in LISTEN state (IPv4 and IPv6), sorted by port.
	Listeners []Listener

	// Binaries maps a command name from Binaries to what was found; absent: not on PATH.
	Binaries map[string]Binary

	Runtime   Runtime
	Resolver  Resolver
	LSM       LSM
	Firewall  Firewall
	Manifests Manifests
	// EtcdDataDir lists up to five entries of /var/lib/etcd; nil when empty or absent.
	EtcdDataDir []string
	// KubeletDropIn says kforge's kubelet drop-in exists (hostpath.KubeletDropInPath).
	KubeletDropIn bool
	// ServiceRoute says whether a route covers the Service subnet (Options.ServiceAddress).
	ServiceRoute Route
	// Addrs maps each global address of the host's interfaces to its device; nil when ip could
	// not list them.
	Addrs map[string]string
	// KubeletNodeIP is the --node-ip kubelet runs with (hostpath.KubeletFlagsEnvPath): one
	// address per IP family of the running cluster; empty when it has no such file.
	KubeletNodeIP string
	// VIP is what the host knows of the control plane's virtual IP (Options.VIP).
	VIP VIP

	// Files maps each requested path that is a regular file to its hex sha256; absent paths
	// (missing, or not a regular file) are not in the map.
	Files map[string]string
	// Dirs are the requested directories (Options.Dirs) that exist, in the order asked.
	Dirs []string

	// Clock is the host's clock, read first thing by the script.
	Clock time.Time
	// Sent and Received are the workstation's clock just before the command was started and
	// just after its output arrived (set by Gather): the host read Clock in between.
	Sent, Received time.Time
}

// Route is whether the kernel has a route for an address.
type Route string

const (
	RouteUnknown Route = ""        // not asked
	RouteCovered Route = "covered" // `ip route get` finds a route
	RouteMissing Route = "missing" // it does not (network unreachable), or ip is not installed
)

// VIP is a host's view of the control plane's virtual IP: whether it has it, which of its
// interfaces reaches it directly (same subnet), and who else answered ARP for it.
type VIP struct {
	// Here: one of the host's interfaces has the address.
	Here bool
	// Device is the interface the kernel reaches the address through without a gateway (the
	// address is in its subnet); "" when a gateway is needed, there is no route, or Here.
	Device string
	// Neighbour is the MAC address that answered the host's ARP request for the address (the
	// kernel's neighbour entry, REACHABLE after a connection attempt); "" when none did or Here.
	Neighbour string
}

// OS is from /etc/os-release.
type OS struct {
	ID         string // debian, ubuntu, rhel, ...
	VersionID  string // 12, 22.04, ...
	PrettyName string
}

// Swap is what /proc/swaps and /proc/meminfo say about swap.
type Swap struct {
	On         bool     // at least one swap area is active (kubeadm's test)
	TotalBytes uint64   // SwapTotal
	Devices    []string // active swap areas
}

// CgroupVersion is how cgroups are mounted.
type CgroupVersion string

const (
	CgroupV1     CgroupVersion = "v1"     // only v1 hierarchies
	CgroupHybrid CgroupVersion = "hybrid" // v1 hierarchies plus a controller-less cgroup2 (systemd's "unified")
	CgroupV2     CgroupVersion = "v2"     // cgroup2 mounted at /sys/fs/cgroup
	CgroupNone   CgroupVersion = ""       // no cgroup file system mounted
)

// Cgroup describes the host's cgroups.
type Cgroup struct {
	Version CgroupVersion
	// V1Controllers are the controllers mounted in v1 hierarchies (cpu, memory, ...), sorted;
	// named hierarchies like name=systemd are not controllers and are left out.
	V1Controllers []string
	// V2Controllers are the controllers available in the cgroup2 root (cgroup.controllers), plus
	// devices and freezer, which cgroup2 always provides, sorted; in a hybrid setup those of the
	// controller-less unified hierarchy (usually none).
	V2Controllers []string
}

// V1 says whether kubelet would use cgroup v1 on this host (v1 or hybrid).
func (c Cgroup) V1() bool { return c.Version == CgroupV1 || c.Version == CgroupHybrid }

// Listener is one listening TCP socket.
type Listener struct {
	Addr  netip.Addr
	Port  int
	Inode uint64
	// PID and Command (/proc/PID/comm, at most 15 characters) of a process holding the socket;
	// 0 and "" when not found (no awk on the host, or the process exited meanwhile).
	PID     int
	Command string
}

func (l Listener) String() string {
	s := netip.AddrPortFrom(l.Addr, uint16(l.Port)).String()
	if l.PID != 0 {
		s += fmt.Sprintf(" by PID %d (%s)", l.PID, l.Command)
	}
	return s
}

// Binary is a command found on PATH.
type Binary struct {
	Path string
	// Version is the first version number in its version output (1.36.3, 1.6.20, 2.38.1); ""
	// when none was found. Output holds the first lines of that output.
	Version string
	Output  string
}

// Resolver is how the host resolves names: the nameservers of /etc/resolv.conf, and whether
// systemd-resolved runs (Ubuntu's default, whose /etc/resolv.conf names only its own stub,
// 127.0.0.53).
type Resolver struct {
	Nameservers []string
	Resolved    bool
}

// LSM is what the host's Linux security modules enforce on containers.
type LSM struct {
	// SELinux is SELinuxEnforcing, SELinuxPermissive, or "" where SELinux is not enabled.
	SELinux string
	// AppArmor: the kernel enforces AppArmor profiles (/sys/module/apparmor/parameters/enabled);
	// AppArmorParser: apparmor_parser, with which containerd loads its default profile, is there.
	AppArmor, AppArmorParser bool
}

const (
	SELinuxEnforcing  = "enforcing"
	SELinuxPermissive = "permissive"
)

// ResolvedUpstream is the file where systemd-resolved lists the real upstream servers.
const ResolvedUpstream = "/run/systemd/resolve/resolv.conf"

// KubeletResolvConf is the resolv.conf kubelet should give pods on this host when the inventory
// names none, as kubeadm chooses it: systemd-resolved's upstream file where systemd-resolved
// runs (its stub at 127.0.0.53 in /etc/resolv.conf would make CoreDNS forward to itself), and ""
// (kubelet's default, /etc/resolv.conf) otherwise. The file must be there (Facts.Files, when
// Options.Hash asks for ResolvedUpstream).
func (f *Facts) KubeletResolvConf() string {
	if f != nil && f.Resolver.Resolved && f.Files[ResolvedUpstream] != "" {
		return ResolvedUpstream
	}
	return ""
}

// LegacyIptables says whether the host's kernel has legacy iptables (the ip_tables module,
// loaded, built in or loadable). RHEL 10's kernels have not; there only nftables works, and
// kube-proxy's auto mode picks it. A host that did not say counts as having it.
func (f *Facts) LegacyIptables() bool { return f.Modules["ip_tables"] != "missing" }

// ProxyMode is the mode kube-proxy runs in on cluster c with these hosts' facts (by name):
// c.ProxyMode, where a host without facts counts as having legacy iptables.
func ProxyMode(c *inventory.Cluster, hosts map[string]*Facts) string {
	return c.ProxyMode(func(name string) bool {
		f := hosts[name]
		return f == nil || f.LegacyIptables()
	})
}

// LoopbackOnly says whether every nameserver of /etc/resolv.conf is on the host itself (a local
// stub resolver such as systemd-resolved's 127.0.0.53); false when it lists none.
func (r Resolver) LoopbackOnly() bool {
	for _, ns := range r.Nameservers {
		if ip := net.ParseIP(ns); ip == nil || !ip.IsLoopback() {
			return false
		}
	}
	return len(r.Nameservers) > 0
}

// VersionNumber is the version number (2.4.2, 2.4.2-rc.1) in a version string as a host reports
// it (v2.4.2; containerd github.com/containerd/containerd/v2 v2.4.2 abc123); "" when it holds
// none.
func VersionNumber(s string) string { return versionNumberRE.FindString(s) }

var versionNumberRE = regexp.MustCompile(`\d+\.\d+(?:\.\d+)?(?:-[0-9A-Za-z.-]+)?`)

// Runtime is what the container runtime's socket said.
type Runtime struct {
	Socket string // the socket path asked
	// SocketExists says a Unix socket is at Socket.
	SocketExists bool
	// Answering says `ctr --address Socket version` got an answer from the server.
	Answering bool
	// Version is the server's version (containerd), when answering.
	Version string
	// Error is the tail of ctr's output when not answering; "" when ctr is missing.
	Error string
}

// Manifests describes /etc/kubernetes/manifests.
type Manifests struct {
	Exists bool
	// Entries are the names of the directory's entries, hidden ones (.name) left out, sorted.
	Entries []string
	// Marker is kforge's marker file there, nil when absent.
	Marker *Marker
}

// Marker is the content of hostpath.ManifestsMarkerPath.
type Marker struct {
	Cluster string   // the kforge cluster name
	Files   []string // manifest file names kforge wrote
}

// Owns says whether the marker lists manifest file name.
func (m *Marker) Owns(name string) bool { return m != nil && slices.Contains(m.Files, name) }

// ManifestsMarker returns the content of hostpath.ManifestsMarkerPath for cluster with the given static
// pod file names (e.g. kube-apiserver.yaml). apply uploads it with (or before) the manifests.
func ManifestsMarker(cluster string, manifests []string) []byte {
	names := slices.Clone(manifests)
	sort.Strings(names)
	var b bytes.Buffer
	b.WriteString("# Static pods written by kforge apply; kforge's preflight reads this file. Do not edit.\n")
	fmt.Fprintf(&b, "cluster %s\n", cluster)
	for _, n := range names {
		fmt.Fprintf(&b, "file %s\n", n)
	}
	return b.Bytes()
}

// CapSysResource is the CAP_SYS_RESOURCE bit of CapEff.
const CapSysResource = 24

// HasCapSysResource says whether processes may lower oom_score_adj and raise limits; without it
// (nested containers) containerd must set restrict_oom_score_adj.
func (f *Facts) HasCapSysResource() bool { return f.CapEff&(1<<CapSysResource) != 0 }

// ListenersOn returns the listeners on port.
func (f *Facts) ListenersOn(port int) []Listener {
	var out []Listener
	for _, l := range f.Listeners {
		if l.Port == port {
			out = append(out, l)
		}
	}
	return out
}

// ClockSkew is the host's clock minus the workstation's at the same moment, estimated as the
// midpoint of Sent and Received, and the uncertainty of that estimate (half the round trip).
func (f *Facts) ClockSkew() (skew, uncertainty time.Duration) {
	rtt := f.Received.Sub(f.Sent)
	mid := f.Sent.Add(rtt / 2)
	return f.Clock.Sub(mid), rtt / 2
}

// Options are the inputs of one host's facts.
type Options struct {
	// CRIEndpoint is the container runtime's socket, unix:///path or a path; default
	// inventory.DefaultCRIEndpoint.
	CRIEndpoint string
	// Hash lists absolute paths whose sha256 to report in Facts.Files (the files kforge
	// installs, so later runs can skip uploads).
	Hash []string
	// Dirs lists directories whose existence to report in Facts.Dirs, e.g.
	// templates.CACertDirCandidates (kubeadm mounts those that exist into the control plane).
	Dirs []string
	// ServiceAddress is an address of the cluster's Service subnet (its first) whose route to
	// report in Facts.ServiceRoute; none when empty.
	ServiceAddress string
	// VIP is the control plane's virtual IP to report on in Facts.VIP; none when empty.
	VIP string
	// CacheDir is where the host keeps each binary's version output, keyed by the file's size,
	// times, inode and device, so a binary runs only when it changed; default
	// hostpath.FactsCacheDir.
	CacheDir string
	// Timeout bounds the remote command; default 60s.
	Timeout time.Duration
	// Now is the workstation's clock; time.Now when nil.
	Now func() time.Time
}

func (o Options) socket() string {
	e := o.CRIEndpoint
	if e == "" {
		e = inventory.DefaultCRIEndpoint
	}
	return strings.TrimPrefix(e, "unix://")
}

func (o Options) cacheDir() string {
	if o.CacheDir == "" {
		return hostpath.FactsCacheDir
	}
	return o.CacheDir
}

// header and trailer frame the script's output; anything before the header (a login shell's
// chatter) is ignored, and a missing trailer means the output was cut short.
const (
	header  = "kforge-facts 1"
	trailer = "kforge-facts end"
)

// preamble starts the script: a known locale, the usual sbin directories on PATH, the header.
const preamble = `export LC_ALL=C PATH="$PATH:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
echo '` + header + `'
`

// Script returns the shell script that prints a host's facts: the commands of the facts table's
// rows (table.go) between the header and the trailer. It is plain POSIX sh with coreutils and
// grep; awk (for the processes holding listening sockets), timeout and sha256sum are used when
// present. Every line it prints is "key=value" or "key rest".
func Script(o Options) string {
	var b strings.Builder
	b.WriteString(preamble)
	for _, r := range table {
		if c := r.command(o); c != "" {
			b.WriteString(c + "\n")
		}
	}
	b.WriteString("echo '" + trailer + "'\n")
	return b.String()
}

// Gather runs Script on h and parses its output. Sent and Received frame the run by the
// workstation's clock.
func Gather(ctx context.Context, h remote.Host, o Options) (*Facts, error) {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out bytes.Buffer
	sent := now()
	err := h.Run(ctx, remote.Cmd{Command: Command(o), Stdout: &out})
	received := now()
	if err != nil {
		return nil, err
	}
	f, err := Parse(out.Bytes())
	if err != nil {
		return nil, &remote.HostError{Host: h.Name(), Err: fmt.Errorf("reading facts: %w", err)}
	}
	f.Host, f.Sent, f.Received = h.Name(), sent, received
	return f, nil
}

// Command is the command line Gather runs: Script under sh, so the login shell does not matter.
func Command(o Options) string {
	return "sh -c " + remote.Quote(Script(o)) + " kforge-facts"
}

// GatherAll gathers every host's facts in parallel, opts giving each host's options by name.
// It returns the facts of the hosts that answered, by host name, and the others' errors as a
// remote.Errors.
func GatherAll(ctx context.Context, hosts []remote.Host, lim remote.Limits, opts func(host string) Options) (map[string]*Facts, error) {
	res := make([]*Facts, len(hosts))
	idx := map[string]int{}
	for i, h := range hosts {
		idx[h.Name()] = i
	}
	err := remote.Each(ctx, hosts, lim, func(ctx context.Context, h remote.Host) error {
		f, err := Gather(ctx, h, opts(h.Name()))
		res[idx[h.Name()]] = f
		return err
	})
	out := map[string]*Facts{}
	for i, f := range res {
		if f != nil {
			out[hosts[i].Name()] = f
		}
	}
	return out, err
}

// SysctlKeys are the kernel settings gathered (Facts.Sysctls): those kforge sets
// (templates.SysctlsFor a dual-stack cluster).
var SysctlKeys = []string{
	"net.ipv4.ip_forward", "net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables",
	"net.ipv6.conf.all.forwarding", "vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops", "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes",
}

// EtcdUserName is the system user kforge makes on masters for etcd, and its group's name.
const EtcdUserName = "etcd"

// User is a system user's ids.
type User struct{ UID, GID int }

// ParsePasswd reads the ids of a passwd line (name:x:uid:gid:...).
func ParsePasswd(line string) (User, error) {
	f := strings.Split(line, ":")
	if len(f) < 4 {
		return User{}, fmt.Errorf("not a passwd line")
	}
	uid, err := strconv.Atoi(f[2])
	if err != nil {
		return User{}, fmt.Errorf("uid %q: %w", f[2], err)
	}
	gid, err := strconv.Atoi(f[3])
	if err != nil {
		return User{}, fmt.Errorf("gid %q: %w", f[3], err)
	}
	return User{UID: uid, GID: gid}, nil
}
