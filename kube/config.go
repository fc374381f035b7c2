package kube

import (
	"context"
	"crypto/sha256"
	"fmt"
	"path"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/templates"
)

// ConfigMaps and keys kubeadm v1.36 stores the cluster's configuration in.
const (
	KubeadmConfigMap        = "kubeadm-config"
	ClusterConfigurationKey = "ClusterConfiguration"
	KubeletConfigMap        = "kubelet-config"
	KubeletConfigKey        = "kubelet"
	// ComponentConfigHashAnnotation marks a component ConfigMap kubeadm generated itself (not
	// user supplied): `kubeadm upgrade` may then regenerate it.
	ComponentConfigHashAnnotation = "kubeadm.kubernetes.io/component-config.hash"
)

// ClusterConfiguration is kubeadm's ClusterConfiguration (kubeadm.k8s.io/v1beta4) with the fields
// `kubeadm init` stores in the kubeadm-config ConfigMap for a cluster like kforge's. kubeadm
// marshals its defaulted external type; the JSON names and empty-struct fields here reproduce
// that output (keys sorted, apiServer/controllerManager/dns/proxy/scheduler as {}).
type ClusterConfiguration struct {
	APIVersion                  string          `json:"apiVersion"`
	Kind                        string          `json:"kind"`
	APIServer                   APIServer       `json:"apiServer"`
	CACertificateValidityPeriod metav1.Duration `json:"caCertificateValidityPeriod"`
	CertificateValidityPeriod   metav1.Duration `json:"certificateValidityPeriod"`
	CertificatesDir             string          `json:"certificatesDir"`
	ClusterName                 string          `json:"clusterName"`
	ControlPlaneEndpoint        string          `json:"controlPlaneEndpoint,omitempty"`
	ControllerManager           struct{}        `json:"controllerManager"`
	DNS                         struct{}        `json:"dns"`
	EncryptionAlgorithm         string          `json:"encryptionAlgorithm"`
	Etcd                        Etcd            `json:"etcd"`
	ImageRepository             string          `json:"imageRepository"`
	KubernetesVersion           string          `json:"kubernetesVersion"`
	Networking                  Networking      `json:"networking"`
	Proxy                       struct{}        `json:"proxy"`
	Scheduler                   struct{}        `json:"scheduler"`
}

// APIServer is ClusterConfiguration.apiServer.
type APIServer struct {
	CertSANs []string `json:"certSANs,omitempty"`
}

// Etcd is ClusterConfiguration.etcd: local (stacked on the masters) or external (the
// inventory's etcd group).
type Etcd struct {
	Local    *LocalEtcd    `json:"local,omitempty"`
	External *ExternalEtcd `json:"external,omitempty"`
}

// ExternalEtcd is ClusterConfiguration.etcd.external: the members and the client credentials
// the API servers use.
type ExternalEtcd struct {
	Endpoints []string `json:"endpoints"`
	CAFile    string   `json:"caFile"`
	CertFile  string   `json:"certFile"`
	KeyFile   string   `json:"keyFile"`
}

// LocalEtcd is ClusterConfiguration.etcd.local.
type LocalEtcd struct {
	DataDir string `json:"dataDir"`
}

// Networking is ClusterConfiguration.networking.
type Networking struct {
	DNSDomain     string `json:"dnsDomain"`
	PodSubnet     string `json:"podSubnet,omitempty"`
	ServiceSubnet string `json:"serviceSubnet"`
}

// ClusterConfigurationFor is the ClusterConfiguration `kubeadm init` would store for the
// inventory's cluster (a loaded, defaulted inventory).
func ClusterConfigurationFor(c *inventory.Cluster) (ClusterConfiguration, error) {
	p, _, err := pki.FromInventory(c)
	if err != nil {
		return ClusterConfiguration{}, err
	}
	return ClusterConfiguration{
		APIVersion:                  "kubeadm.k8s.io/v1beta4",
		Kind:                        "ClusterConfiguration",
		APIServer:                   APIServer{CertSANs: c.PKI.APIServerCertSANs},
		CACertificateValidityPeriod: metav1.Duration{Duration: p.CAValidity},
		CertificateValidityPeriod:   metav1.Duration{Duration: p.CertValidity},
		CertificatesDir:             hostpath.PKIDir,
		ClusterName:                 c.Name,
		ControlPlaneEndpoint:        c.ControlPlaneEndpoint,
		EncryptionAlgorithm:         p.KeyAlgorithm.KubeadmName(),
		Etcd:                        etcdConfig(c),
		ImageRepository:             orDefault(c.ImageRepository, inventory.DefaultImageRepository),
		KubernetesVersion:           c.Release().Kubernetes,
		Networking: Networking{
			DNSDomain:     orDefault(c.Networking.DNSDomain, inventory.DefaultDNSDomain),
			PodSubnet:     strings.Join(c.Networking.PodSubnets(), ","),
			ServiceSubnet: strings.Join(c.Networking.ServiceSubnets(), ","),
		},
	}, nil
}

