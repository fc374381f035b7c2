package templates

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/release"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/<name>.golden, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test ./templates -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s (go test ./templates -update rewrites it after review):\n--- got\n%s\n--- want\n%s", name, p, got, want)
	}
}

// haCluster is a defaulted three-master inventory with workers, at the default version.
func haCluster() *inventory.Cluster {
	c, err := (&inventory.Cluster{
		APIVersion: inventory.APIVersion, Kind: inventory.Kind, Name: "lab",
		ImageRepository:      inventory.DefaultImageRepository,
		ControlPlaneEndpoint: "198.51.100.10:6443",
		Networking: inventory.Networking{PodSubnet: inventory.DefaultPodSubnet, ServiceSubnet: inventory.DefaultServiceSubnet,
			DNSDomain: inventory.DefaultDNSDomain, NodeCIDRMaskSize: inventory.DefaultNodeCIDRMaskSize, Plugin: "flannel"},
		PKI:              inventory.PKI{KeyAlgorithm: "ecdsa-p256", CertValidity: inventory.DefaultCertValidity, CAValidity: inventory.DefaultCAValidity},
		Kubelet:          inventory.Kubelet{CgroupDriver: "systemd", AllowCgroupV1: true, ExtraArgs: map[string]string{"max-pods": "150"}},
		ContainerRuntime: inventory.ContainerRuntime{Endpoint: inventory.DefaultCRIEndpoint},
		Masters: []inventory.Host{
			{Name: "m1", Address: "198.51.100.11"},
			{Name: "m2", Address: "m2.example.test", InternalAddress: "198.51.100.12"},
			{Name: "m3", Address: "198.51.100.13"},
		},
		Workers: []inventory.Host{{Name: "w1", Address: "198.51.100.21", Taints: []inventory.Taint{
			{Key: "node.example.com/gpu", Value: "true", Effect: "NoSchedule"}, {Key: "dedicated", Effect: "NoExecute"}}}},
	}).AtVersion(release.Default())
	if err != nil {
		panic(err)
	}
	return c
}

func TestStaticPodGoldens(t *testing.T) {
	c := haCluster()
	for i, m := range c.Masters[:2] {
		cp, err := ControlPlaneFor(c, i, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for name, pod := range cp.StaticPods() {
			data, err := MarshalPod(pod)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, m.Name+"-"+strings.TrimSuffix(name, ".yaml"), data)
		}
	}
}

func TestNodeFileGoldens(t *testing.T) {
	c := haCluster()
	n := c.Nodes()[1]
	c.Kubelet.ResolvConf = "/etc/kforge/resolv.conf"
	k := KubeletFor(c, n, Options{})
	cfg, err := k.ConfigYAML()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "kubelet-config", cfg)
	golden(t, "kubeadm-flags.env", k.FlagsEnv())
	golden(t, "kubeadm-flags.env-worker", KubeletFor(c, c.Nodes()[3], Options{}).FlagsEnv())
	golden(t, "instance-config", k.InstanceConfig())
	unit, err := KubeletUnit{KubeletPath: hostpath.DefaultKubeletPath}.Render()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "kubelet.service", unit)
	drop, err := NewKubeletDropIn(hostpath.DefaultKubeletPath).Render()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "10-kforge.conf", drop)
	for _, restrict := range []bool{false, true} {
		data, err := Containerd{ConfigVersion: 2, SandboxImage: "registry.k8s.io/pause:3.10.2", RestrictOOMScoreAdj: restrict, SystemdCgroup: true, CNIBinDir: "/usr/lib/cni"}.Render()
		if err != nil {
			t.Fatal(err)
		}
		name := "containerd-config"
		if restrict {
			name += "-restrict-oom"
		}
		golden(t, name, data)
	}
	v3, err := Containerd{ConfigVersion: 3, SandboxImage: "registry.k8s.io/pause:3.10.2", RestrictOOMScoreAdj: true, SystemdCgroup: true,
		CNIBinDir: hostpath.DefaultCNIBinDir, RegistryConfigPath: "/etc/containerd/certs.d", RuncPath: "/usr/local/sbin/runc"}.Render()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "containerd2-config", v3)
	if _, err := (Containerd{ConfigVersion: 4}).Render(); err == nil {
		t.Error("an unknown containerd config version rendered")
	}
}

