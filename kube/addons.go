package kube

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	componentbasev1alpha1 "k8s.io/component-base/config/v1alpha1"
	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kforge/kforge/templates"
)

// CoreDNSInput is what CoreDNS deploys.
type CoreDNSInput struct {
	Image         string
	DNSDomain     string
	ServiceSubnet string // kube-dns gets its tenth address, as kubelet's clusterDNS
	// Replicas of a new Deployment; default 2. An existing Deployment keeps its replica count
	// (someone may have scaled it), as kubeadm does.
	Replicas int32
	// Upstream identifies the resolv.conf files kubelet gives pods on the nodes (a hash of their
	// contents), which CoreDNS forwards to: it is an annotation of CoreDNS's pod template, so a
	// changed file rolls CoreDNS's pods, which read it only when they start. "" for none.
	Upstream string
}

// UpstreamAnnotation is CoreDNS's pod-template annotation that carries CoreDNSInput.Upstream.
const UpstreamAnnotation = "kforge.dev/upstream-resolv-conf"

// CoreDNS deploys CoreDNS as `kubeadm init phase addon coredns` renders it (alike in kubeadm
// v1.35, v1.36 and v1.37; the image is the release's): the
// coredns ConfigMap (Corefile; created once, an existing one is kept), ClusterRole and ClusterRoleBinding system:coredns,
// ServiceAccount coredns, Deployment coredns and Service kube-dns, all in kube-system.
func CoreDNS(ctx context.Context, c kubernetes.Interface, in CoreDNSInput) ([]Change, error) {
	if in.Replicas == 0 {
		in.Replicas = 2
	}
	if c != nil {
		if d, err := c.AppsV1().Deployments(metav1.NamespaceSystem).Get(ctx, "coredns", metav1.GetOptions{}); err == nil && d.Spec.Replicas != nil {
			in.Replicas = *d.Spec.Replicas
		}
	}
	o, err := coreDNSObjects(in)
	if err != nil {
		return nil, err
	}
	return o.apply(ctx, c)
}

// Corefile is kubeadm's CoreDNS configuration for a cluster domain.
func Corefile(domain string) string {
	return `.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes ` + domain + ` in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30 {
       disable success ` + domain + `
       disable denial ` + domain + `
    }
    loop
    reload
    loadbalance
}
`
}

func coreDNSObjects(in CoreDNSInput) (objects, error) {
	if in.Image == "" || in.DNSDomain == "" {
		return nil, fmt.Errorf("coredns: image and DNS domain are required")
	}
	dnsIP, err := templates.ClusterDNSIP(in.ServiceSubnet)
	if err != nil {
		return nil, fmt.Errorf("coredns: %w", err)
	}
	const ns = metav1.NamespaceSystem
	labels := map[string]string{"k8s-app": "kube-dns"}
	var o objects
	// An existing Corefile is kept, as kubeadm keeps one it did not write (stub domains,
	// forwarders someone configured).
	o.configMapRetain(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: ns},
		Data:       map[string]string{"Corefile": Corefile(in.DNSDomain)},
	})
	o.clusterRole(&rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	})
	o.clusterRoleBinding(clusterRoleBinding("system:coredns", "system:coredns", serviceAccount(ns, "coredns")))
	o.serviceAccount(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: ns}})
	port := func(name string, p int32, proto corev1.Protocol) corev1.ContainerPort {
		return corev1.ContainerPort{Name: name, ContainerPort: p, Protocol: proto}
	}
	o.deployment(&appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(in.Replicas),
			Strategy: appsv1.DeploymentStrategy{
				Type:          appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr.To(intstr.FromInt32(1))},
			},
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: upstreamAnnotation(in.Upstream)},
				Spec: corev1.PodSpec{
					PriorityClassName:  "system-cluster-critical",
					ServiceAccountName: "coredns",
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
							Weight: 100,
							PodAffinityTerm: corev1.PodAffinityTerm{
								LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
									Key: "k8s-app", Operator: metav1.LabelSelectorOpIn, Values: []string{"kube-dns"},
								}}},
								TopologyKey: "kubernetes.io/hostname",
							},
						}},
					}},
					Tolerations: []corev1.Toleration{
						{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
						{Key: LabelControlPlane, Effect: corev1.TaintEffectNoSchedule},
					},
					NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
					Containers: []corev1.Container{{
						Name:            "coredns",
						Image:           in.Image,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Resources: corev1.ResourceRequirements{
							Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("170Mi")},
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("70Mi")},
						},
						Args:         []string{"-conf", "/etc/coredns/Corefile"},
						VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true}},
						Ports: []corev1.ContainerPort{
							port("dns", 53, corev1.ProtocolUDP),
							port("dns-tcp", 53, corev1.ProtocolTCP),
							port("metrics", 9153, corev1.ProtocolTCP),
							port("liveness-probe", 8080, corev1.ProtocolTCP),
							port("readiness-probe", 8181, corev1.ProtocolTCP),
						},
						LivenessProbe: &corev1.Probe{
							ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromString("liveness-probe"), Scheme: corev1.URISchemeHTTP}},
							InitialDelaySeconds: 60, TimeoutSeconds: 5, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 5,
						},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("readiness-probe"), Scheme: corev1.URISchemeHTTP}},
							// The API server's defaults, spelled out: integers are compared as
							// set, so leaving them 0 would read as a difference on every run.
							TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3,
						},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							Capabilities:             &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}, Drop: []corev1.Capability{"ALL"}},
							ReadOnlyRootFilesystem:   ptr.To(true),
						},
					}},
					DNSPolicy: corev1.DNSDefault,
					Volumes: []corev1.Volume{{
						Name: "config-volume",
						VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: "coredns"},
							Items:                []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}},
						}},
					}},
				},
			},
		},
	})
	svcPort := func(name string, p int32, proto corev1.Protocol) corev1.ServicePort {
		return corev1.ServicePort{Name: name, Port: p, Protocol: proto, TargetPort: intstr.FromInt32(p)}
	}
	o.service(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: "kube-dns", Namespace: ns,
			Labels:      map[string]string{"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"},
			Annotations: map[string]string{"prometheus.io/port": "9153", "prometheus.io/scrape": "true"},
		},
		Spec: corev1.ServiceSpec{
			ClusterIP: dnsIP,
			Ports: []corev1.ServicePort{
				svcPort("dns", 53, corev1.ProtocolUDP),
				svcPort("dns-tcp", 53, corev1.ProtocolTCP),
				svcPort("metrics", 9153, corev1.ProtocolTCP),
			},
			Selector: labels,
		},
	})
	return o, nil
}

