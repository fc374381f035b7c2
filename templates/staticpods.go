package templates

import (
	"fmt"
	"math"
	"net"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/release"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// Kubeadm's probe and priority settings (util/staticpod).
const (
	priorityClassName   = "system-node-critical"
	priority            = int32(2000001000)
	probePortName       = "probe-port"
	healthCheckTimeoutS = 240 // ControlPlaneComponentHealthCheck default, 4 minutes
	etcdMetricsPort     = 2381
)

// CACertDirCandidates are the host CA directories kubeadm mounts into the API server and
// controller manager when they exist on the host (controlplane/volumes.go); apply checks them
// per host.
var CACertDirCandidates = []string{"/etc/pki/ca-trust", "/etc/pki/tls/certs", "/etc/ca-certificates", "/usr/share/ca-certificates", "/usr/local/share/ca-certificates"}

// DebianCACertDirs are the extra host CA directories kubeadm mounts into the API server and
// controller manager on a Debian/Ubuntu host (it mounts each of /etc/pki/ca-trust,
// /etc/pki/tls/certs, /etc/ca-certificates, /usr/share/ca-certificates and
// /usr/local/share/ca-certificates that exists on the host).
var DebianCACertDirs = []string{"/etc/ca-certificates", "/usr/local/share/ca-certificates", "/usr/share/ca-certificates"}

// ControlPlane is the input of the four static pods of one master.
type ControlPlane struct {
	ClusterName string
	// Images are the images of the cluster's release under its image repository
	// (the inventory's Release().Images(imageRepository)).
	Images        release.Images
	ServiceSubnet string // comma-separated for dual-stack, as kube-apiserver takes it
	PodSubnet     string // comma-separated for dual-stack, as kube-controller-manager takes it
	DNSDomain     string
	// NodeCIDRMaskSizes are each pod range's node share, in PodSubnet's order (nil or 24 for
	// IPv4 and 64 for IPv6: controller-manager's defaults).
	NodeCIDRMaskSizes []int
	NodeName          string
	AdvertiseAddress  string
	BindPort          int
	// ExternalCA: the cluster CA key is not on the host, so the controller manager does not
	// sign certificates (kubeadm's UsingExternalCA).
	ExternalCA bool
	// SigningCert, when set, is the file under the PKI directory kube-controller-manager signs
	// with instead of ca.crt: while the cluster CA is rotated ca.crt holds two CAs, and its CSR
	// signer accepts exactly one certificate.
	SigningCert string
	// CACertDirs are the host's extra CA directories to mount (kubeadm mounts those that exist).
	CACertDirs []string
	// FlexVolumeDir, when set, is mounted read-write into kube-controller-manager as
	// "flexvolume-dir" (kubeadm before v1.36; templates/minors.go).
	FlexVolumeDir string
	// EtcdInitialCluster lists the members etcd starts with ("name=https://ip:2380"); empty:
	// this master alone. EtcdClusterState is "new" for members starting a cluster together,
	// "existing" for one joining a running cluster.
	EtcdInitialCluster []string
	EtcdClusterState   string
	// EtcdServers are the client URLs of an external etcd's members (the inventory's etcd
	// group): kube-apiserver uses them all, and the master runs no etcd of its own. Empty: the
	// master's stacked member, on localhost.
	EtcdServers []string
	// SingleMaster turns leader election off in kube-controller-manager and kube-scheduler:
	// with one instance of each there is nobody to elect, and the first lease attempt, made
	// before the API server's RBAC is in place, costs a retry period (2 s) on the way to a
	// working cluster. With several masters they elect, as kubeadm sets them.
	SingleMaster bool
	// SigningDuration is kube-controller-manager's --cluster-signing-duration: the lifetime of
	// the certificates it signs (kubelets' client certificates), the inventory's certValidity.
	// 0 when it is kube-controller-manager's default (a year): kubeadm leaves it unset.
	SigningDuration time.Duration
	// EtcdUser, when set, is the user and group etcd runs as (Options.EtcdUser); root otherwise.
	EtcdUser *Owner
	// Audit, when set, is the audit log's rotation (inventory security.audit): the API server
	// writes hostpath.AuditLog by the policy at hostpath.AuditPolicy.
	Audit *inventory.Audit
}

// EtcdPeerURL is https://ip:2380.
func EtcdPeerURL(ip string) string { return "https://" + net.JoinHostPort(ip, "2380") }

// EtcdClientURL is https://ip:2379.
func EtcdClientURL(ip string) string { return "https://" + net.JoinHostPort(ip, "2379") }

// EtcdMember is one entry of --initial-cluster.
func EtcdMember(name, ip string) string { return name + "=" + EtcdPeerURL(ip) }

func pkiPath(name string) string { return path.Join(hostpath.PKIDir, name) }

// command renders kubeadm's argument list: "--name=value", sorted by name
// (kubeadmutil.ArgumentsToCommand).
func command(bin string, args map[string]string) []string {
	names := make([]string, 0, len(args))
	for n := range args {
		names = append(names, n)
	}
	sort.Strings(names)
	out := []string{bin}
	for _, n := range names {
		out = append(out, fmt.Sprintf("--%s=%s", n, args[n]))
	}
	return out
}

func httpProbe(host, p string, scheme corev1.URIScheme, initialDelay, timeout, failure, period int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Host: host, Path: p, Port: intstr.FromString(probePortName), Scheme: scheme,
		}},
		InitialDelaySeconds: initialDelay, TimeoutSeconds: timeout, FailureThreshold: failure, PeriodSeconds: period,
	}
}

