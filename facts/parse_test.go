package facts

import (
	"errors"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustParse(t *testing.T, out []byte) *Facts {
	t.Helper()
	f, err := Parse(out)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return f
}

// TestParseDebianHybrid reads the script's real output on a Debian 12 machine with hybrid
// cgroups, no systemd, no swap, no CAP_SYS_RESOURCE and no container runtime running.
func TestParseDebianHybrid(t *testing.T) {
	f := mustParse(t, readTestdata(t, "debian12-hybrid.txt"))
	if f.Hostname != "vm" || f.Arch != "x86_64" || f.Kernel != "6.18.44-fc-v595" || f.UID != 0 || f.CPUs != 2 {
		t.Errorf("identity: %+v", f)
	}
	if f.MachineID != "3d1219c7c4c5404aaa1f6d2a48adfda4" || f.Systemd {
		t.Errorf("machine-id %q systemd %v", f.MachineID, f.Systemd)
	}
	if want := (OS{ID: "debian", VersionID: "12", PrettyName: "Debian GNU/Linux 12 (bookworm)"}); f.OS != want {
		t.Errorf("OS %+v, want %+v", f.OS, want)
	}
	if f.MemoryBytes != 24684096*1024 || f.Swap.On || f.Swap.TotalBytes != 0 {
		t.Errorf("memory %d swap %+v", f.MemoryBytes, f.Swap)
	}
	wantCg := Cgroup{Version: CgroupHybrid, V1Controllers: []string{"blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "memory", "pids"}, V2Controllers: []string{"hugetlb"}}
	if !reflect.DeepEqual(f.Cgroup, wantCg) || !f.Cgroup.V1() {
		t.Errorf("cgroup %+v, want %+v", f.Cgroup, wantCg)
	}
	if f.CapEff != 0x1fffeffffff || f.HasCapSysResource() {
		t.Errorf("CapEff %x, CAP_SYS_RESOURCE %v; want it missing", f.CapEff, f.HasCapSysResource())
	}
	if want := map[string]string{"net.ipv4.ip_forward": "0", "net.bridge.bridge-nf-call-iptables": "1", "net.bridge.bridge-nf-call-ip6tables": "1"}; !reflect.DeepEqual(f.Sysctls, want) {
		t.Errorf("sysctls %v", f.Sysctls)
	}
	if want := []Listener{{Addr: netip.MustParseAddr("0.0.0.0"), Port: 2024, Inode: 1595}}; !reflect.DeepEqual(f.Listeners, want) {
		t.Errorf("listeners %+v", f.Listeners)
	}
	for name, v := range map[string]string{"containerd": "1.6.20", "runc": "1.1.5", "ctr": "1.6.20", "iptables": "1.8.9", "mount": "2.38.1", "ip": "6.1.0", "cp": "9.1", "nsenter": "2.38.1"} {
		if b := f.Binaries[name]; b.Version != v || !strings.HasPrefix(b.Path, "/") {
			t.Errorf("%s: %+v, want version %s", name, b, v)
		}
	}
	if _, ok := f.Binaries["kubelet"]; ok {
		t.Error("kubelet reported present")
	}
	if f.Binaries["kubectl"].Version != "" {
		t.Errorf("kubectl printed only an error but got version %q", f.Binaries["kubectl"].Version)
	}
	if f.Runtime != (Runtime{Socket: "/run/containerd/containerd.sock"}) {
		t.Errorf("runtime %+v", f.Runtime)
	}
	if f.Manifests.Exists || f.Manifests.Marker != nil || f.EtcdDataDir != nil || f.KubeletDropIn {
		t.Errorf("manifests %+v etcd %v dropin %v", f.Manifests, f.EtcdDataDir, f.KubeletDropIn)
	}
	if want := map[string]string{
		"/etc/hostname":   "427f93cafd9cc19be6eec03e590c9c6cdf9f688a5eaf21fa8d72351e2b15fd05",
		"/etc/os-release": "59a77b5f2666d9c85c489bd1911a6eebbd91ef22fe48b90a3b75f1b21f3844d4",
	}; !reflect.DeepEqual(f.Files, want) {
		t.Errorf("files %v", f.Files)
	}
	if want := time.Unix(0, 1795295173674174604).UTC(); !f.Clock.Equal(want) {
		t.Errorf("clock %v, want %v", f.Clock, want)
	}
}

// TestParseRerunMaster reads a cgroup v2 master where kforge already runs the control plane:
// listeners with their processes (IPv4 and IPv6), the runtime answering, kforge's marker.
func TestParseRerunMaster(t *testing.T) {
	f := mustParse(t, readTestdata(t, "ubuntu-v2-rerun.txt"))
	if f.OS != (OS{ID: "ubuntu", VersionID: "24.04", PrettyName: "Ubuntu 24.04 LTS"}) || !f.Systemd || f.CPUs != 4 {
		t.Errorf("OS %+v systemd %v cpus %d", f.OS, f.Systemd, f.CPUs)
	}
	if !f.Swap.On || f.Swap.TotalBytes != 2097148*1024 || !reflect.DeepEqual(f.Swap.Devices, []string{"/swap.img"}) {
		t.Errorf("swap %+v", f.Swap)
	}
	wantCg := Cgroup{Version: CgroupV2, V2Controllers: []string{"cpu", "cpuset", "devices", "freezer", "hugetlb", "io", "memory", "misc", "pids", "rdma"}}
	if !reflect.DeepEqual(f.Cgroup, wantCg) || f.Cgroup.V1() {
		t.Errorf("cgroup %+v, want %+v", f.Cgroup, wantCg)
	}
	if !f.HasCapSysResource() {
		t.Error("CAP_SYS_RESOURCE not seen in 000001ffffffffff")
	}
	a := netip.MustParseAddr
	want := []Listener{
		{a("0.0.0.0"), 22, 40004, 1, "systemd"},
		{a("127.0.0.1"), 2379, 40003, 902, "etcd"},
		{a("192.168.1.10"), 2380, 40002, 902, "etcd"},
		{a("::"), 6443, 40005, 903, "kube-apiserver"},
		{a("127.0.0.1"), 8080, 40007, 0, ""}, // holder not found
		{a("::1"), 10257, 40006, 901, "kube-controller"},
		{a("127.0.0.1"), 10259, 40001, 904, "kube-scheduler"},
	}
	if !reflect.DeepEqual(f.Listeners, want) {
		t.Errorf("listeners\n got %+v\nwant %+v", f.Listeners, want)
	}
	if got := f.ListenersOn(6443); len(got) != 1 || got[0].String() != "[::]:6443 by PID 903 (kube-apiserver)" {
		t.Errorf("ListenersOn(6443) = %v", got)
	}
	if f.Binaries["kubelet"].Version != "1.36.3" || f.Binaries["kubeadm"].Version != "1.36.3" || f.Binaries["containerd"].Version != "2.1.4" {
		t.Errorf("versions %+v", f.Binaries)
	}
	if b := f.Binaries["socat"]; b.Version != "1.8.0.0" || !strings.Contains(b.Output, "\n") {
		t.Errorf("socat %+v: want the version from its second line", b)
	}
	if want := (Runtime{Socket: "/run/containerd/containerd.sock", SocketExists: true, Answering: true, Version: "v2.1.4"}); f.Runtime != want {
		t.Errorf("runtime %+v", f.Runtime)
	}
	wantMan := Manifests{Exists: true, Entries: []string{"etcd.yaml", "kube-apiserver.yaml", "kube-controller-manager.yaml", "kube-scheduler.yaml"},
		Marker: &Marker{Cluster: "demo", Files: []string{"etcd.yaml", "kube-apiserver.yaml", "kube-controller-manager.yaml", "kube-scheduler.yaml"}}}
	if !reflect.DeepEqual(f.Manifests, wantMan) {
		t.Errorf("manifests %+v marker %+v", f.Manifests, f.Manifests.Marker)
	}
	// Ubuntu's resolver: systemd-resolved's stub in /etc/resolv.conf, the upstream servers in
	// its own file, which kubelet gives pods instead (as kubeadm does).
	if !reflect.DeepEqual(f.Resolver, Resolver{Nameservers: []string{"127.0.0.53"}, Resolved: true}) || !f.Resolver.LoopbackOnly() || f.KubeletResolvConf() != ResolvedUpstream {
		t.Errorf("resolver %+v loopback only %v, kubelet's resolv.conf %q", f.Resolver, f.Resolver.LoopbackOnly(), f.KubeletResolvConf())
	}
	if f.LSM != (LSM{AppArmor: true, AppArmorParser: true}) {
		t.Errorf("LSM %+v: want AppArmor with its parser, no SELinux", f.LSM)
	}
	if !f.Manifests.Marker.Owns("etcd.yaml") || f.Manifests.Marker.Owns("kube-vip.yaml") {
		t.Error("Marker.Owns")
	}
	if !reflect.DeepEqual(f.Dirs, []string{"/etc/ca-certificates", "/usr/share/ca-certificates"}) {
		t.Errorf("dirs %q", f.Dirs)
	}
	if !reflect.DeepEqual(f.EtcdDataDir, []string{"member"}) || !f.KubeletDropIn {
		t.Errorf("etcd %v dropin %v", f.EtcdDataDir, f.KubeletDropIn)
	}
}

// TestManifestsMarkerRoundTrip: what apply writes is what Parse reads back.
func TestManifestsMarkerRoundTrip(t *testing.T) {
	data := ManifestsMarker("prod", []string{"kube-scheduler.yaml", "etcd.yaml"})
	var out strings.Builder
	out.WriteString(header + "\nclock=1\nuid=0\nhostname=h\narch=x86_64\nkernel=6.1.0\ncpus=1\nmeminfo MemTotal: 1\ncapeff=0\nmanifests exists\n")
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		out.WriteString("marker " + l + "\n")
	}
	out.WriteString(trailer + "\n")
	f := mustParse(t, []byte(out.String()))
	if want := (&Marker{Cluster: "prod", Files: []string{"etcd.yaml", "kube-scheduler.yaml"}}); !reflect.DeepEqual(f.Manifests.Marker, want) {
		t.Errorf("marker %+v, want %+v", f.Manifests.Marker, want)
	}
}

func TestParseTCPAddresses(t *testing.T) {
	for _, c := range []struct {
		line string
		big  bool
		want string
	}{
		{"tcp 0: 0A01A8C0:1F90 00000000:0000 0A 0:0 00:0 0 0 0 7 1", false, "192.168.1.10:8080"},
		{"tcp 0: C0A8010A:1F90 00000000:0000 0A 0:0 00:0 0 0 0 7 1", true, "192.168.1.10:8080"},
		{"tcp6 0: 00000000000000000000000001000000:0016 0:0 0A 0:0 00:0 0 0 0 7 1", false, "[::1]:22"},
		{"tcp6 0: 0000000000000000FFFF00000A01A8C0:0016 0:0 0A 0:0 00:0 0 0 0 7 1", false, "[::ffff:192.168.1.10]:22"},
		{"tcp6 0: 000080FE00000000FF000002030000FE:0016 0:0 0A 0:0 00:0 0 0 0 7 1", false, "[fe80::200:ff:fe00:3]:22"},
	} {
		l, err := parseTCP(c.line, c.big)
		if err != nil {
			t.Errorf("%q: %v", c.line, err)
			continue
		}
		if got := netip.AddrPortFrom(l.Addr, uint16(l.Port)).String(); got != c.want || l.Inode != 7 {
			t.Errorf("%q: %s inode %d, want %s inode 7", c.line, got, l.Inode, c.want)
		}
	}
}

func TestParseClock(t *testing.T) {
	for in, want := range map[string]time.Time{
		"1795295173674174604": time.Unix(0, 1795295173674174604),
		"1795295173":          time.Unix(1795295173, 0),
		"1795295173%N":        time.Unix(1795295173, 0), // busybox without %N
		"1795295173N":         time.Unix(1795295173, 0),
	} {
		got, err := parseClock(in)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseClock(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "abc", "17952951736741746041234", "179529517367417"} {
		if _, err := parseClock(in); err == nil {
			t.Errorf("parseClock(%q) accepted", in)
		}
	}
}

// TestParseMalformed: each broken output is refused with a ParseError that points at the
// problem.
func TestParseMalformed(t *testing.T) {
	good := string(readTestdata(t, "ubuntu-v2-rerun.txt"))
	replace := func(old, new string) string {
		if !strings.Contains(good, old) {
			t.Fatalf("testdata lacks %q", old)
		}
		return strings.Replace(good, old, new, 1)
	}
	for _, c := range []struct {
		name, out, want string
	}{
		{"empty", "", "no \"kforge-facts 1\" header"},
		{"not our script", "sh: 1: Syntax error: \"(\" unexpected\n", "no \"kforge-facts 1\" header"},
		{"cut short", good[:strings.Index(good, "bin kubelet")], "cut short"},
		{"clock", replace("clock=1795295173500000000", "clock=soon"), "clock is not a number"},
		{"uid", replace("uid=0", "uid=root"), `line 4 "uid=root"`},
		{"cpus zero", replace("cpus=4", "cpus=0"), "positive"},
		{"capeff", replace("capeff=000001ffffffffff", "capeff=xyz"), "capeff=xyz"},
		{"missing hostname", replace("hostname=m1\n", ""), "missing hostname"},
		{"missing memory", replace("meminfo MemTotal: 8123456\n", ""), "missing memtotal"},
		{"meminfo", replace("meminfo MemTotal: 8123456", "meminfo MemTotal: lots"), "not a number of kB"},
		{"meminfo fields", replace("meminfo MemTotal: 8123456", "meminfo MemTotal:"), "meminfo KEY"},
		{"sysctl", replace("sysctl net/ipv4/ip_forward 1", "sysctl net/ipv4/ip_forward"), "sysctl KEY VALUE"},
		{"kmod", replace("sysctl net/ipv4/ip_forward 1", "kmod overlay maybe\nsysctl net/ipv4/ip_forward 1"), "kmod NAME loaded|loadable|missing"},
		{"tcp hex", replace("0100007F:2813", "0100007G:2813"), "not tcp hex"},
		{"tcp short", replace("0A 00000000:00000000 00:00000000 00000000     0        0 40004 1 0000000000000000 100 0 0 10 0", "0A"), "at least 10 fields"},
		{"tcp state", replace("00000000:0016 00000000:0000 0A", "00000000:0016 00000000:0000 01"), "not LISTEN"},
		{"tcp6 length", replace("00000000000000000000000001000000:2811", "01000000:2811"), "not tcp6 hex"},
		{"tcp port", replace("00000000:0016 ", "00000000:ZZ16 "), "port"},
		{"tcp inode", replace(" 40004 1 ", " x40004 1 "), "inode"},
		{"sock inode", replace("sock 40001 904", "sock ino 904"), "inode is not a number"},
		{"sock pid", replace("sock 40001 904", "sock 40001 pid"), "PID is not a number"},
		{"bin path", replace("bin kubelet /usr/bin/kubelet", "bin kubelet kubelet"), "bin NAME /PATH"},
		{"ver orphan", replace("ver kubelet Kubernetes v1.36.3", "ver kubectl Client Version: v1.36.3"), "not reported found"},
		{"manifest slash", replace("manifest etcd.yaml", "manifest ../etcd.yaml"), "manifest NAME"},
		{"dir", replace("etcd member", "dir etc/pki"), "dir /PATH"},
		{"sum", replace("sum 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae", "sum 2c26b4"), "sum SHA256 /PATH"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.out))
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse accepted it or returned %T %v", err, err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
		})
	}
}

