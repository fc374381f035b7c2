package kube

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/release"
)

// writes are the create/update/patch/delete actions a fake clientset recorded.
func writes(c *fake.Clientset) []string {
	var out []string
	for _, a := range c.Actions() {
		switch a.GetVerb() {
		case "create", "update", "patch", "delete":
			s := a.GetVerb() + " " + a.GetResource().Resource
			if n, ok := a.(interface{ GetName() string }); ok {
				s += " " + n.GetName()
			}
			if o, ok := a.(k8stesting.CreateAction); ok {
				if m, err := metaName(o.GetObject()); err == nil {
					s += " " + m
				}
			}
			out = append(out, s)
		}
	}
	return out
}

func metaName(o runtime.Object) (string, error) {
	m, ok := o.(metav1.Object)
	if !ok {
		return "", nil
	}
	return m.GetName(), nil
}

// twice runs f against c, then again, and checks that the second run wrote nothing and
// reported every object Unchanged. It returns the first run's changes.
func twice(t *testing.T, c *fake.Clientset, f func(kubernetes.Interface) ([]Change, error)) []Change {
	t.Helper()
	first, err := f(c)
	if err != nil {
		t.Fatalf("first run: %v", err)
	}
	c.ClearActions()
	second, err := f(c)
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	if w := writes(c); len(w) > 0 {
		t.Errorf("second run wrote %d time(s), want none: %v", len(w), w)
	}
	if Changed(second) {
		t.Errorf("second run reported changes: %v", second)
	}
	if len(second) != len(first) {
		t.Errorf("second run reported %d objects, first %d", len(second), len(first))
	}
	return first
}

// allCreated checks that a first run on an empty cluster created n objects.
func allCreated(t *testing.T, cs []Change, n int) {
	t.Helper()
	if len(cs) != n {
		t.Errorf("first run touched %d objects, want %d: %v", len(cs), n, cs)
	}
	for _, c := range cs {
		if c.Action != Created {
			t.Errorf("first run on an empty cluster: %s", c)
		}
	}
}

func actions(cs []Change) map[string]Action {
	m := map[string]Action{}
	for _, c := range cs {
		k := c.Kind + " " + c.Name
		if c.Namespace != "" {
			k = c.Kind + " " + c.Namespace + "/" + c.Name
		}
		m[k] = c.Action
	}
	return m
}