func liveness(host, p string, s corev1.URIScheme) *corev1.Probe {
	return httpProbe(host, p, s, 10, 15, 8, 10)
}
func readiness(host, p string, s corev1.URIScheme) *corev1.Probe {
	return httpProbe(host, p, s, 0, 15, 3, 1)
}
func startup(host, p string, s corev1.URIScheme) *corev1.Probe {
	return httpProbe(host, p, s, 10, 15, int32(math.Ceil(healthCheckTimeoutS/10.0)), 10)
}

type mount struct {
	name, path string
	typ        corev1.HostPathType
	readOnly   bool
}

func componentPod(c corev1.Container, mounts []mount, annotations map[string]string) *corev1.Pod {
	slices.SortFunc(mounts, func(a, b mount) int { return strings.Compare(a.name, b.name) })
	var vols []corev1.Volume
	for _, m := range mounts {
		t := m.typ
		vols = append(vols, corev1.Volume{Name: m.name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: m.path, Type: &t}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: m.name, MountPath: m.path, ReadOnly: m.readOnly})
	}
	c.ImagePullPolicy = corev1.PullIfNotPresent
	p := priority
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: c.Name, Namespace: metav1.NamespaceSystem,
			Labels:      map[string]string{"component": c.Name, "tier": "control-plane"},
			Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			Containers:        []corev1.Container{c},
			Priority:          &p,
			PriorityClassName: priorityClassName,
			HostNetwork:       true,
			Volumes:           vols,
			SecurityContext:   &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		},
	}
}

func cpu(v string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(v)}}
}

func probePort(port int) []corev1.ContainerPort {
	return []corev1.ContainerPort{{Name: probePortName, ContainerPort: int32(port), Protocol: corev1.ProtocolTCP}}
}

func localhostFor(ip string) string {
	if a := net.ParseIP(ip); a != nil && a.To4() == nil {
		return "::1"
	}
	return "127.0.0.1"
}

func (c ControlPlane) caMounts() []mount {
	ms := []mount{{"k8s-certs", hostpath.PKIDir, corev1.HostPathDirectoryOrCreate, true}, {"ca-certs", "/etc/ssl/certs", corev1.HostPathDirectoryOrCreate, true}}
	for _, d := range c.CACertDirs {
		ms = append(ms, mount{strings.ReplaceAll(d, "/", "-")[1:], d, corev1.HostPathDirectoryOrCreate, true})
	}
	return ms
}

// ShutdownDelay is how long kube-apiserver goes on serving, with /readyz failing, once told to
// stop, on clusters of several masters: a load balancer in front of them must mark a master
// down within it (the lab's haproxy: 2 s).
const ShutdownDelay = 5 * time.Second