// TestKubeletResolvConfByHost: a host where systemd-resolved runs gives its pods the upstream
// file apply found (HostResolvConf); the inventory's kubelet.resolvConf wins over it.
func TestKubeletResolvConfByHost(t *testing.T) {
	c := haCluster()
	n := c.Nodes()[1]
	o := Options{HostResolvConf: map[string]string{n.Name: "/run/systemd/resolve/resolv.conf"}}
	for _, tc := range []struct{ inventory, want string }{
		{"", "/run/systemd/resolve/resolv.conf"},
		{"/etc/kforge/resolv.conf", "/etc/kforge/resolv.conf"},
	} {
		c.Kubelet.ResolvConf = tc.inventory
		cfg, err := KubeletFor(c, n, o).Config()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.ResolverConfig == nil || *cfg.ResolverConfig != tc.want {
			t.Errorf("kubelet.resolvConf %q: resolvConf %v, want %s", tc.inventory, cfg.ResolverConfig, tc.want)
		}
	}
	c.Kubelet.ResolvConf = ""
	if cfg, _ := KubeletFor(c, c.Nodes()[0], o).Config(); cfg.ResolverConfig != nil {
		t.Errorf("a host without systemd-resolved: resolvConf %s, want kubelet's default", *cfg.ResolverConfig)
	}
}

// The cgroup v1 and resolv.conf choices are inputs, never defaults.
func TestKubeletLabChoicesAreOptIn(t *testing.T) {
	c := haCluster()
	c.Kubelet.AllowCgroupV1 = false
	cfg, err := KubeletFor(c, c.Nodes()[0], Options{}).Config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.FailCgroupV1 != nil || cfg.ResolverConfig != nil {
		t.Errorf("failCgroupV1 %v resolvConf %v set without being asked for", cfg.FailCgroupV1, cfg.ResolverConfig)
	}
	if cfg.ClusterDNS[0] != "10.96.0.10" || cfg.ContainerRuntimeEndpoint != inventory.DefaultCRIEndpoint {
		t.Errorf("clusterDNS %v endpoint %q", cfg.ClusterDNS, cfg.ContainerRuntimeEndpoint)
	}
}

// kubelet.allowCgroupV1 allows cgroup v1 where a host has it: a host on cgroup v2 (a VM beside
// the lab's nspawn hosts) gets kubelet's default, failCgroupV1 true.
func TestAllowCgroupV1OnlyWhereTheHostIsOnV1(t *testing.T) {
	c := haCluster()
	o := Options{CgroupV2: map[string]bool{"w1": true}}
	for _, n := range c.Nodes() {
		cfg, err := KubeletFor(c, n, o).Config()
		if err != nil {
			t.Fatal(err)
		}
		v1 := !o.CgroupV2[n.Name]
		if got := cfg.FailCgroupV1 != nil && !*cfg.FailCgroupV1; got != v1 {
			t.Errorf("%s (cgroup v2: %v): failCgroupV1: false is %v, want %v", n.Name, !v1, got, v1)
		}
	}
}

func TestTemplateMissingFieldFails(t *testing.T) {
	if _, err := render("kubelet.service.tmpl", map[string]string{}); err == nil {
		t.Error("a template rendered with a missing key")
	}
}

func TestClusterDNSIP(t *testing.T) {
	for in, want := range map[string]string{"10.96.0.0/12": "10.96.0.10", "172.20.0.0/16": "172.20.0.10", "fd00::/112": "fd00::a"} {
		got, err := ClusterDNSIP(in)
		if err != nil || got != want {
			t.Errorf("%s: %q %v, want %s", in, got, err, want)
		}
	}
	if _, err := ClusterDNSIP("10.0.0.0/29"); err == nil {
		t.Error("a /29 cannot hold the DNS address")
	}
}

func TestRegistryFiles(t *testing.T) {
	files, err := RegistryFiles(Registry{Host: "registry.k8s.io", Mirrors: []string{"https://mirror.lab:5000"}, CA: []byte("PEM"), Username: "u", Password: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || files[0].Path != "/etc/containerd/certs.d/registry.k8s.io/ca.crt" || files[1].Mode != 0o600 {
		t.Fatalf("files %+v", files)
	}
	golden(t, "hosts.toml-mirror", files[1].Data)
	plain, err := RegistryFiles(Registry{Host: "docker.io", Username: "u", Password: "p"})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "hosts.toml-docker", plain[0].Data)

	// The masters' registries come before the inventory's mirror, with the cluster CA, and
	// their path names the registry they mirror.
	masters, err := RegistryFiles(Registry{Host: "registry.k8s.io", Mirrors: []string{"https://mirror.lab:5000"}, CA: []byte("PEM"),
		MasterMirrors: []string{"https://198.51.100.12:5000", "https://198.51.100.11:5000"}})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "hosts.toml-masters", masters[1].Data)
}

