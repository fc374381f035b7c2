package templates

import (
	"time"

	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/release"
)

// File is one file kforge puts on a host.
type File struct {
	Path string // absolute path on the host
	Mode os.FileMode
	Data []byte
	// UID and GID own it: root (0) unless a component that runs as its own user reads it
	// (etcd's keys).
	UID, GID int
}

// State is how push compares the file with a host's: its content's sha256, its mode and its
// owner, as the hash command prints them ("<sha256> <mode> <uid>:<gid>").
func (f File) State() string {
	m := f.Mode.Perm()
	if m == 0 {
		m = 0o644
	}
	sum := sha256.Sum256(f.Data)
	return fmt.Sprintf("%s %o %d:%d", hex.EncodeToString(sum[:]), m, f.UID, f.GID)
}

// Secret reports whether the file holds a private key or credentials (mode 0600).
func (f File) Secret() bool { return f.Mode&0o077 == 0 }

// HostFiles is the complete tree one host receives.
type HostFiles struct {
	Node  inventory.Node
	Files []File // sorted by path
}

// Options are the per-run and per-host inputs the inventory does not hold.
type Options struct {
	// BootstrapToken goes into workers' bootstrap-kubelet.conf; a secret, never logged.
	BootstrapToken string
	// RestrictOOMScoreAdj by host name: apply detects whether the host may set a negative
	// oom_score_adj (false when unknown).
	RestrictOOMScoreAdj map[string]bool
	// CgroupV2 by host name: apply detects the hosts on cgroup v2, where kubelet.allowCgroupV1
	// has nothing to allow and their kubelet gets no failCgroupV1: false.
	CgroupV2 map[string]bool
	// CACertDirs are the host CA directories mounted into the API server and controller
	// manager; default DebianCACertDirs. HostCACertDirs, by host name, overrides it for a host
	// (apply detects which of CACertDirCandidates exist on each master).
	CACertDirs     []string
	HostCACertDirs map[string][]string
	// KubeletPath is where the kubelet binary is installed; default /usr/bin/kubelet.
	KubeletPath string
	// CNIBinDir is containerd's CNI plugin directory; default /opt/cni/bin.
	CNIBinDir string
	// RetiringMasters counts masters still in the cluster that the inventory no longer lists
	// (until apply --prune removes them); see ControlPlaneFor.
	RetiringMasters int
	// Registries are the inventory's containerRuntime.registries with their CAs and
	// credentials read; every node gets their hosts.toml files.
	Registries []Registry
	// HostResolvConf, by host name, is the resolv.conf kubelet gives pods where the inventory
	// sets none (kubelet.resolvConf): apply detects systemd-resolved (facts.KubeletResolvConf).
	HostResolvConf map[string]string
	// EtcdBoot, by master name, says how a master's etcd member starts when it is not a new
	// cluster's (ControlPlaneFor): joining a running cluster, or already running.
	EtcdBoot map[string]*EtcdBootstrap
	// Hostname, by node name, is the host's own hostname: kubelet gets --hostname-override
	// only where its node name differs from it, as kubeadm does (where it is unknown, always).
	Hostname map[string]string
	// EtcdUser, by master name, is the system user etcd runs as (apply makes it): etcd's
	// static pod runs as it, and its serving and peer keys are its own. A master without one
	// (not made yet: plan before the first apply) runs etcd as root, as kubeadm does.
	EtcdUser map[string]Owner
}

// Owner is a user's and group's ids.
type Owner struct{ UID, GID int }

// etcdOwned are the files of a master's PKI that etcd's user reads: etcd's serving and peer
// pairs, and the health-check client's, with which etcdctl run in etcd's pod (as that user)
// reaches the member, as kubeadm's documentation shows.
var etcdOwned = []string{pkiPath("etcd/server.crt"), pkiPath("etcd/server.key"), pkiPath("etcd/peer.crt"), pkiPath("etcd/peer.key"),
	pkiPath("etcd/healthcheck-client.crt"), pkiPath("etcd/healthcheck-client.key")}

func (o Options) withDefaults() Options {
	if o.CACertDirs == nil {
		o.CACertDirs = DebianCACertDirs
	}
	if o.KubeletPath == "" {
		o.KubeletPath = hostpath.DefaultKubeletPath
	}
	if o.CNIBinDir == "" {
		o.CNIBinDir = hostpath.DefaultCNIBinDir
	}
	return o
}