// KubeProxyInput is what KubeProxy deploys.
type KubeProxyInput struct {
	Image string
	// Server is the API server URL kube-proxy talks to (https://controlPlaneEndpoint).
	Server string
	// PodSubnet is kube-proxy's clusterCIDR: comma-separated for dual-stack.
	PodSubnet string
	// Mode is kube-proxy's mode; default iptables.
	Mode string
	// ConntrackMaxPerCore, when set, is conntrack.maxPerCore; 0 leaves the machine's
	// nf_conntrack_max alone (needed where it is not per network namespace, like kforge's lab).
	ConntrackMaxPerCore *int32
}

// KubeProxy deploys kube-proxy as `kubeadm init phase addon kube-proxy` does for v1.36:
// ServiceAccount kube-proxy, ClusterRoleBinding kubeadm:node-proxier, Role and RoleBinding
// kube-proxy for its ConfigMap, the ConfigMap kube-proxy (config.conf with the
// KubeProxyConfiguration, kubeconfig.conf) and the DaemonSet kube-proxy, all in kube-system.
func KubeProxy(ctx context.Context, c kubernetes.Interface, in KubeProxyInput) ([]Change, error) {
	o, err := kubeProxyObjects(in)
	if err != nil {
		return nil, err
	}
	return o.apply(ctx, c)
}

// KubeProxyConfiguration is kubeadm's default kube-proxy configuration for the input.
func KubeProxyConfiguration(in KubeProxyInput) *kubeproxyv1alpha1.KubeProxyConfiguration {
	bind := "0.0.0.0"
	if p, err := netip.ParsePrefix(strings.Split(in.PodSubnet, ",")[0]); err == nil && p.Addr().Is6() {
		bind = "::"
	}
	mode := in.Mode
	if mode == "" {
		mode = "iptables"
	}
	return &kubeproxyv1alpha1.KubeProxyConfiguration{
		TypeMeta:         metav1.TypeMeta{APIVersion: "kubeproxy.config.k8s.io/v1alpha1", Kind: "KubeProxyConfiguration"},
		BindAddress:      bind,
		ClientConnection: kubeproxyClientConnection(),
		ClusterCIDR:      in.PodSubnet,
		Mode:             kubeproxyv1alpha1.ProxyMode(mode),
		Conntrack:        kubeproxyv1alpha1.KubeProxyConntrackConfiguration{MaxPerCore: in.ConntrackMaxPerCore},
	}
}

const kubeProxyKubeconfig = "/var/lib/kube-proxy/kubeconfig.conf"

func kubeproxyClientConnection() componentbasev1alpha1.ClientConnectionConfiguration {
	return componentbasev1alpha1.ClientConnectionConfiguration{Kubeconfig: kubeProxyKubeconfig}
}

