// Package inventory is kforge's cluster description: plain data decoded from one YAML file,
// defaulted and validated. Nothing here opens a connection; the runtime view of a cluster
// (hosts with live connections, generated PKI) lives elsewhere.
//
// The doc comments on the fields below are the reference: `kforge inventory schema` turns them
// into JSON Schema descriptions.
package inventory

import (
	"cmp"
	"path/filepath"
	"strings"

	"github.com/kforge/kforge/release"
)

// APIVersion and Kind head every inventory file.
const (
	APIVersion = "kforge.dev/v1alpha1"
	Kind       = "Cluster"
)

// Defaults applied by Load. The Kubernetes version's default is release.Default().
const (
	DefaultImageRepository  = release.DefaultImageRepository
	DefaultPodSubnet        = "10.244.0.0/16"
	DefaultServiceSubnet    = "10.96.0.0/12"
	DefaultDNSDomain        = "cluster.local"
	DefaultNodeCIDRMaskSize = 24
	// DefaultNodeCIDRMaskSizeIPv6 is kube-controller-manager's for IPv6 (node-cidr-mask-size-ipv6).
	DefaultNodeCIDRMaskSizeIPv6 = 64
	DefaultSSHUser              = "root"
	DefaultSSHPort              = 22
	DefaultKnownHostsFile       = "~/.ssh/known_hosts"
	DefaultCRIEndpoint          = "unix:///run/containerd/containerd.sock"
	DefaultCertValidity         = Duration(365 * 24 * hour)      // kubeadm: one year
	DefaultCAValidity           = Duration(10 * 365 * 24 * hour) // kubeadm: ten years
	DefaultAPIProxyPort         = 6444                           // k3s's and RKE2's port for the same proxy
	// security: the audit log's rotation (the CIS Kubernetes Benchmark's values) and Pod
	// Security's levels.
	DefaultAuditMaxAge        = 30
	DefaultAuditMaxBackups    = 10
	DefaultAuditMaxSize       = 100
	DefaultPodSecurityEnforce = "baseline"
	DefaultPodSecurityWarn    = "restricted"
	DefaultPodSecurityAudit   = "restricted"
	// etcdSnapshots: RKE2's schedule (every 12 hours, the newest 5 kept).
	DefaultEtcdSnapshotsEvery = Duration(12 * hour)
	DefaultEtcdSnapshotsKeep  = 5
	// MinEtcdSnapshotsEvery is the shortest schedule: a snapshot is a full copy of the database.
	MinEtcdSnapshotsEvery = Duration(hour / 60)
	// DefaultLocalVolumesPath is local-path-provisioner's own directory for its volumes.
	DefaultLocalVolumesPath = "/opt/local-path-provisioner"
)

// What kforge does about a host's firewall (Cluster.Firewall).
const (
	FirewallCheck = "check"
	FirewallOpen  = "open"
)

// kube-proxy's modes (KubeProxy.Mode). Auto is resolved against the hosts' facts at each run
// (ProxyMode).
const (
	ProxyModeAuto     = "auto"
	ProxyModeIptables = "iptables"
	ProxyModeNftables = "nftables"
)

// ProxyMode is the mode kube-proxy runs in: the inventory's, or for auto nftables when
// legacyIptables says some host's kernel has no legacy iptables, else iptables.
func (c *Cluster) ProxyMode(legacyIptables func(host string) bool) string {
	if m := c.KubeProxy.Mode; m != "" && m != ProxyModeAuto {
		return m
	}
	for _, n := range c.Nodes() {
		if !legacyIptables(n.Name) {
			return ProxyModeNftables
		}
	}
	return ProxyModeIptables
}