func orInt(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

func or(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

// EtcdBootstrap is how a master's etcd member was (or is to be) first started: the members in
// its --initial-cluster and its --initial-cluster-state. etcd reads both only on its first
// start, so a running member keeps what it started with.
type EtcdBootstrap struct {
	Members []string // "name=https://ip:2380"
	State   string   // "new" or "existing"
}

// ControlPlaneFor is the static-pod input of master i (0-based) of the cluster. The masters of
// a new cluster start their stacked etcd members together, each with every master in
// --initial-cluster (etcd's static bootstrap); o.EtcdBoot, when it has the master, says
// otherwise: for a master joining a running etcd cluster (after its member was added: the
// running members, "existing"), or for a running member (what it started with).
//
// This is the one place that decides whether the control plane is a single master: one master
// in the inventory and none retiring (o.RetiringMasters: still in the cluster until apply
// --prune removes them). Only then is leader election off, so two controller-managers are
// never active at once.
func ControlPlaneFor(c *inventory.Cluster, i int, o Options) (ControlPlane, error) {
	o = o.withDefaults()
	r := c.Release()
	km, err := minorOf(r)
	if err != nil {
		return ControlPlane{}, err
	}
	m := c.Masters[i]
	caCertDirs := o.CACertDirs
	if d, ok := o.HostCACertDirs[m.Name]; ok {
		caCertDirs = d
	}
	cp := ControlPlane{
		ClusterName:       c.Name,
		Images:            r.Images(or(c.ImageRepository, inventory.DefaultImageRepository)),
		FlexVolumeDir:     km.FlexVolumeDir,
		ServiceSubnet:     strings.Join(c.Networking.ServiceSubnets(), ","),
		PodSubnet:         strings.Join(c.Networking.PodSubnets(), ","),
		DNSDomain:         or(c.Networking.DNSDomain, inventory.DefaultDNSDomain),
		NodeCIDRMaskSizes: c.Networking.NodeCIDRMaskSizes(),
		NodeName:          m.Name,
		AdvertiseAddress:  m.NodeIP(),
		BindPort:          pki.APIServerPort,
		CACertDirs:        caCertDirs,
		SingleMaster:      len(c.Masters)+o.RetiringMasters == 1,
	}
	if c.ExternalEtcd() {
		for _, e := range c.Etcd {
			cp.EtcdServers = append(cp.EtcdServers, EtcdClientURL(e.NodeIP()))
		}
	} else {
		cp.etcdMember(m, c.Masters, o)
	}
	if v := time.Duration(c.PKI.CertValidity); v != 0 && v != pki.DefaultSigningDuration {
		cp.SigningDuration = v
	}
	if a := c.Security.Audit; a.AuditEnabled() {
		a.MaxAge, a.MaxBackups, a.MaxSize = orInt(a.MaxAge, inventory.DefaultAuditMaxAge), orInt(a.MaxBackups, inventory.DefaultAuditMaxBackups), orInt(a.MaxSize, inventory.DefaultAuditMaxSize)
		cp.Audit = &a
	}
	return cp, nil
}

// etcdMember sets how host h's etcd member starts, one of members (the masters with stacked
// etcd, the etcd group with an external one): o.EtcdBoot's way when it has the host (joining a
// running cluster, or running), otherwise with every member in --initial-cluster (a new
// cluster's static bootstrap), and as etcd's user when the host has one.
func (cp *ControlPlane) etcdMember(h inventory.Host, members []inventory.Host, o Options) {
	cp.EtcdClusterState = "new"
	if u, ok := o.EtcdUser[h.Name]; ok {
		cp.EtcdUser = &u
	}
	switch boot := o.EtcdBoot[h.Name]; {
	case boot != nil:
		cp.EtcdInitialCluster, cp.EtcdClusterState = boot.Members, boot.State
	case len(members) > 1:
		for _, p := range members {
			cp.EtcdInitialCluster = append(cp.EtcdInitialCluster, EtcdMember(p.Name, p.NodeIP()))
		}
	}
}

// EtcdHostFor is the input of etcd host i's (0-based) member: the etcd static pod of an
// external etcd, as ControlPlaneFor has a master's stacked one.
func EtcdHostFor(c *inventory.Cluster, i int, o Options) ControlPlane {
	h := c.Etcd[i]
	cp := ControlPlane{Images: images(c), NodeName: h.Name, AdvertiseAddress: h.NodeIP()}
	cp.etcdMember(h, c.Etcd, o)
	return cp
}

// images are the images of the cluster's release under its image repository.
func images(c *inventory.Cluster) release.Images {
	return c.Release().Images(or(c.ImageRepository, inventory.DefaultImageRepository))
}

// KubeletFor is the kubelet input of a node. Workers register with their inventory taints, as
// kubeadm join registers them; masters' taints and every node's labels are set through the API
// after the node registers (kubeadm's mark-control-plane), not here.
func KubeletFor(c *inventory.Cluster, n inventory.Node, o Options) Kubelet {
	var taints []string
	if n.Role == inventory.RoleWorker {
		for _, t := range n.Taints {
			taints = append(taints, (&corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)}).ToString())
		}
	}
	return Kubelet{
		RegisterWithTaints: taints,
		NodeName:           n.Name,
		NodeIPs:            n.NodeIPs(),
		ServiceSubnet:      c.Networking.ServiceSubnets()[0],
		DNSDomain:          or(c.Networking.DNSDomain, inventory.DefaultDNSDomain),
		CgroupDriver:       or(c.Kubelet.CgroupDriver, "systemd"),
		CRIEndpoint:        or(c.ContainerRuntime.Endpoint, inventory.DefaultCRIEndpoint),
		AllowCgroupV1:      c.Kubelet.AllowCgroupV1 && !o.CgroupV2[n.Name],
		ResolvConf:         or(c.Kubelet.ResolvConf, o.HostResolvConf[n.Name]),
		// kubelet names its node after the hostname, lowercased, when not told otherwise.
		NameIsHostname: o.Hostname[n.Name] != "" && strings.ToLower(o.Hostname[n.Name]) == n.Name,
		ExtraArgs:      c.Kubelet.ExtraArgs,
	}
}