// APIServer is kube-apiserver's static pod (controlplane/manifests.go).
func (c ControlPlane) APIServer() *corev1.Pod {
	port := strconv.Itoa(c.BindPort)
	args := map[string]string{
		"advertise-address":             c.AdvertiseAddress,
		"allow-privileged":              "true",
		"authorization-mode":            "Node,RBAC",
		"client-ca-file":                pkiPath("ca.crt"),
		"enable-admission-plugins":      "NodeRestriction,EventRateLimit,DenyServiceExternalIPs",
		"admission-control-config-file": hostpath.AdmissionConfig,
		"authentication-config":         hostpath.AuthenticationConfig,
		"encryption-provider-config":    hostpath.EncryptionConfig,
		// A new key (kforge secrets rotate-key) is read without a restart.
		"encryption-provider-config-automatic-reload": "true",
		"profiling": "false",
		"service-account-extend-token-expiration": "false",
		"tls-min-version":                         TLSMinVersion,
		"tls-cipher-suites":                       strings.Join(TLSCipherSuites, ","),
		"enable-bootstrap-token-auth":             "true",
		"etcd-cafile":                             pkiPath("etcd/ca.crt"),
		"etcd-certfile":                           pkiPath("apiserver-etcd-client.crt"),
		"etcd-keyfile":                            pkiPath("apiserver-etcd-client.key"),
		"etcd-servers":                            c.etcdServers(),
		"kubelet-client-certificate":              pkiPath("apiserver-kubelet-client.crt"),
		"kubelet-client-key":                      pkiPath("apiserver-kubelet-client.key"),
		// Every kubelet serves with a certificate of the cluster CA (pki.KubeletServerCert).
		"kubelet-certificate-authority":   pkiPath("ca.crt"),
		"kubelet-preferred-address-types": "InternalIP,ExternalIP,Hostname",
		// SO_REUSEPORT: when kubelet replaces this pod (an upgrade, a renewed certificate),
		// the new kube-apiserver binds :6443 while the old one still drains, instead of
		// crash-looping on "address already in use" until it is gone (see
		// docs/kubeadm-differences.md).
		"permit-port-sharing":                "true",
		"shutdown-send-retry-after":          "true",
		"proxy-client-cert-file":             pkiPath("front-proxy-client.crt"),
		"proxy-client-key-file":              pkiPath("front-proxy-client.key"),
		"requestheader-allowed-names":        "front-proxy-client",
		"requestheader-client-ca-file":       pkiPath("front-proxy-ca.crt"),
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-username-headers":     "X-Remote-User",
		"secure-port":                        port,
		"service-account-issuer":             "https://kubernetes.default.svc." + c.DNSDomain,
		"service-account-key-file":           pkiPath("sa.pub"),
		"service-account-signing-key-file":   pkiPath("sa.key"),
		"service-cluster-ip-range":           c.ServiceSubnet,
		"tls-cert-file":                      pkiPath("apiserver.crt"),
		"tls-private-key-file":               pkiPath("apiserver.key"),
	}
	if !c.SingleMaster {
		// Behind a load balancer (or kforge's node-local proxies), a kube-apiserver that kubelet
		// replaces keeps serving for a while after its /readyz fails, so the balancer marks it
		// down and moves its clients to another master before it stops accepting them.
		args["shutdown-delay-duration"] = ShutdownDelay.String()
	}
	mounts := append(c.caMounts(), mount{"kforge-apiserver-config", hostpath.APIServerConfigDir, corev1.HostPathDirectoryOrCreate, true})
	if a := c.Audit; a != nil {
		args["audit-policy-file"] = hostpath.AuditPolicy
		args["audit-log-path"] = hostpath.AuditLog
		args["audit-log-maxage"] = strconv.Itoa(a.MaxAge)
		args["audit-log-maxbackup"] = strconv.Itoa(a.MaxBackups)
		args["audit-log-maxsize"] = strconv.Itoa(a.MaxSize)
		mounts = append(mounts, mount{"audit-log", hostpath.AuditLogDir, corev1.HostPathDirectoryOrCreate, false})
	}
	host := c.AdvertiseAddress
	return componentPod(corev1.Container{
		Name:           "kube-apiserver",
		Image:          c.Images.APIServer,
		Command:        command("kube-apiserver", args),
		LivenessProbe:  liveness(host, "/livez", corev1.URISchemeHTTPS),
		ReadinessProbe: readiness(host, "/readyz", corev1.URISchemeHTTPS),
		StartupProbe:   startup(host, "/livez", corev1.URISchemeHTTPS),
		Resources:      cpu("250m"),
		Ports:          probePort(c.BindPort),
	}, mounts, map[string]string{
		"kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint": net.JoinHostPort(c.AdvertiseAddress, port),
	})
}