// FuzzParse: Parse never panics, and what it accepts has the required facts.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"debian12-hybrid.txt", "ubuntu-v2-rerun.txt"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		fa, err := Parse(out)
		if err == nil && (fa.Hostname == "" && !strings.Contains(string(out), "hostname=\n") || fa.CPUs < 1) {
			t.Errorf("accepted output without required facts: %+v", fa)
		}
	})
}

// BenchmarkParse: parsing one host's facts (a re-run master) on the workstation.
func BenchmarkParse(b *testing.B) {
	out, err := os.ReadFile("testdata/ubuntu-v2-rerun.txt")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(out)))
	for b.Loop() {
		if _, err := Parse(out); err != nil {
			b.Fatal(err)
		}
	}
}

// TestParseKernelModules: the script's kmod lines say, per module, loaded, loadable or missing.
func TestParseKernelModules(t *testing.T) {
	out := strings.Replace(string(readTestdata(t, "ubuntu-v2-rerun.txt")), "sysctl net/ipv4/ip_forward 1", "kmod overlay loaded\nkmod br_netfilter loadable\nsysctl net/ipv4/ip_forward 1", 1)
	f, err := Parse([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if f.Modules["overlay"] != "loaded" || f.Modules["br_netfilter"] != "loadable" || len(f.Modules) != 2 {
		t.Errorf("modules %v", f.Modules)
	}
	if !f.LegacyIptables() {
		t.Errorf("a host that did not say whether ip_tables is there: legacy iptables false; want true")
	}
	for state, legacy := range map[string]bool{"loaded": true, "loadable": true, "missing": false} {
		f := mustParse(t, []byte(strings.Replace(out, "kmod overlay loaded", "kmod overlay loaded\nkmod ip_tables "+state, 1)))
		if f.LegacyIptables() != legacy {
			t.Errorf("kmod ip_tables %s: legacy iptables %v; want %v", state, f.LegacyIptables(), legacy)
		}
	}
}

// TestParseSwapInAContainer: a host whose /proc/meminfo is a container's view (SwapTotal 0)
// while /proc/swaps lists the machine's 1 GiB area: the swap is 1 GiB, not 0 (the preflight
// error said "swap is on (0 MiB on /swapfile)").
func TestParseSwapInAContainer(t *testing.T) {
	out := strings.Replace(string(readTestdata(t, "ubuntu-v2-rerun.txt")), "meminfo SwapTotal: 2097148\nswap /swap.img 2097148\n",
		"meminfo SwapTotal: 0\nswap /swapfile 1048572\n", 1)
	f := mustParse(t, []byte(out))
	if !f.Swap.On || f.Swap.TotalBytes != 1048572*1024 || !reflect.DeepEqual(f.Swap.Devices, []string{"/swapfile"}) {
		t.Errorf("swap %+v; want 1048572 KiB on /swapfile", f.Swap)
	}
}

// TestResolver: which resolv.conf kubelet gets, and when /etc/resolv.conf names only the host
// itself.
func TestResolver(t *testing.T) {
	for _, c := range []struct {
		name     string
		r        Resolver
		files    map[string]string
		loopback bool
		kubelet  string
	}{
		{"Debian: an upstream server", Resolver{Nameservers: []string{"192.0.2.53"}}, nil, false, ""},
		{"Ubuntu: the stub, systemd-resolved running", Resolver{Nameservers: []string{"127.0.0.53"}, Resolved: true}, map[string]string{ResolvedUpstream: "ab"}, true, ResolvedUpstream},
		{"the stub, its upstream file missing", Resolver{Nameservers: []string{"127.0.0.53"}, Resolved: true}, nil, true, ""},
		{"a local dnsmasq, no systemd-resolved", Resolver{Nameservers: []string{"127.0.0.1", "::1"}}, map[string]string{ResolvedUpstream: "ab"}, true, ""},
		{"a local one and an upstream one", Resolver{Nameservers: []string{"127.0.0.1", "192.0.2.53"}}, nil, false, ""},
		{"no nameserver at all", Resolver{}, nil, false, ""},
	} {
		f := &Facts{Resolver: c.r, Files: c.files}
		if got := c.r.LoopbackOnly(); got != c.loopback {
			t.Errorf("%s: LoopbackOnly = %v, want %v", c.name, got, c.loopback)
		}
		if got := f.KubeletResolvConf(); got != c.kubelet {
			t.Errorf("%s: KubeletResolvConf = %q, want %q", c.name, got, c.kubelet)
		}
	}
}

// TestFirewall: firewalld's and ufw's lines read into the ports they let in, and which ranges
// they allow.
func TestFirewall(t *testing.T) {
	var fw Firewall
	p := &parsing{f: &Facts{}}
	for _, l := range []string{"firewall=ufw", "ufw Status: active", "ufw To                         Action      From",
		"ufw 22/tcp                     ALLOW       Anywhere", "ufw 2379:2380/tcp              ALLOW IN    198.51.100.0/24",
		"ufw 30000:32767/udp (v6)       ALLOW       Anywhere (v6)", "ufw 8472/udp                   DENY        Anywhere", "ufw 53                         ALLOW       Anywhere",
		"ufw Anywhere                   ALLOW       10.244.0.0/16", "ufw Anywhere                   ALLOW FWD   10.96.0.0/12"} {
		k, v, _ := strings.Cut(l, "=")
		if !strings.Contains(l, "=") || strings.HasPrefix(l, "ufw ") {
			k, v, _ = strings.Cut(l, " ")
		}
		for _, row := range table {
			if slices.Contains(row.keys, k+"=") || slices.Contains(row.keys, k+" ") {
				if err := row.parse(p, k, v); err != nil {
					t.Fatalf("%q: %v", l, err)
				}
			}
		}
	}
	fw = p.f.Firewall
	want := []PortRange{{"tcp", 22, 22}, {"tcp", 2379, 2380}, {"udp", 30000, 32767}, {"", 53, 53}, {}}
	if fw.Kind != "ufw" || !reflect.DeepEqual(fw.Open, want) || !slices.Equal(fw.Sources, []string{"10.244.0.0/16"}) {
		t.Errorf("ufw: %+v, want open %+v and the one source 10.244.0.0/16 (a routed rule is no source)", fw, want)
	}
	if !fw.Trusts("10.244.0.0/16") || fw.Trusts("10.96.0.0/12") {
		t.Errorf("ufw with sources %v trusts the pod subnet %v, the Service subnet %v; want true, false", fw.Sources, fw.Trusts("10.244.0.0/16"), fw.Trusts("10.96.0.0/12"))
	}
	if !(Firewall{Kind: "ufw", Sources: []string{"Anywhere"}}).Trusts("10.96.0.0/12") || !(Firewall{Kind: "firewalld", Zone: "trusted"}).Trusts("10.96.0.0/12") ||
		(Firewall{Kind: "firewalld", Zone: "public", Sources: []string{"10.244.0.0/16"}}).Trusts("10.96.0.0/12") || !(Firewall{Kind: "none"}).Trusts("10.96.0.0/12") {
		t.Error("trusted: ufw's Anywhere rule and firewalld's trusted zone trust every source, firewalld's public zone only its trusted zone's sources, no firewall everything")
	}
	fw.Open = fw.Open[:len(fw.Open)-1] // the Anywhere-from-the-pod-subnet rule lets every port in; the rest:
	for r, allowed := range map[PortRange]bool{
		{"tcp", 2379, 2380}: true, {"tcp", 2380, 2380}: true, {"tcp", 2379, 2381}: false,
		{"udp", 53, 53}: true, {"udp", 8472, 8472}: false, {"tcp", 30000, 32767}: false,
	} {
		if fw.Allows(r) != allowed {
			t.Errorf("ufw allows %+v: %v, want %v", r, !allowed, allowed)
		}
	}
	if !(Firewall{Kind: "firewalld", Zone: "trusted"}).Allows(PortRange{"tcp", 6443, 6443}) || (Firewall{Kind: "firewalld", Zone: "public"}).Allows(PortRange{"tcp", 6443, 6443}) {
		t.Error("firewalld's trusted zone lets everything in; public, only what it lists")
	}
	if !(Firewall{Kind: "ufw", Open: []PortRange{{}}}).Allows(PortRange{"udp", 8472, 8472}) {
		t.Error("ufw's Anywhere rule lets every port in")
	}
}