// AdminKubeconfig is the cluster-admin kubeconfig for the user (admin.conf), at pki.Endpoint:
// the load balancer, the virtual IP or the only master. Without any of them (several masters,
// no controlPlaneEndpoint, no controlPlaneVIP), no one address survives the loss of any
// master: its current context names the first master, and it has a context for each other
// master too (AdminContexts).
func AdminKubeconfig(c *inventory.Cluster, set *pki.Set) ([]byte, error) {
	data, err := pki.Kubeconfig(c.Name, pki.APIServerURL(pki.Endpoint(c)), set.TrustPEM(pki.CA), set.Get("admin.conf", ""))
	if err != nil || !c.LocalAPIProxy() || c.ControlPlaneVIP != "" {
		return data, err
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, err
	}
	cur := cfg.Contexts[cfg.CurrentContext]
	for _, m := range c.Masters[1:] {
		name := c.Name + "-" + m.Name
		cluster := *cfg.Clusters[c.Name]
		cluster.Server = pki.APIServerURL(net.JoinHostPort(m.NodeIP(), strconv.Itoa(pki.APIServerPort)))
		cfg.Clusters[name] = &cluster
		cfg.Contexts[cur.AuthInfo+"@"+name] = &clientcmdapi.Context{Cluster: name, AuthInfo: cur.AuthInfo}
	}
	return clientcmd.Write(*cfg)
}

// AdminContexts are the contexts of AdminKubeconfig after the current one: one per master
// after the first, for a cluster without a controlPlaneEndpoint or controlPlaneVIP.
func AdminContexts(c *inventory.Cluster) []string {
	if !c.LocalAPIProxy() || c.ControlPlaneVIP != "" {
		return nil
	}
	var out []string
	for _, m := range c.Masters[1:] {
		out = append(out, "kubernetes-admin@"+c.Name+"-"+m.Name)
	}
	return out
}