// ControllerManager is kube-controller-manager's static pod.
func (c ControlPlane) ControllerManager() *corev1.Pod {
	kubeconfig := path.Join(hostpath.KubernetesDir, "controller-manager.conf")
	args := map[string]string{
		"authentication-kubeconfig":        kubeconfig,
		"authorization-kubeconfig":         kubeconfig,
		"bind-address":                     "127.0.0.1",
		"client-ca-file":                   pkiPath("ca.crt"),
		"cluster-name":                     c.ClusterName,
		"cluster-signing-cert-file":        pkiPath("ca.crt"),
		"cluster-signing-key-file":         pkiPath("ca.key"),
		"controllers":                      "*,bootstrapsigner,tokencleaner",
		"kubeconfig":                       kubeconfig,
		"leader-elect":                     strconv.FormatBool(!c.SingleMaster),
		"profiling":                        "false",
		"requestheader-client-ca-file":     pkiPath("front-proxy-ca.crt"),
		"root-ca-file":                     pkiPath("ca.crt"),
		"service-account-private-key-file": pkiPath("sa.key"),
		"use-service-account-credentials":  "true",
		// Pods that ended are collected from this many on (the default, 12500, is more than a
		// small cluster's etcd should hold).
		"terminated-pod-gc-threshold": "1000",
	}
	if c.SigningDuration > 0 {
		args["cluster-signing-duration"] = c.SigningDuration.String()
	}
	if c.SigningCert != "" {
		args["cluster-signing-cert-file"] = pkiPath(c.SigningCert)
	}
	if c.ExternalCA {
		args["cluster-signing-cert-file"] = ""
		args["cluster-signing-key-file"] = ""
	}
	if c.PodSubnet != "" {
		args["allocate-node-cidrs"] = "true"
		args["cluster-cidr"] = c.PodSubnet
		args["service-cluster-ip-range"] = c.ServiceSubnet
		// Each range's node share, where it is not the controller-manager's default for its
		// family (24 for IPv4, 64 for IPv6). A dual-stack cluster's flags name the family: the
		// controller-manager refuses node-cidr-mask-size there.
		ranges := strings.Split(c.PodSubnet, ",")
		for i, size := range c.NodeCIDRMaskSizes {
			def, flag := 24, "node-cidr-mask-size-ipv4"
			if i < len(ranges) && strings.Contains(ranges[i], ":") {
				def, flag = 64, "node-cidr-mask-size-ipv6"
			}
			if len(c.NodeCIDRMaskSizes) == 1 {
				flag = "node-cidr-mask-size"
			}
			if size != 0 && size != def {
				args[flag] = strconv.Itoa(size)
			}
		}
	}
	mounts := append(c.caMounts(), mount{"kubeconfig", kubeconfig, corev1.HostPathFileOrCreate, true})
	if c.FlexVolumeDir != "" {
		mounts = append(mounts, mount{"flexvolume-dir", c.FlexVolumeDir, corev1.HostPathDirectoryOrCreate, false})
	}
	return componentPod(corev1.Container{
		Name:          "kube-controller-manager",
		Image:         c.Images.ControllerManager,
		Command:       command("kube-controller-manager", args),
		LivenessProbe: liveness("127.0.0.1", "/healthz", corev1.URISchemeHTTPS),
		StartupProbe:  startup("127.0.0.1", "/healthz", corev1.URISchemeHTTPS),
		Resources:     cpu("200m"),
		Ports:         probePort(10257),
	}, mounts, nil)
}

// Scheduler is kube-scheduler's static pod.
func (c ControlPlane) Scheduler() *corev1.Pod {
	kubeconfig := path.Join(hostpath.KubernetesDir, "scheduler.conf")
	args := map[string]string{
		"authentication-kubeconfig": kubeconfig,
		"authorization-kubeconfig":  kubeconfig,
		"bind-address":              "127.0.0.1",
		"kubeconfig":                kubeconfig,
		"leader-elect":              strconv.FormatBool(!c.SingleMaster),
		"profiling":                 "false",
	}
	return componentPod(corev1.Container{
		Name:           "kube-scheduler",
		Image:          c.Images.Scheduler,
		Command:        command("kube-scheduler", args),
		LivenessProbe:  liveness("127.0.0.1", "/livez", corev1.URISchemeHTTPS),
		ReadinessProbe: readiness("127.0.0.1", "/readyz", corev1.URISchemeHTTPS),
		StartupProbe:   startup("127.0.0.1", "/livez", corev1.URISchemeHTTPS),
		Resources:      cpu("100m"),
		Ports:          probePort(10259),
	}, []mount{{"kubeconfig", kubeconfig, corev1.HostPathFileOrCreate, true}}, nil)
}

