// Package templates renders every file kforge puts on a host: static-pod manifests (typed
// k8s.io/api objects), the kubelet configuration (typed), the kubelet systemd unit, drop-in and
// flags file, and containerd's configuration (text templates embedded below), and assembles
// them with the PKI into the tree each host receives (Tree).
package templates

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

//go:embed files/*
var files embed.FS

var tmpl = template.Must(template.New("").Option("missingkey=error").ParseFS(files, "files/*.tmpl"))

func render(name string, data any) ([]byte, error) {
	var b bytes.Buffer
	if err := tmpl.ExecuteTemplate(&b, name, data); err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	return b.Bytes(), nil
}

// KubeletUnit is the kubelet systemd unit.
type KubeletUnit struct {
	KubeletPath string
}

// Render returns the unit file.
func (u KubeletUnit) Render() ([]byte, error) { return render("kubelet.service.tmpl", u) }

// KubeletDropIn is the 10-kubeadm.conf-style drop-in wiring kubeconfigs, config and flags.
type KubeletDropIn struct {
	KubeletPath, BootstrapKubeconfig, Kubeconfig, Config, FlagsEnv string
	// Standalone: no kubeconfig (an etcd host's kubelet, Kubelet.Standalone).
	Standalone bool
}

// NewKubeletDropIn fills in kubeadm's paths.
func NewKubeletDropIn(kubeletPath string) KubeletDropIn {
	return KubeletDropIn{KubeletPath: kubeletPath, BootstrapKubeconfig: hostpath.BootstrapKubeletConfig, Kubeconfig: hostpath.KubeletKubeconfig, Config: hostpath.KubeletConfigPath, FlagsEnv: hostpath.KubeletFlagsEnvPath}
}

// Render returns the drop-in file.
func (d KubeletDropIn) Render() ([]byte, error) { return render("10-kforge.conf.tmpl", d) }

// Containerd is containerd's configuration input.
type Containerd struct {
	// ConfigVersion is the config format of the containerd that reads it: 2 for containerd 1.x
	// (a host's own), 3 for containerd 2.x (the bundle's).
	ConfigVersion int
	SandboxImage  string
	// RestrictOOMScoreAdj is detected per host by apply (true where negative oom_score_adj is
	// not allowed).
	RestrictOOMScoreAdj bool
	SystemdCgroup       bool
	CNIBinDir           string
	// RegistryConfigPath is the directory of per-registry hosts.toml files (config version 3).
	RegistryConfigPath string
	// RuncPath is the runc binary containerd runs; empty: runc on containerd's PATH.
	RuncPath string
}

// Render returns config.toml in the format of c.ConfigVersion.
func (c Containerd) Render() ([]byte, error) {
	switch c.ConfigVersion {
	case 2:
		return render("containerd-config.toml.tmpl", c)
	case 3:
		return render("containerd2-config.toml.tmpl", c)
	}
	return nil, fmt.Errorf("containerd config version %d: kforge writes versions 2 (containerd 1.x) and 3 (containerd 2.x)", c.ConfigVersion)
}

// ContainerdUnit is the systemd unit of the containerd kforge installs: containerd's own
// (containerd.service of its release), running the binary at Containerd.
type ContainerdUnit struct{ Containerd string }

// Render returns containerd.service.
func (u ContainerdUnit) Render() ([]byte, error) { return render("containerd.service.tmpl", u) }

// ServiceRoute is the unit that routes the Service subnet where no other route covers it
// (hostpath.ServiceRouteUnitPath): see its template for why. A dual-stack cluster's unit routes
// each family's range through the interface holding the node's address of that family.
type ServiceRoute struct {
	Subnets []string // the cluster's Service ranges (inventory Networking.ServiceSubnets)
	NodeIPs []string // the node's address in each range's family (inventory Host.NodeIPs)
	Wait    int      // seconds to wait at boot for an interface to hold each address; 0 is 120
}

// serviceRoute is one family's route of the unit.
type serviceRoute struct {
	Subnet, NodeIP, Probe, Marker string
	IPv6                          bool
}