// kube-proxy's kubeconfig.conf: the service account's token and CA, the control-plane
// endpoint (kubeadm's template, verbatim).
func kubeProxyKubeconfigConf(server string) string {
	return `apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
    server: ` + server + `
  name: default
contexts:
- context:
    cluster: default
    namespace: default
    user: default
  name: default
current-context: default
users:
- name: default
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token`
}

func kubeProxyObjects(in KubeProxyInput) (objects, error) {
	if in.Image == "" || in.Server == "" {
		return nil, fmt.Errorf("kube-proxy: image and API server URL are required")
	}
	cfg, err := yaml.Marshal(KubeProxyConfiguration(in))
	if err != nil {
		return nil, err
	}
	// kubeadm writes the config through a "|-" block in its template, which drops the final
	// newline.
	conf := strings.TrimSuffix(string(cfg), "\n")
	const ns = metav1.NamespaceSystem
	var o objects
	o.serviceAccount(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: ns}})
	o.clusterRoleBinding(clusterRoleBinding(NodeProxierBinding, nodeProxierClusterRole, serviceAccount(ns, "kube-proxy")))
	o.role(getConfigMapRole(ns, "kube-proxy", "kube-proxy"))
	o.roleBinding(roleBinding(ns, "kube-proxy", "kube-proxy", group(NodeBootstrapTokenAuthGroup)))
	// Unsigned, as kubeadm leaves a user-supplied KubeProxyConfiguration: the mode and conntrack
	// settings are kforge's choices, which `kubeadm upgrade` must keep, not regenerate.
	o.configMap(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: ns, Labels: map[string]string{"app": "kube-proxy"}},
		Data: map[string]string{
			"kubeconfig.conf": kubeProxyKubeconfigConf(in.Server),
			"config.conf":     conf,
		},
	})
	labels := map[string]string{"k8s-app": "kube-proxy"}
	o.daemonSet(&appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: ns, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					PriorityClassName: "system-node-critical",
					Containers: []corev1.Container{{
						Name:            "kube-proxy",
						Image:           in.Image,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Command:         []string{"/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf", "--hostname-override=$(NODE_NAME)"},
						SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
						VolumeMounts: []corev1.VolumeMount{
							{MountPath: "/var/lib/kube-proxy", Name: "kube-proxy"},
							{MountPath: "/run/xtables.lock", Name: "xtables-lock"},
							{MountPath: "/lib/modules", Name: "lib-modules", ReadOnly: true},
						},
						Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
					}},
					HostNetwork:        true,
					ServiceAccountName: "kube-proxy",
					Volumes: []corev1.Volume{
						{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-proxy"}}}},
						hostPathVolume("xtables-lock", "/run/xtables.lock", corev1.HostPathFileOrCreate),
						hostPathVolume("lib-modules", "/lib/modules", ""),
					},
					Tolerations:  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
				},
			},
		},
	})
	return o, nil
}

func hostPathVolume(name, path string, t corev1.HostPathType) corev1.Volume {
	hp := &corev1.HostPathVolumeSource{Path: path}
	if t != "" {
		hp.Type = ptr.To(t)
	}
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: hp}}
}

// FlannelInput is what Flannel deploys.
type FlannelInput struct {
	Image string
	// PodSubnets are flannel's Network and, dual-stack, its IPv6Network.
	PodSubnets []string
	// Endpoint is the control-plane endpoint as host:port. flanneld runs in the host network
	// and starts before kube-proxy, so it cannot use the kubernetes Service address: it is
	// given KUBERNETES_SERVICE_HOST/PORT from this.
	Endpoint string
	// NFTables is flannel's EnableNFTables: its masquerade and forward rules go to nftables
	// tables (ip flannel-ipv4, ip6 flannel-ipv6) instead of iptables chains.
	NFTables bool
}

// FlannelNamespace is where flannel runs.
const FlannelNamespace = "kube-flannel"

// Flannel deploys flannel (vxlan) as kforge proved it on its lab: the kube-flannel namespace
// (privileged pod security), ServiceAccount, ClusterRole and ClusterRoleBinding flannel, the
// kube-flannel-cfg ConfigMap (net-conf.json) and the kube-flannel-ds DaemonSet. Without
// flannel's CNI-installing init containers: kforge writes each node's CNI configuration itself.
func Flannel(ctx context.Context, c kubernetes.Interface, in FlannelInput) ([]Change, error) {
	o, err := flannelObjects(in)
	if err != nil {
		return nil, err
	}
	return o.apply(ctx, c)
}