// Cluster is one inventory file.
type Cluster struct {
	// Inventory format version; must be kforge.dev/v1alpha1.
	APIVersion string `yaml:"apiVersion" jsonschema:"required,enum=kforge.dev/v1alpha1"`
	// Must be Cluster.
	Kind string `yaml:"kind" jsonschema:"required,enum=Cluster"`
	// Cluster name: a DNS label (lowercase letters, digits, '-'). Names the kubeconfig context and the state directory.
	Name string `yaml:"name" jsonschema:"required"`
	// Kubernetes version to install, vMAJOR.MINOR.PATCH, of a supported minor (v1.35, v1.36 or v1.37). Default v1.36.3. With a bundle, the bundle must hold it.
	KubernetesVersion string `yaml:"kubernetesVersion,omitempty"`
	// Stable address of the API server as host:port, e.g. a load balancer in front of the masters. Default with one master: its address and port 6443. With several masters and none, every node runs a local API proxy (apiProxy) across all of them.
	ControlPlaneEndpoint string `yaml:"controlPlaneEndpoint,omitempty"`
	// The node-local API proxy every node runs when several masters have no controlPlaneEndpoint.
	APIProxy APIProxy `yaml:"apiProxy,omitempty"`
	// A free IPv4 address in the masters' subnet that one master at a time holds and announces by ARP, for kubectl and other clients outside the nodes: the admin kubeconfig's server and a SAN of the API server certificates. Several masters and no controlPlaneEndpoint; the nodes keep using their local API proxy.
	ControlPlaneVIP string `yaml:"controlPlaneVIP,omitempty"`
	// Registry the control-plane, kube-proxy, CoreDNS and pause images are pulled from when no bundle is used. Default registry.k8s.io.
	ImageRepository string `yaml:"imageRepository,omitempty"`
	// Cluster networking.
	Networking Networking `yaml:"networking,omitempty"`
	// Certificate authority and certificate options.
	PKI PKI `yaml:"pki,omitempty"`
	// How to reach hosts over SSH; every host inherits these and may override any field.
	SSH SSH `yaml:"ssh,omitempty"`
	// kubelet options for every node.
	Kubelet Kubelet `yaml:"kubelet,omitempty"`
	// kube-proxy options.
	KubeProxy KubeProxy `yaml:"kubeProxy,omitempty"`
	// What kforge does about a firewall running on a host (firewalld, ufw): check (preflight names each port a node's role needs that it blocks, and the command that opens them) or open (kforge opens them for good, and lets the pod and Service subnets in: firewalld's default zone and trusted zone, with a reload; ufw's rules). Default check.
	Firewall string `yaml:"firewall,omitempty" jsonschema:"enum=check,enum=open"`
	// Container runtime (containerd) options for every node.
	ContainerRuntime ContainerRuntime `yaml:"containerRuntime,omitempty"`
	// How the cluster is hardened: Secrets encrypted in etcd, the API server's audit log, Pod Security admission. Every part is on by default (docs/security.md).
	Security Security `yaml:"security,omitempty"`
	// metrics-server, the resource metrics API (kubectl top, HorizontalPodAutoscalers by CPU and memory).
	MetricsServer MetricsServer `yaml:"metricsServer,omitempty"`
	// A default StorageClass for local volumes (local-path-provisioner): each volume a directory on the node that first runs a pod of its claim.
	LocalVolumes LocalVolumes `yaml:"localVolumes,omitempty"`
	// Snapshots every master takes of its etcd member on a schedule.
	EtcdSnapshots EtcdSnapshots `yaml:"etcdSnapshots,omitempty"`
	// Control-plane hosts (kube-apiserver, controller-manager, scheduler, stacked etcd). At least one; use an odd number for etcd quorum.
	Masters []Host `yaml:"masters" jsonschema:"required,minItems=1"`
	// Worker hosts.
	Workers []Host `yaml:"workers,omitempty"`
	// Hosts that run etcd apart from the masters (external etcd): 3 or 5, never an even number. With them the masters run no etcd member and their API servers use these hosts' members; each runs etcd as a static pod of a standalone kubelet (kubeadm's external etcd), and is no Kubernetes node. Leave out for stacked etcd on the masters.
	Etcd []Host `yaml:"etcd,omitempty"`
	// Path to an offline bundle directory (`kforge bundle build`); relative to this file. With a bundle, binaries and images come from it and nothing is downloaded.
	Bundle string `yaml:"bundle,omitempty"`
	// Kubernetes manifests applied (server-side) after the cluster is up, in order.
	Addons []Addon `yaml:"addons,omitempty"`

	src *source         // where each field came from; set by Parse
	rel release.Release // KubernetesVersion's row of the release catalogue; set by Parse and AtVersion
}

