// Package hostpath names, once, every path kforge writes, reads or removes on a host. Most are
// kubeadm's, so that tools and people who know kubeadm find things where they expect them.
package hostpath

const (
	// KubernetesDir holds kubeconfigs, the PKI and the static-pod manifests.
	KubernetesDir          = "/etc/kubernetes"
	PKIDir                 = KubernetesDir + "/pki"
	CACert                 = PKIDir + "/ca.crt"
	ManifestsDir           = KubernetesDir + "/manifests"
	KubeletKubeconfig      = KubernetesDir + "/kubelet.conf"
	BootstrapKubeletConfig = KubernetesDir + "/bootstrap-kubelet.conf"
	// ManifestsMarkerPath lists the static-pod manifests kforge wrote and the cluster they belong
	// to (facts.ManifestsMarker). kubelet ignores files whose name starts with a dot.
	ManifestsMarkerPath = ManifestsDir + "/.kforge-manifests"

	// KubeletDir is kubelet's root directory.
	KubeletDir            = "/var/lib/kubelet"
	KubeletConfigPath     = KubeletDir + "/config.yaml"
	KubeletInstanceConfig = KubeletDir + "/instance-config.yaml"
	KubeletFlagsEnvPath   = KubeletDir + "/kubeadm-flags.env"
	KubeletUnitPath       = "/etc/systemd/system/kubelet.service"
	// KubeletPKIDir is the kubelet's certificate store: KubeletClientCert (a symlink to the newest
	// kubelet-client-<time>.pem, certificate and key) and its serving certificate.
	KubeletPKIDir     = KubeletDir + "/pki"
	KubeletClientCert = KubeletPKIDir + "/kubelet-client-current.pem"
	// KubeletServerCert and KubeletServerKey are the kubelet's serving certificate, issued by
	// kforge from the cluster CA (pki.KubeletServerCert); kubelet reads them again when they
	// change.
	KubeletServerCert = KubeletPKIDir + "/kubelet-server.crt"
	KubeletServerKey  = KubeletPKIDir + "/kubelet-server.key"
	// KubeletDropInPath is kforge's kubelet drop-in: its presence says the kubelet on the host
	// was set up by kforge.
	KubeletDropInPath  = "/etc/systemd/system/kubelet.service.d/10-kforge.conf"
	DefaultKubeletPath = "/usr/bin/kubelet"

	// APIServerConfigDir holds kube-apiserver's configuration files kforge writes (0600 each):
	// the encryption, admission, audit and authentication configurations.
	APIServerConfigDir   = KubernetesDir + "/apiserver"
	EncryptionConfig     = APIServerConfigDir + "/encryption.yaml"
	AdmissionConfig      = APIServerConfigDir + "/admission.yaml"
	AuditPolicy          = APIServerConfigDir + "/audit-policy.yaml"
	AuthenticationConfig = APIServerConfigDir + "/authentication.yaml"
	// AuditLogDir holds kube-apiserver's audit log (AuditLog) and its rotated files.
	AuditLogDir = "/var/log/kubernetes/audit"
	AuditLog    = AuditLogDir + "/audit.log"

	// EtcdDataDir is stacked etcd's data directory.
	EtcdDataDir = "/var/lib/etcd"

	ContainerdConfigPath = "/etc/containerd/config.toml"
	// The container runtime kforge installs from the bundle (containerRuntime.install: bundle),
	// where containerd's own release puts it: /usr/local, never over a distribution's files.
	RuntimeBinDir = "/usr/local/bin"
	RuncPath      = "/usr/local/sbin/runc"
	// APIProxyPath is the node-local API proxy's binary (clusters without a
	// controlPlaneEndpoint).
	APIProxyPath = "/usr/local/bin/kforge-apiproxy"
	// The node-local API proxy's unit, its configuration (which it follows without a restart)
	// and the state it writes: the backends in use and whether each is up.
	APIProxyUnit     = "kforge-apiproxy.service"
	APIProxyUnitPath = "/etc/systemd/system/" + APIProxyUnit
	APIProxyConfig   = "/etc/kforge/apiproxy.json"
	APIProxyState    = "/run/kforge-apiproxy/backends.json"
	// The control plane's virtual IP (controlPlaneVIP) is held by one master at a time:
	// kforge-vip, its unit, its configuration, its kubeconfig (a client certificate allowed
	// only its Lease) and the state it writes (whether this master holds the address).
	VIPPath            = "/usr/local/bin/kforge-vip"
	VIPUnit            = "kforge-vip.service"
	VIPUnitPath        = "/etc/systemd/system/" + VIPUnit
	VIPConfig          = "/etc/kforge/vip.json"
	VIPKubeconfig      = "/etc/kubernetes/kforge-vip.conf"
	VIPState           = "/run/kforge-vip/state.json"
	ContainerdUnitPath = "/etc/systemd/system/containerd.service"
	// Scheduled etcd snapshots (etcdSnapshots): on every master a timer starts a oneshot
	// service that runs kforge-etcd-snapshot with its configuration; the snapshots and their
	// records (NAME.db, NAME.json) are kept in EtcdSnapshotDir.
	EtcdSnapshotPath      = "/usr/local/bin/kforge-etcd-snapshot"
	EtcdSnapshotUnit      = "kforge-etcd-snapshot.service"
	EtcdSnapshotUnitPath  = "/etc/systemd/system/" + EtcdSnapshotUnit
	EtcdSnapshotTimer     = "kforge-etcd-snapshot.timer"
	EtcdSnapshotTimerPath = "/etc/systemd/system/" + EtcdSnapshotTimer
	EtcdSnapshotConfig    = "/etc/kforge/etcd-snapshot.json"
	EtcdSnapshotDir       = "/var/lib/kforge/etcd-snapshots"
	// The masters' registry (CNCF distribution), from which the other nodes take the bundle's
	// images and binaries over the cluster network: its binary, unit, configuration (read-only,
	// TLS with a certificate from the cluster CA, on RegistryPort) and storage. It is filled
	// through a second, writable instance that listens on RegistryFillAddr (loopback only)
	// while kforge fills it, and RegistryFilled records what the last fill put there.
	RegistryPath       = "/usr/local/bin/kforge-registry"
	RegistryUnit       = "kforge-registry.service"
	RegistryUnitPath   = "/etc/systemd/system/" + RegistryUnit
	RegistryConfig     = "/etc/kforge/registry.yml"
	RegistryFillConfig = "/etc/kforge/registry-fill.yml"
	RegistryDir        = "/var/lib/kforge/registry"
	RegistryFilled     = RegistryDir + "/kforge-filled"
	RegistryPort       = 5000
	RegistryFillAddr   = "127.0.0.1:5001"
	// RegistryFilesRepo is the repository of the masters' registry that holds the bundle's
	// binaries, as blobs named by their sha256.
	RegistryFilesRepo = "kforge/files"
	// RegistryCert is the base name, under PKIDir, of the registry's serving certificate, and
	// the certificate's and key's paths.
	RegistryCert     = "kforge-registry"
	RegistryCertPath = PKIDir + "/" + RegistryCert + ".crt"
	RegistryKeyPath  = PKIDir + "/" + RegistryCert + ".key"
	// RegistryConfigDir holds one directory per registry host with its hosts.toml.
	RegistryConfigDir = "/etc/containerd/certs.d"
	// ModulesLoadFile names the kernel modules Kubernetes networking and containerd need, loaded
	// at every boot.
	ModulesLoadFile  = "/etc/modules-load.d/kforge.conf"
	DefaultCNIBinDir = "/opt/cni/bin"
	// CNIConfFile is the pod network config kforge writes on each node.
	CNIConfFile = "/etc/cni/net.d/10-kforge.conflist"
	// CNIStateDir keeps the CNI plugins' IP allocations (networks/) and cached results
	// (results/), FlannelRunDir flannel's subnet lease, CNINetnsPrefix the pods' network
	// namespaces: reset removes them.
	CNIStateDir    = "/var/lib/cni"
	FlannelRunDir  = "/run/flannel"
	CNINetnsPrefix = "/run/netns/cni-"
	// ServiceRouteUnit routes the Service subnet on hosts where no route covers it; the marker
	// (tmpfs: gone at reboot, with the route) names the interface of the route it added; a
	// dual-stack cluster's IPv6 Service range has a marker of its own.
	ServiceRouteUnit       = "kforge-service-route.service"
	ServiceRouteUnitPath   = "/etc/systemd/system/" + ServiceRouteUnit
	ServiceRouteMarker     = "/run/kforge-service-route"
	ServiceRouteMarkerIPv6 = "/run/kforge-service-route6"
	// FactsCacheDir (tmpfs: gone at reboot) keeps each binary's version output, keyed by the
	// file's size, times, inode and device, so facts run a binary only when it changed.
	FactsCacheDir = "/run/kforge-facts"
	// SysctlFile is kforge's own sysctl.d file; only it is applied (`sysctl --system` fails on
	// hosts where some global keys are read-only, such as containers).
	SysctlFile = "/etc/sysctl.d/99-kforge.conf"
	// ResolvConf is the host's resolver configuration, which kubelet gives pods by default.
	ResolvConf = "/etc/resolv.conf"
)