// Etcd is an etcd member's static pod (phases/etcd/local.go): a master's stacked member, or an
// etcd host's (external etcd, kubeadm's "etcd cluster with kubeadm" guide), the same pod.
func (c ControlPlane) Etcd() *corev1.Pod {
	lo := localhostFor(c.AdvertiseAddress)
	client := EtcdClientURL(c.AdvertiseAddress)
	peer := EtcdPeerURL(c.AdvertiseAddress)
	args := map[string]string{
		"name":                           c.NodeName,
		"listen-client-urls":             "https://" + net.JoinHostPort(lo, "2379") + "," + client,
		"advertise-client-urls":          client,
		"listen-peer-urls":               peer,
		"initial-advertise-peer-urls":    peer,
		"data-dir":                       hostpath.EtcdDataDir,
		"cert-file":                      pkiPath("etcd/server.crt"),
		"key-file":                       pkiPath("etcd/server.key"),
		"trusted-ca-file":                pkiPath("etcd/ca.crt"),
		"client-cert-auth":               "true",
		"peer-cert-file":                 pkiPath("etcd/peer.crt"),
		"peer-key-file":                  pkiPath("etcd/peer.key"),
		"peer-trusted-ca-file":           pkiPath("etcd/ca.crt"),
		"peer-client-cert-auth":          "true",
		"snapshot-count":                 "10000",
		"listen-metrics-urls":            "http://" + net.JoinHostPort(lo, strconv.Itoa(etcdMetricsPort)),
		"feature-gates":                  "InitialCorruptCheck=true",
		"watch-progress-notify-interval": "5s",
		"initial-cluster":                EtcdMember(c.NodeName, c.AdvertiseAddress),
	}
	if len(c.EtcdInitialCluster) > 0 {
		args["initial-cluster"] = strings.Join(c.EtcdInitialCluster, ",")
	}
	if c.EtcdClusterState == "existing" {
		args["initial-cluster-state"] = "existing"
	}
	pod := componentPod(corev1.Container{
		Name:           "etcd",
		Image:          c.Images.Etcd,
		Command:        command("etcd", args),
		LivenessProbe:  liveness(lo, "/livez", corev1.URISchemeHTTP),
		ReadinessProbe: readiness(lo, "/readyz", corev1.URISchemeHTTP),
		StartupProbe:   startup(lo, "/readyz", corev1.URISchemeHTTP),
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("100Mi"),
		}},
		Ports: probePort(etcdMetricsPort),
	}, []mount{
		{"etcd-data", hostpath.EtcdDataDir, corev1.HostPathDirectoryOrCreate, false},
		{"etcd-certs", hostpath.PKIDir + "/etcd", corev1.HostPathDirectoryOrCreate, false},
	}, map[string]string{"kubeadm.kubernetes.io/etcd.advertise-client-urls": client})
	if u := c.EtcdUser; u != nil {
		sc := pod.Spec.SecurityContext
		sc.RunAsUser, sc.RunAsGroup, sc.RunAsNonRoot = ptr.To(int64(u.UID)), ptr.To(int64(u.GID)), ptr.To(true)
	}
	return pod
}

// etcdServers is kube-apiserver's --etcd-servers: every external member, or the master's own.
func (c ControlPlane) etcdServers() string {
	if len(c.EtcdServers) > 0 {
		return strings.Join(c.EtcdServers, ",")
	}
	return "https://" + net.JoinHostPort(localhostFor(c.AdvertiseAddress), "2379")
}

// StaticPods returns the manifests of one master by file name: with an external etcd, no
// etcd.yaml.
func (c ControlPlane) StaticPods() map[string]*corev1.Pod {
	pods := map[string]*corev1.Pod{
		"kube-apiserver.yaml":          c.APIServer(),
		"kube-controller-manager.yaml": c.ControllerManager(),
		"kube-scheduler.yaml":          c.Scheduler(),
	}
	if len(c.EtcdServers) == 0 {
		pods["etcd.yaml"] = c.Etcd()
	}
	return pods
}

// MarshalPod renders a pod as YAML.
func MarshalPod(p *corev1.Pod) ([]byte, error) { return yaml.Marshal(p) }