// Render returns kforge-service-route.service.
func (r ServiceRoute) Render() ([]byte, error) {
	if len(r.Subnets) != len(r.NodeIPs) || len(r.Subnets) == 0 {
		return nil, fmt.Errorf("service route: %d Service ranges for %d node addresses", len(r.Subnets), len(r.NodeIPs))
	}
	var routes []serviceRoute
	for i, s := range r.Subnets {
		probe, err := pki.FirstServiceIP(s)
		if err != nil {
			return nil, err
		}
		v6, marker := probe.To4() == nil, hostpath.ServiceRouteMarker
		if v6 {
			marker = hostpath.ServiceRouteMarkerIPv6
		}
		routes = append(routes, serviceRoute{netip.MustParsePrefix(s).Masked().String(), r.NodeIPs[i], probe.String(), marker, v6})
	}
	if r.Wait == 0 {
		r.Wait = 120
	}
	subnets := make([]string, len(routes))
	for i, rt := range routes {
		subnets[i] = rt.Subnet
	}
	return render("kforge-service-route.service.tmpl", struct {
		Subnets       string
		Routes        []serviceRoute
		Wait, Timeout int
	}{strings.Join(subnets, " and "), routes, r.Wait, r.Wait + 30})
}

// Sysctl is one kernel setting kforge makes on every node.
type Sysctl struct{ Key, Value string }

// Sysctls are the kernel settings of every node (hostpath.SysctlFile, applied at each boot):
// what pod networking needs, and the values kubelet wants with protectKernelDefaults (kubelet's
// setupKernelTunables), which it then only checks instead of writing them itself.
var Sysctls = []Sysctl{
	{"net.ipv4.ip_forward", "1"},
	{"net.bridge.bridge-nf-call-iptables", "1"},
	{"net.bridge.bridge-nf-call-ip6tables", "1"},
	{"vm.overcommit_memory", "1"},
	{"vm.panic_on_oom", "0"},
	{"kernel.panic", "10"},
	{"kernel.panic_on_oops", "1"},
	{"kernel.keys.root_maxkeys", "1000000"},
	{"kernel.keys.root_maxbytes", "25000000"},
}

// IPv6Forwarding is what a dual-stack cluster's pod network needs besides Sysctls (kubeadm's
// preflight checks it where a subnet is IPv6). It is set only there: a host that forwards IPv6
// ignores router advertisements, and may lose an address it learned from them.
var IPv6Forwarding = Sysctl{"net.ipv6.conf.all.forwarding", "1"}

// SysctlsFor are the kernel settings of a node of a cluster that is dual-stack or not.
func SysctlsFor(dualStack bool) []Sysctl {
	if dualStack {
		return append(slices.Clip(Sysctls), IPv6Forwarding)
	}
	return Sysctls
}

// SysctlConf is hostpath.SysctlFile.
func SysctlConf(dualStack bool) []byte {
	b := []byte("# Written by kforge: what pod networking needs, and kubelet's protectKernelDefaults.\n")
	for _, s := range SysctlsFor(dualStack) {
		b = fmt.Appendf(b, "%s = %s\n", s.Key, s.Value)
	}
	return b
}

// ModulesLoad is kforge's modules-load.d file: the kernel modules containerd's overlayfs
// snapshotter and bridged pod traffic need, loaded at every boot.
const ModulesLoad = "# Written by kforge: what containerd and Kubernetes networking need.\noverlay\nbr_netfilter\n"

// Kubelet is the input of a node's kubelet configuration and flags.
type Kubelet struct {
	NodeName      string
	NodeIPs       []string // one per IP family (inventory Host.NodeIPs): --node-ip
	ServiceSubnet string   // the first family's Service range, whose tenth address is the cluster DNS
	DNSDomain     string
	CgroupDriver  string // systemd or cgroupfs
	CRIEndpoint   string
	// AllowCgroupV1 sets failCgroupV1: false (inventory kubelet.allowCgroupV1).
	AllowCgroupV1 bool
	// ResolvConf, when set, is the resolv.conf kubelet gives pods (e.g. the lab's dead-upstream
	// file, or /run/systemd/resolve/resolv.conf where systemd-resolved runs).
	ResolvConf string
	// ExtraArgs are extra kubelet flags (inventory kubelet.extraArgs), without "--".
	ExtraArgs map[string]string
	// RegisterWithTaints are "key=value:Effect" taints the node registers with. kubeadm join
	// sets them for workers; masters are tainted through the API (mark-control-plane).
	RegisterWithTaints []string
	// NameIsHostname: the node's name is what kubelet would call it by itself (its hostname),
	// so it needs no --hostname-override.
	NameIsHostname bool
	// ServingCert: kubelet serves with the certificate kforge issued it (hostpath.KubeletServerCert),
	// not a self-signed one.
	ServingCert bool
	// Standalone: an etcd host's kubelet (external etcd), which runs etcd's static pod and
	// knows no API server, as in kubeadm's guide to an etcd cluster: it serves on loopback
	// only, authenticates no one and allows everything there.
	Standalone bool
}