// Release is the release catalogue's row of the cluster's Kubernetes version (release.For):
// the version as numbers, its components' versions and images. It is read once, when the
// inventory is loaded; everything else reads it here. A Cluster that neither Parse nor
// AtVersion made has none, and Release panics (a test builds its cluster with one of them).
func (c *Cluster) Release() release.Release {
	if c.rel.Minor == "" {
		panic("inventory: Release of a Cluster that neither Parse nor AtVersion made")
	}
	return c.rel
}

// AtVersion is a copy of c at Kubernetes version v, with v's release row: an upgrade's hop.
// v must be a version this kforge installs (release.For's error says why not). The copy shares
// c's hosts, slices and maps, which nothing changes after Load.
func (c *Cluster) AtVersion(v string) (*Cluster, error) {
	r, err := release.For(v)
	if err != nil {
		return nil, err
	}
	cp := *c
	cp.KubernetesVersion, cp.rel = v, r
	return &cp, nil
}

// Networking describes the cluster's address space.
type Networking struct {
	// CIDR pods get their addresses from. For a dual-stack cluster, an IPv4 and an IPv6 CIDR separated by a comma, IPv4 first (as kubeadm writes it), e.g. 10.244.0.0/16,fd00:10:244::/56: every host then needs an ipv6Address, and serviceSubnet must be dual-stack too. A cluster's families are fixed when it is made. Default 10.244.0.0/16.
	PodSubnet string `yaml:"podSubnet,omitempty"`
	// CIDR Service cluster IPs come from; its first address is the kubernetes Service. For a dual-stack cluster, an IPv4 and an IPv6 CIDR separated by a comma, IPv4 first, e.g. 10.96.0.0/12,fd00:10:96::/112. Default 10.96.0.0/12.
	ServiceSubnet string `yaml:"serviceSubnet,omitempty"`
	// Cluster DNS domain. Default cluster.local.
	DNSDomain string `yaml:"dnsDomain,omitempty"`
	// Prefix length of each node's share of the pod subnet (of its IPv4 range, when dual-stack). Default 24 for IPv4, 64 for IPv6.
	NodeCIDRMaskSize int `yaml:"nodeCIDRMaskSize,omitempty"`
	// Prefix length of each node's share of a dual-stack cluster's IPv6 pod range. Default 64.
	NodeCIDRMaskSizeIPv6 int `yaml:"nodeCIDRMaskSizeIPv6,omitempty"`
	// Pod network installed by kforge: flannel (vxlan) or none (bring your own). Default flannel.
	Plugin string `yaml:"plugin,omitempty" jsonschema:"enum=flannel,enum=none"`
	// Whether NetworkPolicy is enforced: enforce (SIG Network's agent, kube-network-policies, runs on every node) or off (no agent; for those who bring their own, e.g. with their pod network). Turning it off removes the agent at the next apply. Default enforce.
	NetworkPolicy string `yaml:"networkPolicy,omitempty" jsonschema:"enum=enforce,enum=off"`
	// Enforce AdminNetworkPolicy and BaselineAdminNetworkPolicy (policy.networking.k8s.io/v1alpha1) too: kforge installs their CRDs, and the agent then sees every new connection, not only those of pods a NetworkPolicy selects. Turning it off again leaves the CRDs and their objects (deleting a CRD deletes its objects): the agent stops enforcing them. Needs networkPolicy enforce. Default false.
	AdminNetworkPolicy bool `yaml:"adminNetworkPolicy,omitempty"`
}

// The values of networking.networkPolicy.
const (
	NetworkPolicyEnforce = "enforce"
	NetworkPolicyOff     = "off"
)

// PKI holds certificate options.
type PKI struct {
	// Key algorithm for every generated key. Default ecdsa-p256.
	KeyAlgorithm string `yaml:"keyAlgorithm,omitempty" jsonschema:"enum=ecdsa-p256,enum=ecdsa-p384,enum=rsa-2048,enum=rsa-3072,enum=rsa-4096"`
	// Lifetime of leaf certificates, e.g. 8760h or 365d. Default 365d.
	CertValidity Duration `yaml:"certValidity,omitempty"`
	// Lifetime of generated CAs. Default 3650d.
	CAValidity Duration `yaml:"caValidity,omitempty"`
	// Extra names (DNS names or IP addresses) for the API server certificate.
	APIServerCertSANs []string `yaml:"apiServerCertSANs,omitempty"`
	// Use this cluster CA instead of generating one.
	ExternalCA *ExternalCA `yaml:"externalCA,omitempty"`
}