func testCluster(t *testing.T) *inventory.Cluster {
	t.Helper()
	c, err := (&inventory.Cluster{
		APIVersion: inventory.APIVersion, Kind: inventory.Kind, Name: "lab",
		Networking: inventory.Networking{PodSubnet: "10.244.0.0/16", ServiceSubnet: "10.96.0.0/12", DNSDomain: "cluster.local"},
		PKI:        inventory.PKI{KeyAlgorithm: "ecdsa-p256", CertValidity: inventory.DefaultCertValidity, CAValidity: inventory.DefaultCAValidity},
		Kubelet:    inventory.Kubelet{CgroupDriver: "systemd", AllowCgroupV1: true},
		Masters: []inventory.Host{{Name: "m1", Address: "198.51.100.11",
			Labels: map[string]string{"zone": "a"}}},
		Workers: []inventory.Host{{Name: "w1", Address: "198.51.100.12",
			Labels: map[string]string{"gpu": "yes"},
			Taints: []inventory.Taint{{Key: "dedicated", Value: "ml", Effect: "NoSchedule"}}}},
	}).AtVersion("v1.36.3")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClusterConfigurationIsKubeadmV1beta4(t *testing.T) {
	c := testCluster(t)
	c.ControlPlaneEndpoint = "lb.example:6443"
	c.PKI.APIServerCertSANs = []string{"lb.example"}
	cc, err := ClusterConfigurationFor(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := yaml.Marshal(cc)
	if err != nil {
		t.Fatal(err)
	}
	// The shape `kubeadm config print init-defaults` (v1.36.3) prints, with this cluster's
	// values; kubeadm stores the same marshalling in kubeadm-config.
	want := `apiServer:
  certSANs:
  - lb.example
apiVersion: kubeadm.k8s.io/v1beta4
caCertificateValidityPeriod: 87600h0m0s
certificateValidityPeriod: 8760h0m0s
certificatesDir: /etc/kubernetes/pki
clusterName: lab
controlPlaneEndpoint: lb.example:6443
controllerManager: {}
dns: {}
encryptionAlgorithm: ECDSA-P256
etcd:
  local:
    dataDir: /var/lib/etcd
imageRepository: registry.k8s.io
kind: ClusterConfiguration
kubernetesVersion: v1.36.3
networking:
  dnsDomain: cluster.local
  podSubnet: 10.244.0.0/16
  serviceSubnet: 10.96.0.0/12
proxy: {}
scheduler: {}
`
	if string(got) != want {
		t.Errorf("ClusterConfiguration:\n%s\nwant:\n%s", got, want)
	}

	// An external etcd, as kubeadm's external etcd guide writes it.
	c.Etcd = []inventory.Host{{Name: "e1", Address: "198.51.100.31"}, {Name: "e2", Address: "198.51.100.32"}, {Name: "e3", Address: "198.51.100.33"}}
	if cc, err = ClusterConfigurationFor(c); err != nil {
		t.Fatal(err)
	}
	if got, err = yaml.Marshal(cc.Etcd); err != nil {
		t.Fatal(err)
	}
	want = `external:
  caFile: /etc/kubernetes/pki/etcd/ca.crt
  certFile: /etc/kubernetes/pki/apiserver-etcd-client.crt
  endpoints:
  - https://198.51.100.31:2379
  - https://198.51.100.32:2379
  - https://198.51.100.33:2379
  keyFile: /etc/kubernetes/pki/apiserver-etcd-client.key
`
	if string(got) != want {
		t.Errorf("ClusterConfiguration.etcd of an external etcd:\n%s\nwant:\n%s", got, want)
	}
}

func kubeletConfig(t *testing.T) *kubeletv1beta1.KubeletConfiguration {
	t.Helper()
	kc, err := KubeletConfigurationFor(testCluster(t))
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

func TestUploadConfigTwice(t *testing.T) {
	cc, err := ClusterConfigurationFor(testCluster(t))
	if err != nil {
		t.Fatal(err)
	}
	kc := kubeletConfig(t)
	if kc.ContainerRuntimeEndpoint == "" {
		t.Fatal("the templates kubelet config has no containerRuntimeEndpoint; this test checks it is dropped")
	}
	c := fake.NewClientset()
	first := twice(t, c, func(c kubernetes.Interface) ([]Change, error) {
		return UploadConfig(context.Background(), c, UploadConfigInput{Cluster: cc, Kubelet: kc})
	})
	want := map[string]Action{
		"ConfigMap kube-system/kubeadm-config":                 Created,
		"Role kube-system/kubeadm:nodes-kubeadm-config":        Created,
		"RoleBinding kube-system/kubeadm:nodes-kubeadm-config": Created,
		"ConfigMap kube-system/kubelet-config":                 Created,
		"Role kube-system/kubeadm:kubelet-config":              Created,
		"RoleBinding kube-system/kubeadm:kubelet-config":       Created,
	}
	if got := actions(first); !equalMaps(got, want) {
		t.Errorf("first run: %v, want %v", got, want)
	}
	ctx := context.Background()
	cm, err := c.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubelet-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(cm.Data["kubelet"], "containerRuntimeEndpoint: unix") {
		t.Errorf("kubelet-config carries the node-local containerRuntimeEndpoint:\n%s", cm.Data["kubelet"])
	}
	if !strings.Contains(cm.Data["kubelet"], "failCgroupV1: false") || !strings.Contains(cm.Data["kubelet"], "clusterDNS:\n- 10.96.0.10") {
		t.Errorf("kubelet-config lacks the cluster's kubelet settings:\n%s", cm.Data["kubelet"])
	}
	// failCgroupV1 is the inventory's choice: kubeadm would leave such a configuration
	// unsigned (user supplied), so kubeadm upgrade keeps it.
	if h, ok := cm.Annotations[ComponentConfigHashAnnotation]; ok {
		t.Errorf("kubelet-config with failCgroupV1 signed %q, want unsigned", h)
	}
	// Nor does kforge's own hardening leave it kubeadm's (docs/security.md); without any of
	// them it is, and it is signed as kubeadm signs its own.
	kc2 := kc.DeepCopy()
	kc2.FailCgroupV1 = nil
	if o, err := uploadConfigObjects(UploadConfigInput{Cluster: cc, Kubelet: kc2}); err != nil {
		t.Fatal(err)
	} else {
		fc := fake.NewClientset()
		if _, err := o.apply(ctx, fc); err != nil {
			t.Fatal(err)
		}
		if cm, _ := fc.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubelet-config", metav1.GetOptions{}); cm.Annotations[ComponentConfigHashAnnotation] != "" {
			t.Errorf("hardened kubelet-config signed %q, want unsigned", cm.Annotations[ComponentConfigHashAnnotation])
		}
	}
	kc2.ProtectKernelDefaults, kc2.TLSCertFile, kc2.TLSPrivateKeyFile = false, "", ""
	o, err := uploadConfigObjects(UploadConfigInput{Cluster: cc, Kubelet: kc2})
	if err != nil {
		t.Fatal(err)
	}
	fc := fake.NewClientset()
	if _, err := o.apply(ctx, fc); err != nil {
		t.Fatal(err)
	}
	cm2, _ := fc.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubelet-config", metav1.GetOptions{})
	if h := cm2.Annotations[ComponentConfigHashAnnotation]; !strings.HasPrefix(h, "sha256:") {
		t.Errorf("default kubelet-config annotation %s = %q, want kubeadm's sha256 signature", ComponentConfigHashAnnotation, h)
	}
	rb, err := c.RbacV1().RoleBindings("kube-system").Get(ctx, "kubeadm:nodes-kubeadm-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rb.Subjects) != 2 || rb.Subjects[0].Name != NodeBootstrapTokenAuthGroup || rb.Subjects[1].Name != NodesGroup || rb.RoleRef.Kind != "Role" {
		t.Errorf("kubeadm:nodes-kubeadm-config binding = %+v", rb)
	}

	// A changed inventory updates the ConfigMap once, then nothing.
	cc.Networking.DNSDomain = "corp.internal"
	c.ClearActions()
	ch, err := UploadConfig(ctx, c, UploadConfigInput{Cluster: cc, Kubelet: kc})
	if err != nil {
		t.Fatal(err)
	}
	if a := actions(ch)["ConfigMap kube-system/kubeadm-config"]; a != Updated {
		t.Errorf("kubeadm-config after a change: %s, want updated", a)
	}
	if Changed(ch[1:]) {
		t.Errorf("only kubeadm-config should change: %v", ch)
	}
}

func equalMaps[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

func TestEnsureAdoptsAndKeepsOthersMetadata(t *testing.T) {
	// A kubeadm-made binding with an extra subject someone added by hand, and a label.
	existing := clusterRoleBinding(GetNodesRole, "wrong-role", group("someone"))
	existing.Labels = map[string]string{"owner": "ops"}
	existing.ResourceVersion = "7"
	c := fake.NewClientset(existing)
	var o objects
	o.clusterRoleBinding(clusterRoleBinding(GetNodesRole, GetNodesRole, group(NodeBootstrapTokenAuthGroup)))
	ch := twice(t, c, func(c kubernetes.Interface) ([]Change, error) { return o.apply(context.Background(), c) })
	if ch[0].Action != Updated {
		t.Fatalf("first run: %v, want updated", ch)
	}
	got, err := c.RbacV1().ClusterRoleBindings().Get(context.Background(), GetNodesRole, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.RoleRef.Name != GetNodesRole || len(got.Subjects) != 1 || got.Subjects[0].Name != NodeBootstrapTokenAuthGroup {
		t.Errorf("binding not updated to kubeadm's: %+v", got)
	}
	if got.Labels["owner"] != "ops" {
		t.Errorf("someone's label lost: %v", got.Labels)
	}
}

func node(name string, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, ResourceVersion: "1"}, Spec: corev1.NodeSpec{Taints: taints}}
}

func TestMarkNodesMergesAndKeepsOthers(t *testing.T) {
	c := fake.NewClientset(
		node("m1", map[string]string{"kubernetes.io/hostname": "m1", "user": "keep"}),
		node("w1", map[string]string{"zone": "b"},
			corev1.Taint{Key: "dedicated", Value: "old", Effect: corev1.TaintEffectNoSchedule},
			corev1.Taint{Key: "someone/else", Effect: corev1.TaintEffectNoExecute}),
	)
	marks := NodeMarksFor(testCluster(t))
	first := twice(t, c, func(c kubernetes.Interface) ([]Change, error) {
		return MarkNodes(context.Background(), c, marks, 10*time.Millisecond)
	})
	if got := actions(first); got["Node m1"] != Updated || got["Node w1"] != Updated {
		t.Errorf("first run: %v", first)
	}
	ctx := context.Background()
	m1, _ := c.CoreV1().Nodes().Get(ctx, "m1", metav1.GetOptions{})
	for k, v := range map[string]string{LabelControlPlane: "", LabelExcludeFromExternalLB: "", "zone": "a", "user": "keep", "kubernetes.io/hostname": "m1"} {
		if got, ok := m1.Labels[k]; !ok || got != v {
			t.Errorf("m1 label %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
	if len(m1.Spec.Taints) != 1 || m1.Spec.Taints[0] != (corev1.Taint{Key: LabelControlPlane, Effect: corev1.TaintEffectNoSchedule}) {
		t.Errorf("m1 taints = %v", m1.Spec.Taints)
	}
	w1, _ := c.CoreV1().Nodes().Get(ctx, "w1", metav1.GetOptions{})
	if w1.Labels["gpu"] != "yes" || w1.Labels["zone"] != "b" {
		t.Errorf("w1 labels = %v", w1.Labels)
	}
	if _, ok := w1.Labels[LabelControlPlane]; ok {
		t.Error("worker got the control-plane label")
	}
	want := []corev1.Taint{{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoSchedule}, {Key: "someone/else", Effect: corev1.TaintEffectNoExecute}}
	if len(w1.Spec.Taints) != 2 || w1.Spec.Taints[0] != want[0] || w1.Spec.Taints[1] != want[1] {
		t.Errorf("w1 taints = %v, want %v", w1.Spec.Taints, want)
	}
}

func TestMarkNodesNamesNodesThatNeverRegister(t *testing.T) {
	c := fake.NewClientset(node("m1", nil))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := MarkNodes(ctx, c, NodeMarksFor(testCluster(t)), 10*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "w1") || strings.Contains(err.Error(), "m1") {
		t.Fatalf("err = %v, want one naming w1 only", err)
	}
}

func TestMasterTaintEffectFromInventoryWins(t *testing.T) {
	c := testCluster(t)
	c.Masters[0].Taints = []inventory.Taint{{Key: LabelControlPlane, Effect: "PreferNoSchedule"}}
	m := NodeMarksFor(c)[0]
	if len(m.Taints) != 1 || m.Taints[0].Effect != corev1.TaintEffectPreferNoSchedule {
		t.Errorf("master taints = %v", m.Taints)
	}
}

var (
	testCA    = []byte("-----BEGIN CERTIFICATE-----\nMIIBdummy\n-----END CERTIFICATE-----\n")
	testToken = BootstrapToken{ID: "abcdef", Secret: "0123456789abcdef", TTL: 24 * time.Hour}
	testNow   = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
)

func bootstrapInput() BootstrapInput {
	return BootstrapInput{Token: testToken, Now: testNow, Server: "https://198.51.100.11:6443", CACert: testCA}
}

func TestBootstrapTwice(t *testing.T) {
	// cluster-info exists with the bootstrap signer's signature, which must survive.
	c := fake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-info", Namespace: "kube-public"},
		Data:       map[string]string{"jws-kubeconfig-abcdef": "sig"},
	})
	first := twice(t, c, func(c kubernetes.Interface) ([]Change, error) {
		return Bootstrap(context.Background(), c, bootstrapInput())
	})
	want := map[string]Action{
		"Secret kube-system/bootstrap-token-abcdef":                        Created,
		"ClusterRole kubeadm:get-nodes":                                    Created,
		"ClusterRoleBinding kubeadm:get-nodes":                             Created,
		"ClusterRoleBinding kubeadm:kubelet-bootstrap":                     Created,
		"ClusterRoleBinding kubeadm:node-autoapprove-bootstrap":            Created,
		"ClusterRoleBinding kubeadm:node-autoapprove-certificate-rotation": Created,
		"ClusterRoleBinding kubeadm:apiserver-kubelet-client":              Created,
		"ConfigMap kube-public/cluster-info":                               Updated,
		"Role kube-public/kubeadm:bootstrap-signer-clusterinfo":            Created,
		"RoleBinding kube-public/kubeadm:bootstrap-signer-clusterinfo":     Created,
	}
	if got := actions(first); !equalMaps(got, want) {
		t.Errorf("first run: %v\nwant %v", got, want)
	}
	ctx := context.Background()
	s, err := c.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-abcdef", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantData := map[string]string{
		"token-id": "abcdef", "token-secret": "0123456789abcdef", "expiration": "2026-11-22T12:00:00Z",
		"usage-bootstrap-signing": "true", "usage-bootstrap-authentication": "true",
		"auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
	}
	if s.Type != "bootstrap.kubernetes.io/token" || len(s.Data) != len(wantData) {
		t.Errorf("token secret type %s data %v", s.Type, s.Data)
	}
	for k, v := range wantData {
		if string(s.Data[k]) != v {
			t.Errorf("token secret %s = %q, want %q", k, s.Data[k], v)
		}
	}
	ci, _ := c.CoreV1().ConfigMaps("kube-public").Get(ctx, "cluster-info", metav1.GetOptions{})
	if ci.Data["jws-kubeconfig-abcdef"] != "sig" {
		t.Error("the bootstrap signer's signature was dropped from cluster-info")
	}
	kc, err := clientcmd.Load([]byte(ci.Data["kubeconfig"]))
	if err != nil {
		t.Fatal(err)
	}
	if cl := kc.Clusters[""]; cl == nil || cl.Server != "https://198.51.100.11:6443" || string(cl.CertificateAuthorityData) != string(testCA) || len(kc.AuthInfos) != 0 {
		t.Errorf("cluster-info kubeconfig = %s", ci.Data["kubeconfig"])
	}
	rb, _ := c.RbacV1().RoleBindings("kube-public").Get(ctx, ClusterInfoRole, metav1.GetOptions{})
	if len(rb.Subjects) != 1 || rb.Subjects[0] != (rbacv1.Subject{Kind: "User", Name: "system:anonymous"}) {
		t.Errorf("cluster-info binding subjects = %v", rb.Subjects)
	}
	crb, _ := c.RbacV1().ClusterRoleBindings().Get(ctx, NodeAutoApproveRotation, metav1.GetOptions{})
	if crb.RoleRef.Name != "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient" || crb.Subjects[0].Name != "system:nodes" {
		t.Errorf("rotation binding = %+v", crb)
	}
}

func TestBootstrapTokenRenewal(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	if _, err := Bootstrap(ctx, c, bootstrapInput()); err != nil {
		t.Fatal(err)
	}
	// Eleven hours later more than half the TTL is left: the token is left alone.
	in := bootstrapInput()
	in.Now = testNow.Add(11 * time.Hour)
	ch, err := Bootstrap(ctx, c, in)
	if err != nil {
		t.Fatal(err)
	}
	if a := ch[0].Action; a != Unchanged {
		t.Errorf("token with 13h of 24h left: %s, want unchanged", a)
	}
	// Thirteen hours later it is renewed to Now+TTL.
	in.Now = testNow.Add(13 * time.Hour)
	ch, err = Bootstrap(ctx, c, in)
	if err != nil {
		t.Fatal(err)
	}
	if a := ch[0].Action; a != Updated {
		t.Errorf("token with 11h of 24h left: %s, want updated", a)
	}
	s, _ := c.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-abcdef", metav1.GetOptions{})
	if got := string(s.Data["expiration"]); got != "2026-11-23T01:00:00Z" {
		t.Errorf("renewed expiration %s", got)
	}
	// A token made never-expiring loses its expiration.
	in.Token.TTL = 0
	if _, err := Bootstrap(ctx, c, in); err != nil {
		t.Fatal(err)
	}
	s, _ = c.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-abcdef", metav1.GetOptions{})
	if _, ok := s.Data["expiration"]; ok {
		t.Error("expiration kept on a token without TTL")
	}
}

func TestBadTokenErrorHidesTheSecret(t *testing.T) {
	in := bootstrapInput()
	in.Token.Secret = "TOPSECRETVALUE!!"
	_, err := Bootstrap(context.Background(), fake.NewClientset(), in)
	if err == nil {
		t.Fatal("invalid token accepted")
	}
	if strings.Contains(err.Error(), "TOPSECRET") {
		t.Errorf("error shows the token secret: %v", err)
	}
	if s := in.Token.String(); strings.Contains(s, "TOPSECRET") {
		t.Errorf("BootstrapToken.String shows the secret: %s", s)
	}
}

// testImages are the images of the default release, as hosts get them (release's tests pin
// the exact names).
func testImages() release.Images {
	r, err := release.For(release.Default())
	if err != nil {
		panic(err)
	}
	return r.Images("")
}

func TestCoreDNSTwiceKeepsScaledReplicas(t *testing.T) {
	in := CoreDNSInput{Image: testImages().CoreDNS, DNSDomain: "cluster.local", ServiceSubnet: "10.96.0.0/12"}
	c := fake.NewClientset()
	first := twice(t, c, func(c kubernetes.Interface) ([]Change, error) { return CoreDNS(context.Background(), c, in) })
	allCreated(t, first, 6)
	ctx := context.Background()
	svc, err := c.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != "10.96.0.10" || len(svc.Spec.Ports) != 3 {
		t.Errorf("kube-dns service %+v", svc.Spec)
	}
	cm, _ := c.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if !strings.Contains(cm.Data["Corefile"], "kubernetes cluster.local in-addr.arpa ip6.arpa {") ||
		!strings.Contains(cm.Data["Corefile"], "disable denial cluster.local") {
		t.Errorf("Corefile:\n%s", cm.Data["Corefile"])
	}
	// Someone scales CoreDNS to 3: kforge keeps it.
	d, _ := c.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	d.Spec.Replicas = new(int32(3))
	if _, err := c.AppsV1().Deployments("kube-system").Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	twice(t, c, func(c kubernetes.Interface) ([]Change, error) { return CoreDNS(ctx, c, in) })
	d, _ = c.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if *d.Spec.Replicas != 3 {
		t.Errorf("replicas %d after apply, want the 3 someone set", *d.Spec.Replicas)
	}
	// A Corefile someone edited is kept.
	cm.Data["Corefile"] += "example.org:53 {\n    forward . 198.51.100.53\n}\n"
	if _, err := c.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	twice(t, c, func(c kubernetes.Interface) ([]Change, error) { return CoreDNS(ctx, c, in) })
	cm2, _ := c.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if !strings.Contains(cm2.Data["Corefile"], "example.org:53") {
		t.Error("an edited Corefile was replaced")
	}
	// A new image is rolled out.
	in.Image = "registry.k8s.io/coredns/coredns:v9"
	ch, err := CoreDNS(ctx, c, in)
	if err != nil {
		t.Fatal(err)
	}
	if actions(ch)["Deployment kube-system/coredns"] != Updated {
		t.Errorf("image change: %v", ch)
	}
	// The nodes' resolv.conf changed: CoreDNS's pods are replaced (the template changes), once.
	in.Upstream = "0123abcd"
	if ch, err = CoreDNS(ctx, c, in); err != nil || actions(ch)["Deployment kube-system/coredns"] != Updated {
		t.Errorf("upstream change: %v, %v", ch, err)
	}
	d, _ = c.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if d.Spec.Template.Annotations[UpstreamAnnotation] != "0123abcd" {
		t.Errorf("pod template annotations %v", d.Spec.Template.Annotations)
	}
	twice(t, c, func(c kubernetes.Interface) ([]Change, error) { return CoreDNS(ctx, c, in) })
}

func TestKubeProxyTwice(t *testing.T) {
	in := KubeProxyInput{Image: testImages().KubeProxy, Server: "https://198.51.100.11:6443", PodSubnet: "10.244.0.0/16", ConntrackMaxPerCore: new(int32(0))}
	c := fake.NewClientset()
	first := twice(t, c, func(c kubernetes.Interface) ([]Change, error) { return KubeProxy(context.Background(), c, in) })
	allCreated(t, first, 6)
	ctx := context.Background()
	cm, _ := c.CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	conf := cm.Data["config.conf"]
	for _, want := range []string{"mode: iptables", "maxPerCore: 0", "clusterCIDR: 10.244.0.0/16", "kubeconfig: /var/lib/kube-proxy/kubeconfig.conf", "bindAddress: 0.0.0.0", "kind: KubeProxyConfiguration"} {
		if !strings.Contains(conf, want) {
			t.Errorf("config.conf lacks %q:\n%s", want, conf)
		}
	}
	if !strings.Contains(cm.Data["kubeconfig.conf"], "server: https://198.51.100.11:6443") {
		t.Errorf("kubeconfig.conf:\n%s", cm.Data["kubeconfig.conf"])
	}
	ds, _ := c.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if ds.Spec.Template.Spec.Containers[0].Image != in.Image || !ds.Spec.Template.Spec.HostNetwork {
		t.Errorf("kube-proxy daemonset %+v", ds.Spec.Template.Spec)
	}
	// Unset maxPerCore is kube-proxy's default (null), as kubeadm writes it.
	in.ConntrackMaxPerCore = nil
	b, _ := yaml.Marshal(KubeProxyConfiguration(in))
	if !strings.Contains(string(b), "maxPerCore: null") {
		t.Errorf("default config:\n%s", b)
	}
}

func TestFlannelTwice(t *testing.T) {
	in := FlannelInput{Image: testImages().Flannel, PodSubnets: []string{"10.244.0.0/16"}, Endpoint: "198.51.100.11:6443"}
	c := fake.NewClientset()
	first := twice(t, c, func(c kubernetes.Interface) ([]Change, error) { return Flannel(context.Background(), c, in) })
	allCreated(t, first, 6)
	ctx := context.Background()
	ns, _ := c.CoreV1().Namespaces().Get(ctx, "kube-flannel", metav1.GetOptions{})
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace labels %v", ns.Labels)
	}
	cm, _ := c.CoreV1().ConfigMaps("kube-flannel").Get(ctx, "kube-flannel-cfg", metav1.GetOptions{})
	if !strings.Contains(cm.Data["net-conf.json"], `"Network": "10.244.0.0/16"`) || !strings.Contains(cm.Data["net-conf.json"], `"Type": "vxlan"`) {
		t.Errorf("net-conf.json %s", cm.Data["net-conf.json"])
	}
	ds, _ := c.AppsV1().DaemonSets("kube-flannel").Get(ctx, "kube-flannel-ds", metav1.GetOptions{})
	ctr := ds.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range ctr.Env {
		env[e.Name] = e.Value
		if e.ValueFrom != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["KUBERNETES_SERVICE_HOST"] != "198.51.100.11" || env["KUBERNETES_SERVICE_PORT"] != "6443" || env["NODE_IP"] != "status.hostIP" {
		t.Errorf("flannel env %v", env)
	}
	if strings.Join(ctr.Args, " ") != "--ip-masq --kube-subnet-mgr --iface=$(NODE_IP)" || len(ds.Spec.Template.Spec.InitContainers) != 0 {
		t.Errorf("flannel args %v, init containers %d", ctr.Args, len(ds.Spec.Template.Spec.InitContainers))
	}
	if _, err := flannelObjects(FlannelInput{Image: "x", PodSubnets: []string{"10.244.0.0/16"}, Endpoint: "no-port"}); err == nil {
		t.Error("endpoint without a port accepted")
	}
	if strings.Contains(cm.Data["net-conf.json"], "IPv6") {
		t.Errorf("single-stack net-conf.json names IPv6: %s", cm.Data["net-conf.json"])
	}
}

// TestFlannelDualStack: a dual-stack cluster's flannel routes the IPv6 pod subnet too, and the
// net-conf.json it reads is valid JSON with flannel's own field names.
func TestFlannelDualStack(t *testing.T) {
	in := FlannelInput{Image: testImages().Flannel, PodSubnets: []string{"10.244.0.0/16", "fd00:10:244::/56"}, Endpoint: "198.51.100.11:6443", NFTables: true}
	c := fake.NewClientset()
	if _, err := Flannel(context.Background(), c, in); err != nil {
		t.Fatal(err)
	}
	cm, _ := c.CoreV1().ConfigMaps("kube-flannel").Get(context.Background(), "kube-flannel-cfg", metav1.GetOptions{})
	var conf struct {
		Network, IPv6Network       string
		EnableIPv6, EnableNFTables bool
	}
	if err := json.Unmarshal([]byte(cm.Data["net-conf.json"]), &conf); err != nil {
		t.Fatalf("net-conf.json: %v\n%s", err, cm.Data["net-conf.json"])
	}
	if conf.Network != "10.244.0.0/16" || conf.IPv6Network != "fd00:10:244::/56" || !conf.EnableIPv6 || !conf.EnableNFTables {
		t.Errorf("net-conf.json %+v", conf)
	}
	for _, bad := range [][]string{{"fd00:10:244::/56", "10.244.0.0/16"}, {"10.244.0.0/16", "fd00::/56", "10.245.0.0/16"}, nil} {
		if _, err := flannelObjects(FlannelInput{Image: "x", PodSubnets: bad, Endpoint: "198.51.100.11:6443"}); err == nil {
			t.Errorf("pod subnets %v accepted", bad)
		}
	}
}

func TestEnsureClusterAdminsTwice(t *testing.T) {
	c := fake.NewClientset()
	twice(t, c, func(c kubernetes.Interface) ([]Change, error) { return EnsureClusterAdmins(context.Background(), c) })
	crb, err := c.RbacV1().ClusterRoleBindings().Get(context.Background(), "kubeadm:cluster-admins", metav1.GetOptions{})
	if err != nil || crb.RoleRef.Name != "cluster-admin" || crb.Subjects[0].Name != "kubeadm:cluster-admins" {
		t.Errorf("binding %+v, %v", crb, err)
	}
}

func readyNode(name string, ready bool) *corev1.Node {
	st := corev1.ConditionTrue
	reason := "KubeletReady"
	if !ready {
		st, reason = corev1.ConditionFalse, "KubeletNotReady"
	}
	n := node(name, nil)
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st, Reason: reason, Message: "container runtime network not ready: NetworkReady=false"}}
	return n
}