func flannelObjects(in FlannelInput) (objects, error) {
	if in.Image == "" {
		return nil, fmt.Errorf("flannel: image is required")
	}
	var v6 string
	for i, s := range in.PodSubnets {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("flannel: pod subnet %q: %v", s, err)
		}
		if i == 1 {
			if !p.Addr().Is6() {
				return nil, fmt.Errorf("flannel: a dual-stack cluster's second pod subnet is IPv6, not %s", s)
			}
			v6 = s
		}
	}
	if n := len(in.PodSubnets); n < 1 || n > 2 {
		return nil, fmt.Errorf("flannel: %d pod subnets: want one, or an IPv4 and an IPv6 one", n)
	}
	host, port, err := net.SplitHostPort(in.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("flannel: control-plane endpoint %q: want host:port", in.Endpoint)
	}
	if _, err := strconv.Atoi(port); err != nil {
		return nil, fmt.Errorf("flannel: control-plane endpoint %q: port is not a number", in.Endpoint)
	}
	const ns = FlannelNamespace
	labels := map[string]string{"app": "flannel", "tier": "node", "k8s-app": "flannel"}
	var o objects
	o.namespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{
		"k8s-app":                            "flannel",
		"pod-security.kubernetes.io/enforce": "privileged",
	}}})
	o.serviceAccount(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "flannel", Namespace: ns, Labels: map[string]string{"k8s-app": "flannel"}}})
	o.clusterRole(&rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "flannel", Labels: map[string]string{"k8s-app": "flannel"}},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
		},
	})
	crb := clusterRoleBinding("flannel", "flannel", serviceAccount(ns, "flannel"))
	crb.Labels = map[string]string{"k8s-app": "flannel"}
	o.clusterRoleBinding(crb)
	// Dual-stack: flanneld takes the IPv6 address of the interface that holds the node's IPv4
	// one (--iface), and routes the IPv6 pod ranges over a vxlan device of its own (flannel-v6.1).
	ipv6 := ""
	if v6 != "" {
		ipv6 = fmt.Sprintf("  \"EnableIPv6\": true,\n  \"IPv6Network\": %q,\n", v6)
	}
	netConf := fmt.Sprintf("{\n  \"Network\": %q,\n%s  \"EnableNFTables\": %t,\n  \"Backend\": {\n    \"Type\": \"vxlan\"\n  }\n}\n", in.PodSubnets[0], ipv6, in.NFTables)
	o.configMap(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-cfg", Namespace: ns, Labels: labels},
		Data:       map[string]string{"net-conf.json": netConf},
	})
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	o.daemonSet(&appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-ds", Namespace: ns, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "flannel"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
							MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}}},
						}}},
					}},
					HostNetwork:        true,
					PriorityClassName:  "system-node-critical",
					Tolerations:        []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					ServiceAccountName: "flannel",
					Containers: []corev1.Container{{
						Name:            "kube-flannel",
						Image:           in.Image,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Command:         []string{"/opt/bin/flanneld"},
						Args:            []string{"--ip-masq", "--kube-subnet-mgr", "--iface=$(NODE_IP)"},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("50Mi"),
						}},
						SecurityContext: &corev1.SecurityContext{
							Privileged:   ptr.To(false),
							Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN", "NET_RAW"}},
						},
						Env: []corev1.EnvVar{
							fieldEnv("POD_NAME", "metadata.name"),
							fieldEnv("POD_NAMESPACE", "metadata.namespace"),
							fieldEnv("NODE_IP", "status.hostIP"),
							{Name: "KUBERNETES_SERVICE_HOST", Value: host},
							{Name: "KUBERNETES_SERVICE_PORT", Value: port},
							{Name: "EVENT_QUEUE_DEPTH", Value: "5000"},
							{Name: "CONT_WHEN_CACHE_NOT_READY", Value: "false"},
						},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "run", MountPath: "/run/flannel"},
							{Name: "flannel-cfg", MountPath: "/etc/kube-flannel/"},
							{Name: "xtables-lock", MountPath: "/run/xtables.lock"},
						},
					}},
					Volumes: []corev1.Volume{
						hostPathVolume("run", "/run/flannel", ""),
						{Name: "flannel-cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-flannel-cfg"}}}},
						hostPathVolume("xtables-lock", "/run/xtables.lock", corev1.HostPathFileOrCreate),
					},
				},
			},
		},
	})
	return o, nil
}

// upstreamAnnotation is CoreDNS's pod-template annotation for upstream; none when it is "".
func upstreamAnnotation(upstream string) map[string]string {
	if upstream == "" {
		return nil
	}
	return map[string]string{UpstreamAnnotation: upstream}
}