// ExternalCA points at a user-supplied CA certificate and key (PEM files).
type ExternalCA struct {
	// CA certificate (PEM); relative to the inventory file.
	Cert string `yaml:"cert" jsonschema:"required"`
	// CA private key (PEM); relative to the inventory file. Keep it out of version control.
	Key string `yaml:"key" jsonschema:"required"`
}

// SSH says how to reach a host. At the top level it sets defaults; on a host it overrides them
// field by field. Secrets are never written here: only the names of environment variables that
// hold them.
type SSH struct {
	// Login user. Default root.
	User string `yaml:"user,omitempty"`
	// SSH port. Default 22.
	Port int `yaml:"port,omitempty" jsonschema:"minimum=1,maximum=65535"`
	// Private key file; ~ is expanded. With an ssh-agent, only the agent key matching this file is offered.
	IdentityFile string `yaml:"identityFile,omitempty"`
	// Environment variable holding the passphrase of an encrypted identityFile.
	PassphraseEnv string `yaml:"passphraseEnv,omitempty"`
	// Environment variable holding a password for SSH password authentication.
	PasswordEnv string `yaml:"passwordEnv,omitempty"`
	// Use the ssh-agent at $SSH_AUTH_SOCK. Default true.
	Agent *bool `yaml:"agent,omitempty"`
	// known_hosts file used to verify host keys (and appended to with --accept-new-host-keys). Default ~/.ssh/known_hosts.
	KnownHostsFile string `yaml:"knownHostsFile,omitempty"`
	// The host's public key in authorized_keys form ("ssh-ed25519 AAAA..."); when set it is the only key accepted. Usually set per host.
	HostKey string `yaml:"hostKey,omitempty"`
	// Jump hosts (bastions) to go through, outermost first, each with its own user, key and host-key check.
	Bastions []Bastion `yaml:"bastions,omitempty"`
	// How to become root: auto (sudo when the user is not root), none, passwordless (sudo -n) or password (sudo with the password from sudoPasswordEnv). Default auto.
	Sudo string `yaml:"sudo,omitempty" jsonschema:"enum=auto,enum=none,enum=passwordless,enum=password"`
	// Environment variable holding the sudo password; required with sudo: password. The password is fed to sudo on stdin, never on a command line, never logged.
	SudoPasswordEnv string `yaml:"sudoPasswordEnv,omitempty"`
}

// Bastion is one SSH jump host.
type Bastion struct {
	// Address of the jump host: IP or DNS name, optionally with :port.
	Address string `yaml:"address" jsonschema:"required"`
	// Login user on the jump host. Default: the host's SSH user.
	User string `yaml:"user,omitempty"`
	// Private key for the jump host. Default: the host's identityFile.
	IdentityFile string `yaml:"identityFile,omitempty"`
	// The jump host's pinned public key, authorized_keys form. Default: checked against knownHostsFile.
	HostKey string `yaml:"hostKey,omitempty"`
}

// Host is one machine, master or worker.
type Host struct {
	// Node name: a DNS label, unique in the cluster. Becomes the Kubernetes node name and the host's name in output.
	Name string `yaml:"name" jsonschema:"required"`
	// Address kforge connects to over SSH: IP or DNS name.
	Address string `yaml:"address" jsonschema:"required"`
	// IP the node uses inside the cluster (kubelet --node-ip, API server advertise address, etcd). Default: address, when that is an IP.
	InternalAddress string `yaml:"internalAddress,omitempty"`
	// The node's IPv6 address inside the cluster, for a dual-stack cluster (required there, refused elsewhere): kubelet's second node IP, in the API server's and registry's certificates, flannel's IPv6 VXLAN endpoint and the Service route's IPv6 interface.
	IPv6Address string `yaml:"ipv6Address,omitempty"`
	// Per-host SSH overrides.
	SSH *SSH `yaml:"ssh,omitempty"`
	// Node labels.
	Labels map[string]string `yaml:"labels,omitempty"`
	// Node taints. Masters always get node-role.kubernetes.io/control-plane:NoSchedule unless listed here with another effect.
	Taints []Taint `yaml:"taints,omitempty"`
}