func TestWaitForReadyNamesWhatIsNotReady(t *testing.T) {
	crashing := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns-1", Namespace: "kube-system"},
		Spec:       corev1.PodSpec{NodeName: "w1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "coredns", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 10s"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}},
		}}},
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"},
		Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, NumberReady: 1, UpdatedNumberScheduled: 2}}
	evicted := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns-old", Namespace: "kube-system", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "coredns-1", UID: "u", Controller: new(true)}}},
		Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"},
	}
	c := fake.NewClientset(readyNode("m1", true), readyNode("w1", false), crashing, ds, evicted)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var seen int
	err := WaitForReady(ctx, c, WaitReadyInput{Nodes: []string{"m1", "w1", "w2"}, Interval: 10 * time.Millisecond, Progress: func(ReadyStatus) { seen++ }})
	var nre *NotReadyError
	var ne *NodesError
	if !errors.As(err, &nre) || !errors.As(err, &ne) || !slices.Equal(ne.Nodes, []string{"w1", "w2"}) {
		t.Fatalf("err = %v, want a *NotReadyError within a *NodesError naming w1 and w2", err)
	}
	d := strings.Join(nre.Details(), "\n")
	for _, want := range []string{
		"node w1: Ready=False KubeletNotReady: container runtime network not ready",
		"node w2: not registered",
		"pod kube-system/coredns-1 on w1: Running, container coredns waiting: CrashLoopBackOff (back-off 10s), last exit 1 Error",
		"DaemonSet kube-system/kube-proxy: 1 of 2 pods ready",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("details lack %q:\n%s", want, d)
		}
	}
	if strings.Contains(d, "node m1") || strings.Contains(d, "coredns-old") {
		t.Errorf("ready node m1 reported:\n%s", d)
	}
	if seen == 0 {
		t.Error("no progress reported")
	}

	// Once everything is ready the wait returns at once.
	ok2 := readyNode("w1", true)
	c2 := fake.NewClientset(readyNode("m1", true), ok2, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns-1", Namespace: "kube-system"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	})
	if err := WaitForReady(context.Background(), c2, WaitReadyInput{Nodes: []string{"m1", "w1"}}); err != nil {
		t.Errorf("ready cluster: %v", err)
	}
}