func TestServiceRouteUnit(t *testing.T) {
	unit, err := ServiceRoute{Subnets: []string{"10.96.0.0/12"}, NodeIPs: []string{"198.51.100.11"}}.Render()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "kforge-service-route.service", unit)
	proxy, err := APIProxy{Port: 6444, Backends: []string{"198.51.100.11:6443"}}.Unit()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "kforge-apiproxy.service", proxy)
	// systemd expands $ and % in ExecStart: every $ of the shell must be $$, and no % is left.
	for _, l := range strings.Split(string(unit), "\n") {
		if !strings.HasPrefix(l, "Exec") {
			continue
		}
		if strings.Contains(strings.ReplaceAll(l, "$$", ""), "$") || strings.Contains(l, "%") {
			t.Errorf("unescaped $ or %% for systemd in %q", l)
		}
	}
	if _, err := (ServiceRoute{Subnets: []string{"10.96.0.0"}, NodeIPs: []string{"198.51.100.11"}}).Render(); err == nil {
		t.Error("a subnet without a prefix length was rendered")
	}
}

// TestServiceRouteUnitCommands runs the unit's ExecStart and ExecStop, as systemd would after
// unescaping them, in a network and mount namespace of their own (/run is a fresh tmpfs): with
// no interface holding the node's address, start waits its bound and fails saying so; started
// before the address comes (as at a boot where network-online.target came first), it waits and
// adds the route and its marker; a second start changes nothing; stop removes both.
func TestServiceRouteUnitCommands(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	for _, c := range []string{"unshare", "ip"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skip(c + " is not installed")
		}
	}
	unitExec := serviceRouteExec(t, ServiceRoute{Subnets: []string{"10.96.0.0/12"}, NodeIPs: []string{"198.51.100.11"}, Wait: 2})
	script := `set -e
mount -t tmpfs tmpfs /run
ip link add kf0 type veth peer name kf1 && ip link set kf1 up && ip link set kf0 up
start() { sh -c "$1"; }
ip route get 10.96.0.1 >/dev/null 2>&1 && { echo "routed before start"; exit 1; }
if start "$START" 2>err; then echo "started with no address"; exit 1; fi; echo "no address: $(cat err)"
start "$START" & (sleep 0.5; ip addr add 198.51.100.11/24 dev kf0) & wait
echo "after start: $(ip route show 10.96.0.0/12) marker=$(cat ` + hostpath.ServiceRouteMarker + `)"
start "$START"; echo "after second start: $(ip route show 10.96.0.0/12)"
sh -c "$STOP"; echo "after stop: $(ip route show 10.96.0.0/12) marker=$(cat ` + hostpath.ServiceRouteMarker + ` 2>/dev/null || echo none)"
`
	cmd := exec.Command("unshare", "--net", "--mount", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "START="+unitExec["ExecStart"][0], "STOP="+unitExec["ExecStop"][0])
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := "no address: no interface holds 198.51.100.11 after 2 s\n" +
		"after start: 10.96.0.0/12 dev kf0 scope link src 198.51.100.11 marker=kf0\n" +
		"after second start: 10.96.0.0/12 dev kf0 scope link src 198.51.100.11\n" +
		"after stop: marker=none\n"
	if got := squeeze(out); got != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
}