// PodPidsLimit is the most processes (and threads) one pod's containers may hold together, so
// that a fork bomb in one pod does not starve the node (kubelet.extraArgs pod-max-pids
// overrides it).
const PodPidsLimit = 4096

// ClusterDNSIP is kubeadm's cluster DNS address: the tenth address of the service subnet.
func ClusterDNSIP(serviceSubnet string) (string, error) {
	pfx, err := netip.ParsePrefix(serviceSubnet)
	if err != nil {
		return "", fmt.Errorf("service subnet %q: %v", serviceSubnet, err)
	}
	a := pfx.Masked().Addr()
	for range 10 {
		a = a.Next()
	}
	if !pfx.Contains(a) {
		return "", fmt.Errorf("service subnet %q is too small for the cluster DNS address", serviceSubnet)
	}
	return a.String(), nil
}

// Config is /var/lib/kubelet/config.yaml as kubeadm v1.36 writes it (componentconfigs/kubelet.go
// defaults plus the node-local containerRuntimeEndpoint).
func (k Kubelet) Config() (*kubeletv1beta1.KubeletConfiguration, error) {
	dns, err := ClusterDNSIP(k.ServiceSubnet)
	if err != nil {
		return nil, err
	}
	c := &kubeletv1beta1.KubeletConfiguration{
		TypeMeta:      metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		StaticPodPath: hostpath.ManifestsDir,
		ClusterDNS:    []string{dns},
		ClusterDomain: k.DNSDomain,
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: path.Join(hostpath.PKIDir, "ca.crt")},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
		},
		Authorization:            kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		HealthzBindAddress:       "127.0.0.1",
		HealthzPort:              ptr.To[int32](10248),
		RotateCertificates:       true,
		CgroupDriver:             k.CgroupDriver,
		ContainerRuntimeEndpoint: k.CRIEndpoint,
		// Hardening (docs/security.md): the kernel settings kubelet wants are kforge's to make
		// (Sysctls), so kubelet only checks them; strong TLS only; a pod's processes are
		// bounded; every container gets the runtime's seccomp profile unless its pod asks
		// otherwise.
		ProtectKernelDefaults: true,
		TLSMinVersion:         TLSMinVersion,
		TLSCipherSuites:       TLSCipherSuites,
		PodPidsLimit:          ptr.To[int64](PodPidsLimit),
		SeccompDefault:        ptr.To(true),
	}
	if k.ServingCert {
		c.TLSCertFile, c.TLSPrivateKeyFile = hostpath.KubeletServerCert, hostpath.KubeletServerKey
	}
	if k.Standalone {
		c.Address = "127.0.0.1"
		c.Authentication = kubeletv1beta1.KubeletAuthentication{
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(false)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
		}
		c.Authorization = kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow}
		c.RotateCertificates = false
	}
	if c.CgroupDriver == "" {
		c.CgroupDriver = "systemd"
	}
	if k.AllowCgroupV1 {
		c.FailCgroupV1 = ptr.To(false)
	}
	if k.ResolvConf != "" {
		c.ResolverConfig = ptr.To(k.ResolvConf)
	}
	return c, nil
}

// ConfigYAML renders Config.
func (k Kubelet) ConfigYAML() ([]byte, error) {
	c, err := k.Config()
	if err != nil {
		return nil, err
	}
	return yaml.Marshal(c)
}

// InstanceConfig is /var/lib/kubelet/instance-config.yaml, kubeadm's node-local patch.
func (k Kubelet) InstanceConfig() []byte {
	return fmt.Appendf(nil, "containerRuntimeEndpoint: %q\n", k.CRIEndpoint)
}