// Taint is a Kubernetes node taint.
type Taint struct {
	// Taint key, e.g. dedicated or example.com/gpu.
	Key string `yaml:"key" jsonschema:"required"`
	// Taint value; may be empty.
	Value string `yaml:"value,omitempty"`
	// NoSchedule, PreferNoSchedule or NoExecute.
	Effect string `yaml:"effect" jsonschema:"required,enum=NoSchedule,enum=PreferNoSchedule,enum=NoExecute"`
}

// Kubelet holds kubelet options for every node.
type Kubelet struct {
	// systemd or cgroupfs; containerd is configured to match. Default systemd.
	CgroupDriver string `yaml:"cgroupDriver,omitempty" jsonschema:"enum=systemd,enum=cgroupfs"`
	// Extra kubelet command-line flags, without the leading --, e.g. {max-pods: "200"}.
	ExtraArgs map[string]string `yaml:"extraArgs,omitempty"`
	// Allow hosts with cgroup v1: their kubelet gets failCgroupV1: false (hosts on cgroup v2 keep kubelet's default). kubelet 1.35+ refuses cgroup v1 unless told otherwise and the Kubernetes project is removing support: opt in only where v2 is impossible.
	AllowCgroupV1 bool `yaml:"allowCgroupV1,omitempty"`
	// resolv.conf (a path on the hosts) kubelet gives pods with the Default DNS policy and CoreDNS as its upstream. Default: the host's /etc/resolv.conf.
	ResolvConf string `yaml:"resolvConf,omitempty"`
}

// KubeProxy holds kube-proxy options.
type KubeProxy struct {
	// How kube-proxy programs Services: iptables, nftables (GA since Kubernetes 1.33; needs Linux 5.13 or later), or auto: nftables when a host's kernel has no legacy iptables (RHEL 10, hosts without the ip_tables module), else iptables as kubeadm does. The pod network's and hostPorts' rules follow. Default auto.
	Mode string `yaml:"mode,omitempty" jsonschema:"enum=auto,enum=iptables,enum=nftables"`
	// kube-proxy's conntrack.maxPerCore: connections tracked per CPU core, which sets the machine-wide conntrack table size. Default: kube-proxy's own (32768). 0 leaves the table alone, as hosts that share a kernel (containers, kforge lab) need.
	ConntrackMaxPerCore *int `yaml:"conntrackMaxPerCore,omitempty" jsonschema:"minimum=0"`
}

// MetricsServer holds metrics-server's settings.
type MetricsServer struct {
	// Run metrics-server (from the bundle, in kube-system; it verifies the kubelets' serving certificates against the cluster CA). Turning it off removes it at the next apply. Default true.
	Enabled *bool `yaml:"enabled,omitempty"`
}

// On says whether the cluster runs metrics-server.
func (m MetricsServer) On() bool { return m.Enabled == nil || *m.Enabled }

// LocalVolumes holds the settings of the local volumes' StorageClass.
type LocalVolumes struct {
	// Serve the StorageClass local-path, the cluster's default: local-path-provisioner (from the bundle, in the namespace local-path-storage) makes each volume a directory under path on the node that first runs a pod of its claim, and the volume stays on that node. Its helper image is kforge's own, so it needs a bundle. Turning it off removes the provisioner and the StorageClass at the next apply; the volumes and their data stay. Default false.
	Enabled *bool `yaml:"enabled,omitempty"`
	// The directory on every node that holds the volumes: an absolute path, outside what kforge reset removes (it keeps this one: your data). Default /opt/local-path-provisioner.
	Path string `yaml:"path,omitempty"`
}

// On says whether the cluster serves local volumes.
func (l LocalVolumes) On() bool { return l.Enabled != nil && *l.Enabled }