// Tree renders every host's files from the inventory and the PKI set.
func Tree(c *inventory.Cluster, set *pki.Set, o Options) ([]HostFiles, error) {
	o = o.withDefaults()
	var out []HostFiles
	idx := map[inventory.Role]int{}
	for _, n := range c.Hosts() {
		var fs []File
		var err error
		switch n.Role {
		case inventory.RoleMaster:
			fs, err = masterFiles(c, set, idx[n.Role], o)
		case inventory.RoleEtcd:
			fs, err = etcdHostFiles(c, set, idx[n.Role], o)
		default:
			fs, err = workerFiles(c, set, o)
		}
		idx[n.Role]++
		if err != nil {
			return nil, fmt.Errorf("host %s: %w", n.Name, err)
		}
		nf, err := nodeFiles(c, set, n, o)
		if err != nil {
			return nil, fmt.Errorf("host %s: %w", n.Name, err)
		}
		fs = append(fs, nf...)
		sort.Slice(fs, func(i, j int) bool { return fs[i].Path < fs[j].Path })
		out = append(out, HostFiles{Node: n, Files: fs})
	}
	return out, nil
}

func pairFiles(base string, kp *pki.KeyPair) ([]File, error) {
	cert, key, err := kp.PEM()
	if err != nil {
		return nil, err
	}
	return []File{
		{Path: path.Join(hostpath.PKIDir, base+".crt"), Mode: 0o644, Data: cert},
		{Path: path.Join(hostpath.PKIDir, base+".key"), Mode: 0o600, Data: key},
	}, nil
}

// pkiFiles are the files of row s on host (its certificate and key, or a CA's trust bundle and
// key), those etcd reads owned by etcd's user where the host has one.
func pkiFiles(set *pki.Set, s pki.Spec, host string, o Options) ([]File, error) {
	node := ""
	if s.Scope != pki.Cluster {
		node = host
	}
	kp := set.Get(s.Name, node)
	if kp == nil {
		return nil, fmt.Errorf("no %s certificate in the PKI set", pki.Key(s.Name, node))
	}
	pf, err := pairFiles(s.BaseName, kp)
	if err != nil {
		return nil, err
	}
	if s.IsCA() {
		pf[0].Data = set.TrustPEM(s.Name) // the CA, or old and new while it is rotated
	}
	if u, ok := o.EtcdUser[host]; ok {
		for i := range pf {
			if slices.Contains(etcdOwned, pf[i].Path) {
				pf[i].UID, pf[i].GID = u.UID, u.GID
			}
		}
	}
	return pf, nil
}

// etcdHostFiles are etcd host i's own files (external etcd): the etcd CA's certificate, its
// member's certificates and the health-check client's, and its static pod.
func etcdHostFiles(c *inventory.Cluster, set *pki.Set, i int, o Options) ([]File, error) {
	h := c.Etcd[i]
	fs := []File{{Path: path.Join(hostpath.PKIDir, "etcd/ca.crt"), Mode: 0o644, Data: set.TrustPEM(pki.EtcdCA)}}
	for _, s := range pki.Table() {
		if !s.EtcdMember() {
			continue
		}
		pf, err := pkiFiles(set, s, h.Name, o)
		if err != nil {
			return nil, err
		}
		fs = append(fs, pf...)
	}
	snap, err := EtcdSnapshotFiles(c, h)
	if err != nil {
		return nil, err
	}
	pod := EtcdHostFor(c, i, o).Etcd()
	stampInputs(pod, fs)
	data, err := MarshalPod(pod)
	if err != nil {
		return nil, err
	}
	return append(append(fs, snap...), File{Path: path.Join(hostpath.ManifestsDir, "etcd.yaml"), Mode: 0o600, Data: data}), nil
}