// FlagsEnv is kubeadm-flags.env: KUBELET_KUBEADM_ARGS with the node's own flags and the
// inventory's extra args, sorted by name, as kubeadm writes them.
func (k Kubelet) FlagsEnv() []byte {
	args := map[string]string{"node-ip": strings.Join(k.NodeIPs, ",")}
	if !k.NameIsHostname {
		args["hostname-override"] = k.NodeName
	}
	if len(k.RegisterWithTaints) > 0 {
		args["register-with-taints"] = strings.Join(k.RegisterWithTaints, ",")
	}
	for n, v := range k.ExtraArgs {
		args[strings.TrimPrefix(n, "--")] = v
	}
	names := make([]string, 0, len(args))
	for n := range args {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, "--"+n+"="+args[n])
	}
	return fmt.Appendf(nil, "KUBELET_KUBEADM_ARGS=%q\n", strings.Join(parts, " "))
}

// APIProxy is the node-local API proxy's unit and configuration (kforge-apiproxy, in the
// bundle): nodes of a cluster with several masters and no controlPlaneEndpoint reach the API
// servers through it.
type APIProxy struct {
	Port     int      // on 127.0.0.1
	Backends []string // every master's API server, host:port
}

// Unit returns kforge-apiproxy.service.
func (p APIProxy) Unit() ([]byte, error) {
	return render("kforge-apiproxy.service.tmpl", struct {
		Port                  int
		Binary, Config, State string
	}{p.Port, hostpath.APIProxyPath, hostpath.APIProxyConfig, hostpath.APIProxyState})
}

// Config returns the proxy's configuration file (JSON; the format of
// bundle/internal/apiproxy's Config).
func (p APIProxy) Config() ([]byte, error) {
	b, err := json.MarshalIndent(struct {
		Listen   string   `json:"listen"`
		Backends []string `json:"backends"`
		CA       string   `json:"ca"`
	}{net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port)), p.Backends, hostpath.CACert}, "", "  ")
	return append(b, '\n'), err
}

// APIProxyFor is the node-local API proxy of cluster c: every master's API server, in the
// inventory's order.
func APIProxyFor(c *inventory.Cluster) APIProxy {
	p := APIProxy{Port: c.APIProxy.Port}
	for _, m := range c.Masters {
		p.Backends = append(p.Backends, net.JoinHostPort(m.NodeIP(), strconv.Itoa(pki.APIServerPort)))
	}
	return p
}

// VIPLease is the Lease in kube-system whose holder holds the control plane's virtual IP.
const VIPLease = "kforge-vip"

// VIPIdentity is the client identity kforge-vip renews its Lease as: the scheduler's
// (scheduler.conf, on every master, pointing at the master's own API server), which kforge
// allows that one Lease besides its own (kube.Bootstrap).
const VIPIdentity = "scheduler.conf"

// VIP is one master's kforge-vip unit and configuration (in the bundle, built from
// bundle/internal/vip): the masters of a cluster with a controlPlaneVIP hold it in turn.
type VIP struct {
	Address string // the virtual IP
	Node    string // this master's node name: its identity in the Lease
}

// Unit returns kforge-vip.service.
func (v VIP) Unit() ([]byte, error) {
	return render("kforge-vip.service.tmpl", struct {
		Address, Lease, Binary, Config, State string
	}{v.Address, VIPLease, hostpath.VIPPath, hostpath.VIPConfig, hostpath.VIPState})
}

// Config returns kforge-vip's configuration file (JSON; the format of bundle/internal/vip's
// Config). The interface is left to kforge-vip: the one whose subnet holds the address.
func (v VIP) Config() ([]byte, error) {
	b, err := json.MarshalIndent(struct {
		Address    string `json:"address"`
		Kubeconfig string `json:"kubeconfig"`
		Identity   string `json:"identity"`
		Namespace  string `json:"namespace"`
		Lease      string `json:"lease"`
	}{v.Address, path.Join(hostpath.KubernetesDir, VIPIdentity), v.Node, "kube-system", VIPLease}, "", "  ")
	return append(b, '\n'), err
}