// TestReadyWaitsForARollout: a Deployment whose pods are all ready is not ready while its
// controller has not seen its new spec, nor while old pods are still there; once rolled out, it
// is.
func TestReadyWaitsForARollout(t *testing.T) {
	two := int32(2)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system", Generation: 3},
		Spec:   appsv1.DeploymentSpec{Replicas: &two},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2}}
	for _, tc := range []struct {
		name   string
		status appsv1.DeploymentStatus
		want   string
	}{
		{"new spec not seen", appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2}, "Deployment kube-system/coredns: rolling out, 2 of 2 pods updated, 2 in all"},
		{"an old pod left", appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 3, UpdatedReplicas: 2, ReadyReplicas: 3}, "Deployment kube-system/coredns: rolling out, 2 of 2 pods updated, 3 in all"},
		{"rolled out", appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2}, ""},
	} {
		d := dep.DeepCopy()
		d.Status = tc.status
		st, err := CheckReady(context.Background(), fake.NewClientset(readyNode("m1", true), d), []string{"m1"}, []string{"kube-system"})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(st.Workloads, "; "); got != tc.want {
			t.Errorf("%s: workloads %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestReadyIgnoresNodesLeavingTheCluster: a dead master about to be pruned (a node not in the
// inventory) keeps its pods, not ready, and its DaemonSets' and Deployments' counts short:
// none of that is waited on. The same pods on an inventory node are.
func TestReadyIgnoresNodesLeavingTheCluster(t *testing.T) {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-proxy"}}
	pod := func(name, node string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", Labels: labels},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}} // not ready
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"}, Spec: appsv1.DaemonSetSpec{Selector: sel},
		Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, NumberReady: 1, UpdatedNumberScheduled: 2}}
	dns := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system"},
		Spec:   appsv1.DeploymentSpec{Replicas: new(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}}},
		Status: appsv1.DeploymentStatus{ReadyReplicas: 1, UpdatedReplicas: 2}}
	objs := []runtime.Object{readyNode("m1", true), readyNode("m3", false), ds, dns,
		pod("kube-proxy-m3", "m3", map[string]string{"k8s-app": "kube-proxy"}), pod("coredns-m3", "m3", map[string]string{"k8s-app": "kube-dns"})}
	st, err := CheckReady(context.Background(), fake.NewClientset(objs...), []string{"m1"}, []string{"kube-system"})
	if err != nil || !st.Ready() {
		t.Errorf("m3 outside the inventory: %+v, %v; want ready", st, err)
	}
	st, err = CheckReady(context.Background(), fake.NewClientset(objs...), []string{"m1", "m3"}, []string{"kube-system"})
	if err != nil || len(st.Pods) != 2 || len(st.Workloads) != 2 || len(st.Nodes) != 1 {
		t.Errorf("m3 in the inventory: %+v, %v; want its node, its two pods and both workloads", st, err)
	}
}