// EtcdSnapshots holds the schedule of the snapshots the masters take of etcd.
type EtcdSnapshots struct {
	// Take snapshots on a schedule: a systemd timer on every master runs kforge-etcd-snapshot (from the bundle), which streams its etcd member's snapshot into /var/lib/kforge/etcd-snapshots, verifies it and keeps the newest. `kforge etcd snapshot --fetch` copies the newest to the workstation; `kforge etcd status` says how old each master's last one is. Turning it off removes the timer at the next apply (the snapshots stay). Default true when a bundle is set (the program comes from it).
	Enabled *bool `yaml:"enabled,omitempty"`
	// How often: a Go duration or whole days ("30m", "6h", "1d"), at least 1m. Default 12h.
	Every Duration `yaml:"every,omitempty"`
	// How many snapshots each master keeps, the newest. Default 5.
	Keep int `yaml:"keep,omitempty" jsonschema:"minimum=1"`
}

// ScheduledSnapshots says whether the masters take etcd snapshots on a schedule.
func (c *Cluster) ScheduledSnapshots() bool {
	if e := c.EtcdSnapshots.Enabled; e != nil {
		return *e
	}
	return c.Bundle != ""
}

// Security holds the cluster's hardening settings.
type Security struct {
	// How Secrets are encrypted in etcd: secretbox (XSalsa20 and Poly1305, the default), aescbc, or none. The key is made by kforge and kept in the state dir's pki/ like the CA keys.
	EncryptionAtRest string `yaml:"encryptionAtRest,omitempty" jsonschema:"enum=secretbox,enum=aescbc,enum=none"`
	// The API servers' audit log.
	Audit Audit `yaml:"audit,omitempty"`
	// Pod Security admission's cluster-wide levels.
	PodSecurity PodSecurity `yaml:"podSecurity,omitempty"`
}

// Audit holds the API servers' audit log settings.
type Audit struct {
	// Write the audit log (/var/log/kubernetes/audit/audit.log on every master): Secrets, ConfigMaps and tokens at Metadata level, everything else at Request level, health checks and nodes' own reads left out. Default true.
	Enabled *bool `yaml:"enabled,omitempty"`
	// Days an old log file is kept. Default 30.
	MaxAge int `yaml:"maxAge,omitempty" jsonschema:"minimum=1"`
	// Old log files kept. Default 10.
	MaxBackups int `yaml:"maxBackups,omitempty" jsonschema:"minimum=1"`
	// Megabytes a log file grows to before it is rotated. Default 100.
	MaxSize int `yaml:"maxSize,omitempty" jsonschema:"minimum=1"`
}

// AuditEnabled says whether the API servers write an audit log.
func (a Audit) AuditEnabled() bool { return a.Enabled == nil || *a.Enabled }

// PodSecurity holds Pod Security admission's defaults, for namespaces without their own labels.
type PodSecurity struct {
	// Level pods must meet to be admitted: privileged, baseline or restricted. Default baseline.
	Enforce string `yaml:"enforce,omitempty" jsonschema:"enum=privileged,enum=baseline,enum=restricted"`
	// Level below which a user is warned. Default restricted.
	Warn string `yaml:"warn,omitempty" jsonschema:"enum=privileged,enum=baseline,enum=restricted"`
	// Level below which the audit log notes a pod. Default restricted.
	Audit string `yaml:"audit,omitempty" jsonschema:"enum=privileged,enum=baseline,enum=restricted"`
	// Namespaces exempt besides kube-system and kube-flannel, which always are.
	ExemptNamespaces []string `yaml:"exemptNamespaces,omitempty"`
}

// Encryption-at-rest providers (Security.EncryptionAtRest).
const (
	EncryptionSecretbox = "secretbox"
	EncryptionAESCBC    = "aescbc"
	EncryptionNone      = "none"
)