// VIPFiles are master m's kforge-vip files; none without a controlPlaneVIP.
func VIPFiles(c *inventory.Cluster, m inventory.Host) ([]File, error) {
	if c.ControlPlaneVIP == "" {
		return nil, nil
	}
	v := VIP{Address: c.ControlPlaneVIP, Node: m.Name}
	unit, err := v.Unit()
	if err != nil {
		return nil, err
	}
	config, err := v.Config()
	if err != nil {
		return nil, err
	}
	return []File{{Path: hostpath.VIPUnitPath, Mode: 0o644, Data: unit}, {Path: hostpath.VIPConfig, Mode: 0o644, Data: config}}, nil
}

// EtcdSnapshot is one master's scheduled etcd snapshots (etcdSnapshots): a timer, the oneshot
// unit it starts, which runs kforge-etcd-snapshot (in the bundle, built from
// bundle/internal/etcdsnap), and that program's configuration.
type EtcdSnapshot struct {
	Every      time.Duration
	Keep       int
	Member     string // this master's node name
	Endpoint   string // its etcd member's client URL on loopback
	Kubernetes string // the cluster's version, for the snapshots' records
	// Client is the etcd client certificate it reaches the member with, under the PKI
	// directory, without extension: a master's API server's (the default), an etcd host's
	// health check's.
	Client string
}

// Unit returns kforge-etcd-snapshot.service.
func (e EtcdSnapshot) Unit() ([]byte, error) {
	return render("kforge-etcd-snapshot.service.tmpl", struct{ Dir, Timer, Unit, Binary, Config string }{
		hostpath.EtcdSnapshotDir, hostpath.EtcdSnapshotTimer, hostpath.EtcdSnapshotUnit, hostpath.EtcdSnapshotPath, hostpath.EtcdSnapshotConfig})
}

// Timer returns kforge-etcd-snapshot.timer.
func (e EtcdSnapshot) Timer() ([]byte, error) {
	return render("kforge-etcd-snapshot.timer.tmpl", struct {
		Unit, Every string
		Seconds     int64
	}{hostpath.EtcdSnapshotUnit, inventory.Duration(e.Every).String(), int64(e.Every / time.Second)})
}

// Config returns kforge-etcd-snapshot's configuration file (JSON; the format of
// bundle/internal/etcdsnap's Config): the member on loopback, reached as the API server
// reaches it (the etcd CA, apiserver-etcd-client).
func (e EtcdSnapshot) Config() ([]byte, error) {
	b, err := json.MarshalIndent(struct {
		Endpoint   string `json:"endpoint"`
		CA         string `json:"ca"`
		Cert       string `json:"cert"`
		Key        string `json:"key"`
		Member     string `json:"member"`
		Kubernetes string `json:"kubernetes"`
		Keep       int    `json:"keep"`
	}{e.Endpoint, pkiPath("etcd/ca.crt"), pkiPath(or(e.Client, "apiserver-etcd-client") + ".crt"), pkiPath(or(e.Client, "apiserver-etcd-client") + ".key"), e.Member, e.Kubernetes, e.Keep}, "", "  ")
	return append(b, '\n'), err
}

// EtcdSnapshotFiles are etcd member m's scheduled snapshot files (a master's, or an etcd
// host's with an external etcd); none when the cluster takes none.
func EtcdSnapshotFiles(c *inventory.Cluster, m inventory.Host) ([]File, error) {
	if !c.ScheduledSnapshots() {
		return nil, nil
	}
	e := EtcdSnapshot{Every: time.Duration(c.EtcdSnapshots.Every), Keep: c.EtcdSnapshots.Keep, Member: m.Name,
		Endpoint: "https://" + net.JoinHostPort(localhostFor(m.NodeIP()), "2379"), Kubernetes: c.KubernetesVersion}
	if c.ExternalEtcd() {
		e.Client = "etcd/healthcheck-client" // an etcd host holds no API server's client
	}
	var out []File
	for _, f := range []struct {
		path   string
		render func() ([]byte, error)
	}{{hostpath.EtcdSnapshotUnitPath, e.Unit}, {hostpath.EtcdSnapshotTimerPath, e.Timer}, {hostpath.EtcdSnapshotConfig, e.Config}} {
		data, err := f.render()
		if err != nil {
			return nil, err
		}
		out = append(out, File{Path: f.path, Mode: 0o644, Data: data})
	}
	return out, nil
}