func TestDecodeManifest(t *testing.T) {
	objs, err := DecodeManifest(Manifest{Path: "a.yaml", Data: []byte(`
---
apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
# only a comment
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: one, namespace: demo}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: two}
`)})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range objs {
		names = append(names, o.GetKind()+"/"+o.GetName())
	}
	if strings.Join(names, " ") != "Namespace/demo ConfigMap/one ConfigMap/two" {
		t.Errorf("objects %v", names)
	}
	_, err = DecodeManifest(Manifest{Path: "bad.yaml", Data: []byte("apiVersion: v1\nkind: ConfigMap\n---\nkind: [\n")})
	if err == nil || !strings.Contains(err.Error(), "bad.yaml: document 1") {
		t.Errorf("err = %v, want one naming bad.yaml document 1", err)
	}
}

func TestSummary(t *testing.T) {
	cs := []Change{{Action: Created}, {Action: Unchanged}, {Action: Created}, {Action: Updated}}
	if got := Summary(cs); got != "2 created, 1 updated, 1 unchanged" {
		t.Errorf("Summary = %q", got)
	}
	if got := Summary(nil); got != "nothing" {
		t.Errorf("Summary(nil) = %q", got)
	}
}

// TestBootstrapAllowsTheVIPItsLease: with a VIP, the scheduler's identity (kforge-vip's) may
// create Leases and get, update and patch the one named kforge-vip; without, no such grant.
func TestBootstrapAllowsTheVIPItsLease(t *testing.T) {
	c := fake.NewClientset()
	in := bootstrapInput()
	in.VIPLease = "kforge-vip"
	if _, err := Bootstrap(context.Background(), c, in); err != nil {
		t.Fatal(err)
	}
	r, err := c.RbacV1().Roles("kube-system").Get(context.Background(), VIPRole, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rules) != 2 || !slices.Equal(r.Rules[0].Verbs, []string{"create"}) || len(r.Rules[0].ResourceNames) != 0 ||
		!slices.Equal(r.Rules[1].Verbs, []string{"get", "update", "patch"}) || !slices.Equal(r.Rules[1].ResourceNames, []string{"kforge-vip"}) ||
		!slices.Equal(r.Rules[1].Resources, []string{"leases"}) || !slices.Equal(r.Rules[1].APIGroups, []string{"coordination.k8s.io"}) {
		t.Errorf("role %s: %+v", VIPRole, r.Rules)
	}
	b, err := c.RbacV1().RoleBindings("kube-system").Get(context.Background(), VIPRole, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Subjects) != 1 || b.Subjects[0].Kind != "User" || b.Subjects[0].Name != "system:kube-scheduler" || b.RoleRef.Name != VIPRole {
		t.Errorf("binding %s: %+v → %+v", VIPRole, b.Subjects, b.RoleRef)
	}

	c = fake.NewClientset()
	if _, err := Bootstrap(context.Background(), c, bootstrapInput()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().Roles("kube-system").Get(context.Background(), VIPRole, metav1.GetOptions{}); err == nil {
		t.Errorf("role %s without a VIP", VIPRole)
	}
}

// TestWaitForReadySettles: a pod that is ready for a moment between its restarts (CoreDNS
// forwarding to itself) does not end the wait: every pod must stay ready for Settle, and when
// it does not, the error names the pod and quotes the end of its last run's log. A pod ready
// since long before the wait ends it at once.
func TestWaitForReadySettles(t *testing.T) {
	now := time.Now()
	pod := func(restarts int32, readySince time.Time) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "crashy-dns-1", Namespace: "kube-system", UID: "u1"},
			Spec:       corev1.PodSpec{NodeName: "m1", Containers: []corev1.Container{{Name: "coredns"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(readySince)}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "coredns", Ready: true, RestartCount: restarts, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
		}
		if restarts > 0 {
			p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}
		}
		return p
	}
	// Ready for an hour: no wait.
	c := fake.NewClientset(readyNode("m1", true), pod(0, now.Add(-time.Hour)))
	start := time.Now()
	if err := WaitForReady(context.Background(), c, WaitReadyInput{Nodes: []string{"m1"}, Interval: 10 * time.Millisecond, Settle: time.Minute}); err != nil || time.Since(start) > time.Second {
		t.Errorf("a pod ready for an hour: %v after %s; want nil at once", err, time.Since(start))
	}

	// Ready a moment ago: the wait ends once it has stayed ready for Settle.
	c = fake.NewClientset(readyNode("m1", true), pod(0, time.Now()))
	start = time.Now()
	if err := WaitForReady(context.Background(), c, WaitReadyInput{Nodes: []string{"m1"}, Interval: 10 * time.Millisecond, Settle: 300 * time.Millisecond}); err != nil || time.Since(start) < 250*time.Millisecond {
		t.Errorf("a pod ready a moment ago: %v after %s; want nil after the settle time", err, time.Since(start))
	}

	// Ready again after each restart, never for long: the wait fails naming it, with its log.
	c = fake.NewClientset(readyNode("m1", true), pod(3, time.Now()))
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	stop := make(chan struct{})
	go func() { // the kubelet restarting it every 100 ms
		for r := int32(4); ; r++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			_, _ = c.CoreV1().Pods("kube-system").UpdateStatus(context.Background(), pod(r, time.Now()), metav1.UpdateOptions{})
		}
	}()
	err := WaitForReady(ctx, c, WaitReadyInput{Nodes: []string{"m1"}, Interval: 10 * time.Millisecond, Settle: time.Second})
	close(stop)
	var nre *NotReadyError
	if !errors.As(err, &nre) {
		t.Fatalf("a pod restarting every 100 ms: %v; want a *NotReadyError", err)
	}
	if !strings.Contains(err.Error(), "1 pod(s) not ready (kube-system/crashy-dns-1; kubectl get pods -A)") {
		t.Errorf("the error does not name the pod: %v", err)
	}
	d := strings.Join(nre.Details(), "\n")
	for _, want := range []string{
		"pod kube-system/crashy-dns-1 on m1: ready for 0s only; waiting until it has stayed so for 1s (its containers restarted",
		"  kube-system/crashy-dns-1, container coredns, log of its last run (kubectl logs -n kube-system crashy-dns-1 -c coredns --previous):",
		"    fake logs", // what the fake clientset answers for a log
	} {
		if !strings.Contains(d, want) {
			t.Errorf("details lack %q:\n%s", want, d)
		}
	}
}

// A kubelet that lost a container between the pod's status and the read answers with a line of
// its own: that line is not the container's log (CI at bb052fd quoted it as if it were).
func TestLogLinesOfTellsAKubeletsOwnAnswerFromALog(t *testing.T) {
	for _, c := range []struct {
		body    string
		lines   int
		wantErr bool
	}{
		{"", 0, false},
		{"\n", 0, false},
		{"CoreDNS-1.13.1\nlinux/amd64\n", 2, false},
		{"unable to retrieve container logs for containerd://54e3af10f0a2\n", 0, true},
		// a log that merely mentions it is still a log
		{"starting\nunable to retrieve container logs for x\n", 2, false},
	} {
		lines, err := logLinesOf([]byte(c.body))
		if len(lines) != c.lines || (err != nil) != c.wantErr {
			t.Errorf("logLinesOf(%q) = %q, %v; want %d lines, error %v", c.body, lines, err, c.lines, c.wantErr)
		}
	}
}