// etcdConfig is the cluster's ClusterConfiguration.etcd, as kubeadm records an external etcd.
func etcdConfig(c *inventory.Cluster) Etcd {
	if !c.ExternalEtcd() {
		return Etcd{Local: &LocalEtcd{DataDir: hostpath.EtcdDataDir}}
	}
	e := &ExternalEtcd{CAFile: path.Join(hostpath.PKIDir, "etcd/ca.crt"), CertFile: path.Join(hostpath.PKIDir, "apiserver-etcd-client.crt"), KeyFile: path.Join(hostpath.PKIDir, "apiserver-etcd-client.key")}
	for _, h := range c.Etcd {
		e.Endpoints = append(e.Endpoints, templates.EtcdClientURL(h.NodeIP()))
	}
	return Etcd{External: e}
}

// KubeletConfigurationFor is the cluster-wide kubelet configuration of the inventory's cluster:
// the templates package's kubelet config.yaml without its node-local fields
// (containerRuntimeEndpoint lives in each node's instance-config.yaml, as with kubeadm 1.36's
// NodeLocalCRISocket).
func KubeletConfigurationFor(c *inventory.Cluster) (*kubeletv1beta1.KubeletConfiguration, error) {
	nodes := c.Nodes()
	if len(nodes) == 0 {
		return nil, fmt.Errorf("the inventory lists no hosts")
	}
	return templates.KubeletFor(c, nodes[0], templates.Options{}).Config()
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

// UploadConfigInput is what UploadConfig stores.
type UploadConfigInput struct {
	// Cluster goes into kube-system/kubeadm-config, key ClusterConfiguration.
	Cluster ClusterConfiguration
	// Kubelet goes into kube-system/kubelet-config, key kubelet; its containerRuntimeEndpoint is
	// node-local and left out.
	Kubelet *kubeletv1beta1.KubeletConfiguration
}

// UploadConfig stores the cluster configuration the way `kubeadm init phase upload-config all`
// does, so kubeadm (join, upgrade, certs) reads a kforge cluster: the kubeadm-config and
// kubelet-config ConfigMaps in kube-system and the Roles and RoleBindings that let nodes and
// bootstrap tokens read them (kubeadm:nodes-kubeadm-config, kubeadm:kubelet-config).
func UploadConfig(ctx context.Context, c kubernetes.Interface, in UploadConfigInput) ([]Change, error) {
	o, err := uploadConfigObjects(in)
	if err != nil {
		return nil, err
	}
	return o.apply(ctx, c)
}

func uploadConfigObjects(in UploadConfigInput) (objects, error) {
	if in.Kubelet == nil {
		return nil, fmt.Errorf("upload config: no kubelet configuration given")
	}
	cc, err := yaml.Marshal(in.Cluster)
	if err != nil {
		return nil, err
	}
	kc := in.Kubelet.DeepCopy()
	kc.ContainerRuntimeEndpoint = ""
	kb, err := yaml.Marshal(kc)
	if err != nil {
		return nil, err
	}
	const ns = metav1.NamespaceSystem
	var o objects
	o.configMap(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: KubeadmConfigMap, Namespace: ns},
		Data:       map[string]string{ClusterConfigurationKey: string(cc)},
	})
	o.role(getConfigMapRole(ns, NodesKubeadmConfigRole, KubeadmConfigMap))
	o.roleBinding(roleBinding(ns, NodesKubeadmConfigRole, NodesKubeadmConfigRole, group(NodeBootstrapTokenAuthGroup), group(NodesGroup)))
	kcm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: KubeletConfigMap, Namespace: ns},
		Data:       map[string]string{KubeletConfigKey: string(kb)},
	}
	if kubeadmDefaultKubelet(kc) {
		signed(kcm)
	}
	o.configMap(kcm)
	o.role(getConfigMapRole(ns, KubeletConfigRole, KubeletConfigMap))
	o.roleBinding(roleBinding(ns, KubeletConfigRole, KubeletConfigRole, group(NodesGroup), group(NodeBootstrapTokenAuthGroup)))
	return o, nil
}

// kubeadmDefaultKubelet reports whether kc is what kubeadm generates itself: none of the
// settings the inventory may choose (kubelet.allowCgroupV1 → failCgroupV1, a resolvConf) is
// set, nor kforge's hardening (protectKernelDefaults, a serving certificate of the cluster CA:
// docs/security.md), which kforge always sets, so that kforge's is never kubeadm's. kubeadm
// signs only the configurations it generated (a user-supplied KubeletConfiguration stays
// unsigned), and `kubeadm upgrade` may regenerate a signed one from its defaults — which would
// drop those choices.
func kubeadmDefaultKubelet(kc *kubeletv1beta1.KubeletConfiguration) bool {
	return kc.FailCgroupV1 == nil && kc.ResolverConfig == nil && !kc.ProtectKernelDefaults && kc.TLSCertFile == ""
}

// signed adds kubeadm's component-config hash annotation (componentconfigs.SignConfigMap):
// the sha256 of the data values in key order.
func signed(cm *corev1.ConfigMap) *corev1.ConfigMap {
	keys := make([]string, 0, len(cm.Data))
	for k := range cm.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		h.Write([]byte(cm.Data[k]))
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[ComponentConfigHashAnnotation] = fmt.Sprintf("sha256:%x", h.Sum(nil))
	return cm
}