func masterFiles(c *inventory.Cluster, set *pki.Set, i int, o Options) ([]File, error) {
	m := c.Masters[i]
	var fs []File
	for _, s := range pki.Table() {
		if s.BaseName == "" || s.Scope == pki.PerNode || s.Name == pki.RegistryCert && !c.BundleFromMasters() {
			continue
		}
		if c.ExternalEtcd() && s.Name == pki.EtcdCA {
			// An external etcd's CA: the API servers trust it, and sign nothing with it.
			fs = append(fs, File{Path: path.Join(hostpath.PKIDir, s.BaseName+".crt"), Mode: 0o644, Data: set.TrustPEM(s.Name)})
			continue
		}
		if c.ExternalEtcd() && s.EtcdMember() {
			continue
		}
		pf, err := pkiFiles(set, s, m.Name, o)
		if err != nil {
			return nil, err
		}
		fs = append(fs, pf...)
	}
	saKey, err := pki.EncodeKey(set.ServiceAccount)
	if err != nil {
		return nil, err
	}
	saPub, err := pki.EncodePublicKey(set.ServiceAccount.Public())
	if err != nil {
		return nil, err
	}
	fs = append(fs, File{Path: path.Join(hostpath.PKIDir, "sa.key"), Mode: 0o600, Data: saKey}, File{Path: path.Join(hostpath.PKIDir, "sa.pub"), Mode: 0o644, Data: saPub})

	ca := set.TrustPEM(pki.CA)
	endpoint := pki.APIServerURL(pki.NodeEndpoint(c))
	local := pki.APIServerURL(pki.LocalEndpoint(pki.Master{Name: m.Name, IP: m.NodeIP()}))
	kubelet := local
	if c.LocalAPIProxy() {
		// Through the node-local proxy, the kubelet keeps its node Ready while its own API
		// server restarts (an upgrade, a new CA).
		kubelet = endpoint
	}
	confs := []struct {
		file, server string
	}{
		{"admin.conf", endpoint},
		{"controller-manager.conf", local},
		{"scheduler.conf", local},
		// kubeadm v1.36 points a master's kubelet at its own API server (init phase kubeconfig
		// kubelet; join does the same after TLS bootstrap), so it works before the load
		// balancer does.
		{"kubelet.conf", kubelet},
	}
	if i == 0 { // kubeadm creates super-admin.conf on the first master only (init, not join)
		confs = append(confs, struct{ file, server string }{"super-admin.conf", endpoint})
	}
	for _, k := range confs {
		node := ""
		if k.file == "kubelet.conf" {
			node = m.Name
		}
		kp := set.Get(k.file, node)
		if kp == nil {
			return nil, fmt.Errorf("no %s client certificate in the PKI set", pki.Key(k.file, node))
		}
		data, err := pki.Kubeconfig(c.Name, k.server, ca, kp)
		if err != nil {
			return nil, err
		}
		fs = append(fs, File{Path: path.Join(hostpath.KubernetesDir, k.file), Mode: 0o600, Data: data})
	}

	vip, err := VIPFiles(c, m)
	if err != nil {
		return nil, err
	}
	reg, err := MasterRegistryFiles(c, m)
	if err != nil {
		return nil, err
	}
	var snap []File
	if !c.ExternalEtcd() {
		if snap, err = EtcdSnapshotFiles(c, m); err != nil {
			return nil, err
		}
	}
	api, err := APIServerFiles(c, set)
	if err != nil {
		return nil, err
	}
	fs = append(append(append(append(fs, vip...), reg...), snap...), api...)

	cp, err := ControlPlaneFor(c, i, o)
	if err != nil {
		return nil, err
	}
	if len(set.Trust[pki.CA]) > 1 { // a rotation of the cluster CA: see ControlPlane.SigningCert
		cp.SigningCert = SigningCertFile
		fs = append(fs, File{Path: path.Join(hostpath.PKIDir, SigningCertFile), Mode: 0o644, Data: pki.EncodeCert(set.CAs[pki.CA].Cert)})
	}
	for name, pod := range cp.StaticPods() {
		stampInputs(pod, fs)
		data, err := MarshalPod(pod)
		if err != nil {
			return nil, err
		}
		fs = append(fs, File{Path: path.Join(hostpath.ManifestsDir, name), Mode: 0o600, Data: data})
	}
	return fs, nil
}

// SigningCertFile is the cluster CA kube-controller-manager signs with while ca.crt holds two
// (a rotation of the cluster CA): the signing one alone.
const SigningCertFile = "ca-signing.crt"

// InputsAnnotation is the static-pod annotation that carries a hash of the files kforge
// writes that the pod mounts (its certificates, keys and kubeconfig) and reads only when it
// starts. When one of them changes — a kubeconfig re-issued before it expires, a new CA — the
// manifest changes too and kubelet restarts the pod: kube-controller-manager and
// kube-scheduler read their kubeconfigs only when they start, etcd and kube-apiserver their CAs.
// Files the component reads again while it runs (Reloaded) are left out: a renewed serving
// certificate restarts nothing.
const InputsAnnotation = "kforge.io/inputs-hash"