// ContainerRuntime holds container runtime options.
type ContainerRuntime struct {
	// CRI socket of containerd. Default unix:///run/containerd/containerd.sock.
	Endpoint string `yaml:"endpoint,omitempty"`
	// Where containerd and runc come from: bundle (kforge installs the bundle's containerd 2 and runc under systemd, with the kernel modules they need, and upgrades them with the bundle) or host (the host's own containerd, installed beforehand). Default: bundle when a bundle is set, else host.
	Install string `yaml:"install,omitempty" jsonschema:"enum=bundle,enum=host"`
	// Registry mirrors and private registries, rendered as containerd's hosts.toml (one directory per registry host under /etc/containerd/certs.d). Needs install: bundle.
	Registries []Registry `yaml:"registries,omitempty"`
}

// Registry is how containerd reaches one registry: through mirrors, trusting a CA, with credentials.
type Registry struct {
	// The registry host images name, e.g. registry.k8s.io or docker.io.
	Host string `yaml:"host" jsonschema:"required"`
	// Mirrors to pull from first, in order, as URLs (https://mirror.example:5000); the registry itself is the fallback.
	Mirrors []string `yaml:"mirrors,omitempty"`
	// CA certificate (PEM) that signed the mirrors' and the registry's TLS certificates; relative to this file.
	CAFile string `yaml:"caFile,omitempty"`
	// Environment variables holding the user name and password for basic auth (the names, never the values). The credentials land in hosts.toml (mode 0600) on every node and nowhere else.
	UsernameEnv string `yaml:"usernameEnv,omitempty"`
	PasswordEnv string `yaml:"passwordEnv,omitempty"`
}

// Container runtime sources (ContainerRuntime.Install).
const (
	RuntimeFromBundle = "bundle"
	RuntimeFromHost   = "host"
)

// Addon is a user manifest applied after the cluster is up.
type Addon struct {
	// Manifest file (YAML, may hold several documents); relative to the inventory file.
	Path string `yaml:"path" jsonschema:"required"`
}

// Role says what a host is in the cluster.
type Role string

const (
	RoleMaster Role = "master"
	RoleWorker Role = "worker"
	// RoleEtcd is a host of the etcd group: an external etcd member, no Kubernetes node.
	RoleEtcd Role = "etcd"
	// AnyNode selects every Kubernetes node, master or worker (a fleet's hosts but the etcd
	// group's); no host has it as its role.
	AnyNode Role = "node"
)

// Selects says whether a host of role r is one selector selects: "" every host, AnyNode every
// master and worker, a role its hosts.
func (r Role) Selects(selector Role) bool {
	return selector == "" || selector == r || selector == AnyNode && r != RoleEtcd
}

// Node is a host with its role and effective SSH settings, as the rest of kforge sees it.
type Node struct {
	Host
	Role Role
	// SSH is the top-level ssh block merged with the host's overrides.
	SSH SSH
}

// Nodes returns masters then workers, each with its effective SSH settings.
func (c *Cluster) Nodes() []Node {
	nodes := make([]Node, 0, len(c.Masters)+len(c.Workers))
	for _, h := range c.Masters {
		nodes = append(nodes, Node{Host: h, Role: RoleMaster, SSH: c.SSH.Merge(h.SSH)})
	}
	for _, h := range c.Workers {
		nodes = append(nodes, Node{Host: h, Role: RoleWorker, SSH: c.SSH.Merge(h.SSH)})
	}
	return nodes
}

// EtcdHosts are the etcd group's hosts (external etcd), each with its effective SSH settings;
// none for stacked etcd.
func (c *Cluster) EtcdHosts() []Node {
	nodes := make([]Node, 0, len(c.Etcd))
	for _, h := range c.Etcd {
		nodes = append(nodes, Node{Host: h, Role: RoleEtcd, SSH: c.SSH.Merge(h.SSH)})
	}
	return nodes
}

// Hosts are every host kforge drives: the Kubernetes nodes (Nodes), then the etcd group's.
func (c *Cluster) Hosts() []Node { return append(c.Nodes(), c.EtcdHosts()...) }

// EtcdRole is the role of the hosts that run etcd's members: the etcd group's with an external
// etcd, the masters' otherwise.
func (c *Cluster) EtcdRole() Role {
	if c.ExternalEtcd() {
		return RoleEtcd
	}
	return RoleMaster
}

// EtcdMembers are the hosts that run etcd's members (EtcdRole).
func (c *Cluster) EtcdMembers() []Host {
	if c.ExternalEtcd() {
		return c.Etcd
	}
	return c.Masters
}