// TestServiceRouteUnitDualStack runs a dual-stack cluster's unit as TestServiceRouteUnitCommands
// runs a single-stack one: each family's range goes through the interface holding the node's
// address of that family, the IPv6 one only once duplicate address detection is done with the
// address, and stop removes both routes and markers.
func TestServiceRouteUnitDualStack(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	for _, c := range []string{"unshare", "ip"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skip(c + " is not installed")
		}
	}
	unitExec := serviceRouteExec(t, ServiceRoute{Subnets: []string{"10.96.0.0/12", "fd00:10:96::/112"}, NodeIPs: []string{"198.51.100.11", "2001:db8::11"}, Wait: 5})
	if len(unitExec["ExecStart"]) != 2 || len(unitExec["ExecStop"]) != 2 {
		t.Fatalf("want two ExecStart and two ExecStop, got %q", unitExec)
	}
	script := `set -e
mount -t tmpfs tmpfs /run
sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.default.disable_ipv6=0
ip link add kf0 type veth peer name kf1 && ip link add kf2 type veth peer name kf3
for l in kf0 kf1 kf2 kf3; do ip link set $l up; done
ip addr add 198.51.100.11/24 dev kf0 && ip addr add 2001:db8::11/64 dev kf2
ip -o addr show to 2001:db8::11 tentative | grep -q . && echo "tentative at start"
sh -c "$START1"; sh -c "$START2"
echo "v4: $(ip route show 10.96.0.0/12) marker=$(cat ` + hostpath.ServiceRouteMarker + `)"
echo "v6: $(ip -6 route show fd00:10:96::/112) marker=$(cat ` + hostpath.ServiceRouteMarkerIPv6 + `)"
sh -c "$STOP1"; sh -c "$STOP2"
echo "after stop: $(ip route show 10.96.0.0/12)$(ip -6 route show fd00:10:96::/112) markers=$(ls /run | wc -l)"
`
	cmd := exec.Command("unshare", "--net", "--mount", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "START1="+unitExec["ExecStart"][0], "START2="+unitExec["ExecStart"][1], "STOP1="+unitExec["ExecStop"][0], "STOP2="+unitExec["ExecStop"][1])
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := squeeze(out)
	want := "tentative at start\n" +
		"v4: 10.96.0.0/12 dev kf0 scope link src 198.51.100.11 marker=kf0\n" +
		"v6: fd00:10:96::/112 dev kf2 src 2001:db8::11 metric 1024 pref medium marker=kf2\n" +
		"after stop: markers=0\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
}

// serviceRouteExec renders r and returns its ExecStart and ExecStop commands, in order, as
// systemd runs them (its $$ unescaped).
func serviceRouteExec(t *testing.T, r ServiceRoute) map[string][]string {
	t.Helper()
	unit, err := r.Render()
	if err != nil {
		t.Fatal(err)
	}
	unitExec := map[string][]string{}
	for _, l := range strings.Split(string(unit), "\n") {
		if k, v, ok := strings.Cut(l, "=/bin/sh -c "); ok && strings.HasPrefix(k, "Exec") {
			unitExec[k] = append(unitExec[k], strings.ReplaceAll(strings.Trim(v, "'"), "$$", "$"))
		}
	}
	if len(unitExec["ExecStart"]) == 0 || len(unitExec["ExecStop"]) == 0 {
		t.Fatalf("want ExecStart and ExecStop, got %q", unitExec)
	}
	return unitExec
}

// squeeze is out with each line's runs of spaces made one (ip pads its output with spaces,
// differently in each version) and no trailing spaces.
func squeeze(out []byte) string {
	var got []string
	for _, l := range strings.Split(string(out), "\n") {
		got = append(got, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(got, "\n")
}

// The scheduled snapshots' units: golden files, and systemd's own verification of the pair
// (systemd-analyze verify, with the program's path pointed at a binary that exists here), so a
// setting systemd does not know or a timer that never fires fails here, not on a master.
func TestEtcdSnapshotUnits(t *testing.T) {
	e := EtcdSnapshot{Every: 90 * time.Minute, Keep: 5, Member: "m1", Endpoint: "https://127.0.0.1:2379", Kubernetes: "v1.36.3"}
	unit, err := e.Unit()
	if err != nil {
		t.Fatal(err)
	}
	timer, err := e.Timer()
	if err != nil {
		t.Fatal(err)
	}
	config, err := e.Config()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "kforge-etcd-snapshot.service", unit)
	golden(t, "kforge-etcd-snapshot.timer", timer)
	golden(t, "etcd-snapshot.json", config)
	if !strings.Contains(string(timer), "OnUnitActiveSec=5400s\n") {
		t.Errorf("the timer does not fire every 90 minutes:\n%s", timer)
	}
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	dir := t.TempDir()
	for name, data := range map[string][]byte{
		hostpath.EtcdSnapshotUnit:  bytes.ReplaceAll(unit, []byte(hostpath.EtcdSnapshotPath), []byte("/bin/true")),
		hostpath.EtcdSnapshotTimer: timer,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(sa, "verify", "--man=no", filepath.Join(dir, hostpath.EtcdSnapshotUnit), filepath.Join(dir, hostpath.EtcdSnapshotTimer)).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