// Reloaded are, by static-pod container, the certificates and keys the component reads again
// while it runs, so a new one needs no restart:
//   - etcd reads its serving and peer certificates at every TLS handshake, as server and as
//     client (go.etcd.io/etcd/client/pkg/v3/transport: TLSInfo's GetCertificate and
//     GetClientCertificate);
//   - kube-apiserver watches its serving certificate and its front-proxy (aggregator) client
//     certificate (k8s.io/apiserver dynamiccertificates, on file events and every minute); its
//     etcd client reads its certificate at every handshake (the same TLSInfo); its kubelet
//     client reloads its certificate every 5 minutes (client-go's certificate rotation, which
//     then closes its connections to kubelets).
//
// CA files are never in it: etcd builds its trust pool and the API server its etcd trust pool
// once, when they start.
var Reloaded = map[string][]string{
	"etcd": {pkiPath("etcd/server.crt"), pkiPath("etcd/server.key"), pkiPath("etcd/peer.crt"), pkiPath("etcd/peer.key")},
	"kube-apiserver": {pkiPath("apiserver.crt"), pkiPath("apiserver.key"), pkiPath("front-proxy-client.crt"), pkiPath("front-proxy-client.key"),
		pkiPath("apiserver-etcd-client.crt"), pkiPath("apiserver-etcd-client.key"), pkiPath("apiserver-kubelet-client.crt"), pkiPath("apiserver-kubelet-client.key"),
		// --encryption-provider-config-automatic-reload: a new key is read within a minute.
		hostpath.EncryptionConfig},
}

// reloaded says whether every container of pod reads file p again while it runs.
func reloaded(pod *corev1.Pod, p string) bool {
	for _, c := range pod.Spec.Containers {
		if !slices.Contains(Reloaded[c.Name], p) {
			return false
		}
	}
	return len(pod.Spec.Containers) > 0
}