// ExternalEtcd says whether etcd runs on hosts of its own (the etcd group) instead of stacked
// on the masters.
func (c *Cluster) ExternalEtcd() bool { return len(c.Etcd) > 0 }

// Merge returns s with every field set in o replacing s's.
func (s SSH) Merge(o *SSH) SSH {
	if o == nil {
		return s
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&s.User, o.User)
	set(&s.IdentityFile, o.IdentityFile)
	set(&s.PassphraseEnv, o.PassphraseEnv)
	set(&s.PasswordEnv, o.PasswordEnv)
	set(&s.KnownHostsFile, o.KnownHostsFile)
	set(&s.HostKey, o.HostKey)
	set(&s.Sudo, o.Sudo)
	set(&s.SudoPasswordEnv, o.SudoPasswordEnv)
	if o.Port != 0 {
		s.Port = o.Port
	}
	if o.Agent != nil {
		s.Agent = o.Agent
	}
	if o.Bastions != nil {
		s.Bastions = o.Bastions
	}
	return s
}

// NodeIP is the address the node uses inside the cluster.
func (h Host) NodeIP() string {
	if h.InternalAddress != "" {
		return h.InternalAddress
	}
	return h.Address
}

// NodeIPs are the node's addresses inside the cluster, one per IP family: NodeIP, then the
// IPv6 address of a dual-stack cluster's host. kubelet's --node-ip takes them in this order.
func (h Host) NodeIPs() []string {
	if h.IPv6Address != "" {
		return []string{h.NodeIP(), h.IPv6Address}
	}
	return []string{h.NodeIP()}
}

// PodSubnets are the pod subnet's ranges: one, or an IPv4 and an IPv6 one for a dual-stack
// cluster. An empty podSubnet is the default's.
func (n Networking) PodSubnets() []string { return splitList(cmp.Or(n.PodSubnet, DefaultPodSubnet)) }

// ServiceSubnets are the Service subnet's ranges, as PodSubnets. The first range's first
// address is the kubernetes Service.
func (n Networking) ServiceSubnets() []string {
	return splitList(cmp.Or(n.ServiceSubnet, DefaultServiceSubnet))
}

// DualStack tells whether the cluster has an IPv4 and an IPv6 pod range (validation sees to the
// rest: Service ranges of both families, and every host's IPv6 address).
func (n Networking) DualStack() bool { return len(n.PodSubnets()) == 2 }

// NodeCIDRMaskSizes are the prefix lengths of each node's share of each pod range, in
// PodSubnets' order.
func (n Networking) NodeCIDRMaskSizes() []int {
	sizes := []int{n.NodeCIDRMaskSize}
	if n.DualStack() {
		sizes = append(sizes, n.NodeCIDRMaskSizeIPv6)
	}
	return sizes
}

// splitList splits a comma-separated list, trimming each element's spaces.
func splitList(s string) []string {
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// Path is a path as the inventory names it, resolved against the inventory file's directory
// when it is not absolute.
func (c *Cluster) Path(path string) string {
	if filepath.IsAbs(path) || c.src == nil {
		return path
	}
	return filepath.Join(filepath.Dir(c.src.file), path)
}

// APIProxy is the node-local API proxy: on every node, 127.0.0.1:Port forwards to the API
// servers of every master that answers.
type APIProxy struct {
	// Port on 127.0.0.1 of every node. Default 6444.
	Port int `yaml:"port,omitempty" jsonschema:"minimum=1,maximum=65535"`
}

// LocalAPIProxy says whether the nodes reach the API servers through their node-local proxy:
// several masters and no controlPlaneEndpoint.
func (c *Cluster) LocalAPIProxy() bool { return c.ControlPlaneEndpoint == "" && len(c.Masters) > 1 }

// BundleFromMasters says whether the masters serve the bundle to the other nodes (a registry
// of theirs, filled from what the workstation uploaded to them): with a bundle, and a runtime
// kforge installs and configures (containerRuntime.install: bundle).
func (c *Cluster) BundleFromMasters() bool {
	return c.Bundle != "" && c.ContainerRuntime.Install == RuntimeFromBundle
}