// stampInputs sets pod's InputsAnnotation from the files of fs under /etc/kubernetes that its
// hostPath volumes cover and its command line names, except those it reloads itself:
// kube-controller-manager mounts all of /etc/kubernetes/pki, as kubeadm's does, but a new
// apiserver certificate is no reason to restart it.
func stampInputs(pod *corev1.Pod, fs []File) {
	var in []File
	for _, f := range fs {
		if !named(pod, f.Path) || reloaded(pod, f.Path) {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			hp := v.HostPath
			if hp != nil && (hp.Path == hostpath.KubernetesDir || strings.HasPrefix(hp.Path, hostpath.KubernetesDir+"/")) &&
				(f.Path == hp.Path || strings.HasPrefix(f.Path, hp.Path+"/")) {
				in = append(in, f)
				break
			}
		}
	}
	if len(in) == 0 {
		return
	}
	slices.SortFunc(in, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	h := sha256.New()
	for _, f := range in {
		fmt.Fprintf(h, "%s\x00%o\x00%d\x00", f.Path, f.Mode, len(f.Data))
		h.Write(f.Data)
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[InputsAnnotation] = hex.EncodeToString(h.Sum(nil))[:16]
}

// named says whether a container of pod names file p on its command line (a flag's value).
func named(pod *corev1.Pod, p string) bool {
	for _, c := range pod.Spec.Containers {
		for _, a := range append(slices.Clone(c.Command), c.Args...) {
			if a == p || strings.HasSuffix(a, "="+p) {
				return true
			}
		}
	}
	return false
}

func workerFiles(c *inventory.Cluster, set *pki.Set, o Options) ([]File, error) {
	ca := set.TrustPEM(pki.CA)
	conf, err := pki.BootstrapKubeconfig(c.Name, pki.APIServerURL(pki.NodeEndpoint(c)), ca, o.BootstrapToken)
	if err != nil {
		return nil, err
	}
	return []File{
		{Path: path.Join(hostpath.PKIDir, "ca.crt"), Mode: 0o644, Data: ca},
		{Path: hostpath.BootstrapKubeletConfig, Mode: 0o600, Data: conf},
	}, nil
}

func nodeFiles(c *inventory.Cluster, set *pki.Set, n inventory.Node, o Options) ([]File, error) {
	k := KubeletFor(c, n, o)
	etcdHost := n.Role == inventory.RoleEtcd
	k.Standalone = etcdHost
	var own []File // what kforge's own runtime needs besides its config, and the kubelet's serving pair
	if kp := set.Get(pki.KubeletServerCert, n.Name); kp != nil {
		cert, key, err := kp.PEM()
		if err != nil {
			return nil, err
		}
		own = append(own, File{Path: hostpath.KubeletServerCert, Mode: 0o644, Data: cert}, File{Path: hostpath.KubeletServerKey, Mode: 0o600, Data: key})
		k.ServingCert = true
	}
	cfg, err := k.ConfigYAML()
	if err != nil {
		return nil, err
	}
	unit, err := KubeletUnit{KubeletPath: o.KubeletPath}.Render()
	if err != nil {
		return nil, err
	}
	d := NewKubeletDropIn(o.KubeletPath)
	d.Standalone = etcdHost
	dropIn, err := d.Render()
	if err != nil {
		return nil, err
	}
	im := images(c)
	runtime := Containerd{
		ConfigVersion:       2,
		SandboxImage:        im.Pause,
		RestrictOOMScoreAdj: o.RestrictOOMScoreAdj[n.Name],
		SystemdCgroup:       k.CgroupDriver == "systemd",
		CNIBinDir:           o.CNIBinDir,
	}
	if c.ContainerRuntime.Install == inventory.RuntimeFromBundle {
		runtime.ConfigVersion, runtime.RuncPath, runtime.RegistryConfigPath = 3, hostpath.RuncPath, hostpath.RegistryConfigDir
		unit, err := ContainerdUnit{Containerd: hostpath.RuntimeBinDir + "/containerd"}.Render()
		if err != nil {
			return nil, err
		}
		own = append(own,
			File{Path: hostpath.ContainerdUnitPath, Mode: 0o644, Data: unit},
			File{Path: hostpath.ModulesLoadFile, Mode: 0o644, Data: []byte(ModulesLoad)},
		)
		var origins []string
		for comp, name := range im.ByComponent() {
			if !c.LocalVolumes.On() && (comp == "local-path-provisioner" || comp == "local-path-helper") {
				continue // no hosts.toml for docker.io and kforge.dev while nothing runs their images
			}
			origins = append(origins, ImageOrigin(name))
		}
		slices.Sort(origins)
		for _, r := range withMasterRegistries(o.Registries, slices.Compact(origins), MasterRegistries(c, n)) {
			fs, err := RegistryFiles(r)
			if err != nil {
				return nil, err
			}
			own = append(own, fs...)
		}
	}
	ctrd, err := runtime.Render()
	if err != nil {
		return nil, err
	}
	if !etcdHost { // an etcd host reaches no Service and no API server
		route, err := ServiceRoute{Subnets: c.Networking.ServiceSubnets(), NodeIPs: n.NodeIPs()}.Render()
		if err != nil {
			return nil, err
		}
		own = append(own, File{Path: hostpath.ServiceRouteUnitPath, Mode: 0o644, Data: route})
	}
	if c.LocalAPIProxy() && !etcdHost {
		p := APIProxyFor(c)
		unit, err := p.Unit()
		if err != nil {
			return nil, err
		}
		config, err := p.Config()
		if err != nil {
			return nil, err
		}
		own = append(own, File{Path: hostpath.APIProxyUnitPath, Mode: 0o644, Data: unit}, File{Path: hostpath.APIProxyConfig, Mode: 0o644, Data: config})
	}
	return append(own, []File{
		{Path: hostpath.KubeletConfigPath, Mode: 0o600, Data: cfg},
		{Path: hostpath.KubeletInstanceConfig, Mode: 0o644, Data: k.InstanceConfig()},
		{Path: hostpath.KubeletFlagsEnvPath, Mode: 0o644, Data: k.FlagsEnv()},
		{Path: hostpath.KubeletUnitPath, Mode: 0o600, Data: unit},
		{Path: hostpath.KubeletDropInPath, Mode: 0o600, Data: dropIn},
		{Path: hostpath.ContainerdConfigPath, Mode: 0o644, Data: ctrd},
	}...), nil
}
