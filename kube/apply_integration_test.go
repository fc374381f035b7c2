package kube

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/inventory"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const userManifest = `apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.kforge.dev}
spec:
  group: example.kforge.dev
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
---
# a custom resource of the kind defined just above, in the same file
apiVersion: example.kforge.dev/v1
kind: Widget
metadata: {name: w, namespace: demo}
spec: {size: 3}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {a: "1"}
`

// resources maps the kinds the functions report to their resources, to read them back.
var resources = map[string]schema.GroupVersionResource{
	"ConfigMap":                {Version: "v1", Resource: "configmaps"},
	"Secret":                   {Version: "v1", Resource: "secrets"},
	"ServiceAccount":           {Version: "v1", Resource: "serviceaccounts"},
	"Service":                  {Version: "v1", Resource: "services"},
	"Namespace":                {Version: "v1", Resource: "namespaces"},
	"Node":                     {Version: "v1", Resource: "nodes"},
	"Role":                     {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	"RoleBinding":              {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
	"ClusterRole":              {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"ClusterRoleBinding":       {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	"Deployment":               {Group: "apps", Version: "v1", Resource: "deployments"},
	"DaemonSet":                {Group: "apps", Version: "v1", Resource: "daemonsets"},
	"CustomResourceDefinition": {Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
	"APIService":               apiServiceGVR,
	"StorageClass":             {Group: "storage.k8s.io", Version: "v1", Resource: "storageclasses"},
	"Widget":                   {Group: "example.kforge.dev", Version: "v1", Resource: "widgets"},
}

// resourceVersions reads back every object the changes name.
func resourceVersions(t *testing.T, dyn dynamic.Interface, changes []Change) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, c := range changes {
		gvr, ok := resources[c.Kind]
		if !ok {
			t.Fatalf("no resource known for kind %s", c.Kind)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(gvr)
		if c.Namespace != "" {
			ri = dyn.Resource(gvr).Namespace(c.Namespace)
		}
		u, err := ri.Get(context.Background(), c.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("read back %s: %v", c, err)
		}
		out[objName(c)] = u.GetResourceVersion()
	}
	return out
}

// itToken is the bootstrap token of the integration tests (a test value, not a secret).
var itToken = BootstrapToken{ID: "abcdef", Secret: "0123456789abcdef", TTL: 24 * time.Hour}

// applySteps returns every step of apply's API work, in apply's order, as one function over
// a client, and a dynamic client for reading objects back.
func applySteps(t testing.TB, cp *controlPlane, admin kubernetes.Interface) (func(kubernetes.Interface) ([]Change, error), dynamic.Interface) {
	t.Helper()
	ctx := context.Background()
	c := cp.cluster
	cc, err := ClusterConfigurationFor(c)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := KubeletConfigurationFor(c)
	if err != nil {
		t.Fatal(err)
	}
	images := testImages()
	dyn, err := dynamic.NewForConfig(cp.admin)
	if err != nil {
		t.Fatal(err)
	}
	mapper := NewRESTMapper(admin.Discovery())
	token := itToken
	now := time.Now()
	// The inputs are those apply derives from the inventory; the endpoint they publish
	// (198.51.100.10:6443) is only data here, nothing dials it.
	return func(c kubernetes.Interface) ([]Change, error) {
		var all []Change
		steps := []func() ([]Change, error){
			func() ([]Change, error) { return UploadConfig(ctx, c, UploadConfigInput{Cluster: cc, Kubelet: kc}) },
			func() ([]Change, error) { return MarkNodes(ctx, c, NodeMarksFor(cp.cluster), 0) },
			func() ([]Change, error) {
				return Bootstrap(ctx, c, BootstrapInputFor(cp.cluster, cp.set, token, now))
			},
			func() ([]Change, error) {
				return CoreDNS(ctx, c, CoreDNSInputFor(cp.cluster, images))
			},
			func() ([]Change, error) {
				return KubeProxy(ctx, c, KubeProxyInputFor(zeroConntrack(cp.cluster), images, inventory.ProxyModeIptables))
			},
			func() ([]Change, error) {
				return Flannel(ctx, c, FlannelInputFor(cp.cluster, images, inventory.ProxyModeIptables))
			},
			func() ([]Change, error) {
				// With AdminNetworkPolicy: its CRDs, as apply applies them first.
				cs, err := ApplyManifests(ctx, dyn, mapper, ApplyInput{Manifests: AdminNetworkPolicyCRDs()})
				if err != nil {
					return cs, err
				}
				in := NetworkPolicyInputFor(cp.cluster, images)
				in.Admin = true
				more, err := NetworkPolicies(ctx, c, in)
				return append(cs, more...), err
			},
			func() ([]Change, error) {
				return MetricsServer(ctx, c, dyn, MetricsServerInput{Enabled: true, Image: images.MetricsServer})
			},
			func() ([]Change, error) {
				return LocalVolumes(ctx, c, LocalVolumesInput{Enabled: true, Image: images.LocalPath, Helper: images.LocalPathHelper, Path: inventory.DefaultLocalVolumesPath})
			},
			func() ([]Change, error) {
				return ApplyManifests(ctx, dyn, mapper, ApplyInput{Manifests: []Manifest{{Path: "addons/demo.yaml", Data: []byte(userManifest)}}})
			},
		}
		for _, s := range steps {
			ch, err := s()
			all = append(all, ch...)
			if err != nil {
				return all, err
			}
		}
		return all, nil
	}, dyn
}

// bootstrapAdmin creates kubeadm:cluster-admins with super-admin.conf, as kubeadm init does,
// waits until admin.conf may act, and registers nodes m1 and w1 as their kubelets would
// (m1 already labelled by someone).
func bootstrapAdmin(t testing.TB, cp *controlPlane) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	super := cp.client(t, cp.superAdmin)
	admin := cp.client(t, cp.admin)
	// admin.conf (group kubeadm:cluster-admins) can do nothing until the binding exists.
	if _, err := admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("admin.conf before kubeadm:cluster-admins: err = %v, want forbidden", err)
	}
	if err := WaitAdminsAuthorized(ctx, admin, time.Second); err == nil || !strings.Contains(err.Error(), "ClusterRoleBinding kubeadm:cluster-admins: admin.conf's group still has no rights after 1s (not allowed") {
		t.Fatalf("WaitAdminsAuthorized before the binding: %v; want it to say admin.conf's group has no rights", err)
	}
	ch, err := EnsureClusterAdmins(ctx, super)
	if err != nil || len(ch) != 1 || ch[0].Action != Created {
		t.Fatalf("EnsureClusterAdmins: %v %v", ch, err)
	}
	// The authorizer learns of the binding a moment later; once it allows, admin.conf acts.
	if err := WaitAdminsAuthorized(ctx, admin, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("admin.conf after WaitAdminsAuthorized: %v", err)
	}
	for _, n := range []*corev1.Node{node("m1", map[string]string{"user": "keep"}), node("w1", nil)} {
		n.ResourceVersion = ""
		if _, err := admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return admin
}

// BenchmarkApplySteps measures apply's API work against a real API server on loopback: the
// first run (everything created) once, then the idempotent run (everything read, nothing
// written) b.N times.
func BenchmarkApplySteps(b *testing.B) {
	cp := startControlPlane(b, integrationCluster(), b.TempDir())
	cp.waitUp(b)
	admin := bootstrapAdmin(b, cp)
	run, _ := applySteps(b, cp, admin)
	start := time.Now()
	first, err := run(admin)
	if err != nil {
		b.Fatal(err)
	}
	firstMS := float64(time.Since(start).Microseconds()) / 1000
	b.ResetTimer()
	for b.Loop() {
		ch, err := run(admin)
		if err != nil {
			b.Fatal(err)
		}
		if Changed(ch) {
			b.Fatalf("idempotent run changed something: %v", ch)
		}
	}
	b.ReportMetric(firstMS, "first-run-ms")
	b.ReportMetric(float64(len(first)), "objects")
}

func TestEverythingTwiceAgainstARealAPIServer(t *testing.T) {
	cp := startControlPlane(t, integrationCluster(), t.TempDir())
	answers := cp.waitUp(t)
	t.Logf("API server ready after %d health answers, %s", len(answers), answers[len(answers)-1].Elapsed.Round(time.Millisecond))
	admin := bootstrapAdmin(t, cp)
	run, dyn := applySteps(t, cp, admin)
	start := time.Now()
	first, err := run(admin)
	if err != nil {
		t.Fatalf("first run: %v", err)
	}
	t.Logf("first run: %d objects in %s", len(first), time.Since(start).Round(time.Millisecond))
	for _, c := range first {
		if c.Action == Unchanged {
			t.Errorf("first run left %s unchanged: it existed before", c)
		}
	}
	before := resourceVersions(t, dyn, first)

	start = time.Now()
	second, err := run(admin)
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	t.Logf("second run: %d objects in %s", len(second), time.Since(start).Round(time.Millisecond))
	if len(second) != len(first) {
		t.Errorf("second run reported %d objects, first %d", len(second), len(first))
	}
	for _, c := range second {
		if c.Action != Unchanged {
			t.Errorf("second run: %s", c)
		}
	}
	after := resourceVersions(t, dyn, first)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s: resourceVersion %s after the second run, %s before", k, after[k], v)
		}
	}

	t.Run("objects", func(t *testing.T) { checkObjects(t, cp, admin, dyn) })
	t.Run("local volumes' helper admitted", func(t *testing.T) { checkLocalPathHelperAdmitted(t, cp, admin) })
	t.Run("bootstrap token rights", func(t *testing.T) { checkTokenRights(t, cp, itToken) })
	t.Run("wait for ready", func(t *testing.T) { checkWaitForReady(t, admin) })
	t.Run("kubelet CSRs signed", func(t *testing.T) { checkKubeletCSRs(t, cp, admin, itToken) })
	t.Run("pod CIDRs", func(t *testing.T) { checkPodCIDRs(t, admin) })
	t.Run("addons turned off", func(t *testing.T) { checkAddonsOff(t, cp, admin, dyn) })
	t.Run("API server health error", func(t *testing.T) { checkHealthError(t, cp, admin) })
}

// checkAddonsOff: the NetworkPolicy agent, metrics-server and the local volumes, turned off,
// are deleted, the APIService first, the local volumes' StorageClass first and their namespace
// last; the CRDs of AdminNetworkPolicy stay; a second removal finds nothing. A dry run of the
// local volumes, their namespace gone, shows every object created and stores none.
func checkAddonsOff(t *testing.T, cp *controlPlane, admin kubernetes.Interface, dyn dynamic.Interface) {
	ctx := context.Background()
	ms, err := MetricsServer(ctx, admin, dyn, MetricsServerInput{})
	if err != nil || len(ms) != 9 || ms[0].Kind != "APIService" {
		t.Errorf("metrics-server off: %v %v; want 9 deleted, the APIService first", ms, err)
	}
	np, err := NetworkPolicies(ctx, admin, NetworkPolicyInput{})
	if err != nil || len(np) != 4 {
		t.Errorf("NetworkPolicy agent off: %v %v; want 4 deleted", np, err)
	}
	lv, err := LocalVolumes(ctx, admin, LocalVolumesInput{})
	if err != nil || len(lv) != 9 || lv[0].Kind != "StorageClass" || lv[8].Kind != "Namespace" {
		t.Errorf("local volumes off: %v %v; want 9 deleted, the StorageClass first and the namespace last", lv, err)
	}
	for _, c := range append(append(ms, np...), lv...) {
		if c.Action != Deleted {
			t.Errorf("turned off: %s", c)
		}
		gvr := resources[c.Kind]
		var ri dynamic.ResourceInterface = dyn.Resource(gvr)
		if c.Namespace != "" {
			ri = dyn.Resource(gvr).Namespace(c.Namespace)
		}
		u, err := ri.Get(ctx, c.Name, metav1.GetOptions{})
		if c.Kind == "Namespace" && err == nil && u.GetDeletionTimestamp() != nil {
			continue // its controller (kube-controller-manager's, not run here) finishes it
		}
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s after it was deleted: %v", c, err)
		}
	}
	if again, err := LocalVolumes(ctx, admin, LocalVolumesInput{}); err != nil || len(again) != 0 {
		t.Errorf("local volumes off again, their namespace terminating: %v %v; want nothing to do", again, err)
	}
	// The namespace controller's last steps, done here: the finalizer off, the namespace deleted.
	ns, err := admin.CoreV1().Namespaces().Get(ctx, LocalPathNamespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Spec.Finalizers = nil
	if _, err := admin.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := admin.CoreV1().Namespaces().Delete(ctx, LocalPathNamespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := waitNamespaceGone(ctx, admin, LocalPathNamespace, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	dry := cp.client(t, DryRun(cp.admin))
	images := testImages()
	planned, err := LocalVolumes(ctx, dry, LocalVolumesInput{Enabled: true, Image: images.LocalPath, Helper: images.LocalPathHelper, Path: inventory.DefaultLocalVolumesPath})
	if err != nil || len(planned) != 9 {
		t.Errorf("dry run of the local volumes, their namespace gone: %v %v; want 9 created", planned, err)
	}
	for _, c := range planned {
		if c.Action != Created {
			t.Errorf("dry run, nothing there: %s", c)
		}
	}
	for _, c := range []Change{{Kind: "Namespace", Name: LocalPathNamespace}, {Kind: "StorageClass", Name: LocalPathStorageClass}, {Kind: "ClusterRole", Name: localPathRole}} {
		if _, err := dyn.Resource(resources[c.Kind]).Get(ctx, c.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s after a dry run: %v; want none", objName(c), err)
		}
	}
	if _, err := dyn.Resource(resources["CustomResourceDefinition"]).Get(ctx, "adminnetworkpolicies.policy.networking.k8s.io", metav1.GetOptions{}); err != nil {
		t.Errorf("the AdminNetworkPolicy CRD after the agent went: %v; want it kept", err)
	}
	again, err := MetricsServer(ctx, admin, dyn, MetricsServerInput{})
	if err != nil || len(again) != 0 {
		t.Errorf("metrics-server off twice: %v %v", again, err)
	}
	// Back on, for the checks after this one.
	run, _ := applySteps(t, cp, admin)
	if _, err := run(admin); err != nil {
		t.Fatal(err)
	}
}

// checkLocalPathHelperAdmitted: a helper pod as the provisioner makes it from the ConfigMap's
// helperPod.yaml (run as root, the node's volumes directory mounted from the host), created as
// the provisioner's ServiceAccount, is admitted in local-path-storage: its Role lets it create
// pods there, and the namespace's Pod Security label lets the hostPath in. The same pod in a
// namespace that enforces baseline (kforge's default level) is refused for its hostPath.
func checkLocalPathHelperAdmitted(t *testing.T, cp *controlPlane, admin kubernetes.Interface) {
	ctx := context.Background()
	cm, err := admin.CoreV1().ConfigMaps(LocalPathNamespace).Get(ctx, localPathConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// What createHelperPod (provisioner.go, v0.0.30) adds to the template.
	pod := helperPodOf(t, cm)
	base := inventory.DefaultLocalVolumesPath + "/"
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	pod.Name = "helper-pod-create-pvc-1"
	pod.Spec.NodeName = "w1"
	pod.Spec.ServiceAccountName = localPathServiceAccount
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists})
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: base, Type: &dirOrCreate}}})
	ctr := &pod.Spec.Containers[0]
	ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: "data", MountPath: base})
	ctr.Command = []string{localPathHelper}
	ctr.Args = []string{"-p", base + "pvc-1_default_data", "-s", "1073741824", "-m", "Filesystem", "-a", "create"}

	sa := rest.CopyConfig(cp.admin)
	sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + LocalPathNamespace + ":" + localPathServiceAccount}
	provisioner := cp.client(t, sa)
	in := pod.DeepCopy()
	in.Namespace = LocalPathNamespace
	if _, err := provisioner.CoreV1().Pods(LocalPathNamespace).Create(ctx, in, metav1.CreateOptions{}); err != nil {
		t.Errorf("the helper pod, created by the provisioner's ServiceAccount in %s: %v; want it admitted", LocalPathNamespace, err)
	} else if err := provisioner.CoreV1().Pods(LocalPathNamespace).Delete(ctx, in.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Error(err)
	}

	const other = "baseline-enforced"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer admin.CoreV1().Namespaces().Delete(ctx, other, metav1.DeleteOptions{})
	// Its default ServiceAccount, which kube-controller-manager (not run here) would make.
	if _, err := admin.CoreV1().ServiceAccounts(other).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out := pod.DeepCopy()
	out.Namespace, out.Spec.ServiceAccountName = other, ""
	if _, err := admin.CoreV1().Pods(other).Create(ctx, out, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "violates PodSecurity") || !strings.Contains(err.Error(), "hostPath") {
		t.Errorf("the helper pod in a namespace enforcing baseline: %v; want it refused for its hostPath", err)
	}
}

// checkHealthError stops etcd (the test's own process, by PID) and expects WaitForAPIServer to
// give up with the API server's own account: HTTP 500 and the failing etcd check.
func checkHealthError(t *testing.T, cp *controlPlane, admin kubernetes.Interface) {
	cp.etcd.Cmd.Process.Kill()
	<-cp.etcd.Done
	var answers []HealthAnswer
	err := WaitForAPIServer(context.Background(), admin, WaitAPIServerInput{Timeout: 10 * time.Second, Progress: func(h HealthAnswer) { answers = append(answers, h) }})
	var nre *APIServerNotReadyError
	if !errors.As(err, &nre) {
		t.Fatalf("err = %v, want *APIServerNotReadyError", err)
	}
	t.Logf("%v", err)
	t.Logf("details:\n%s", strings.Join(nre.Details(), "\n"))
	if nre.Last.StatusCode != 500 || !strings.Contains(nre.Last.Body, "[-]etcd failed") || strings.Contains(nre.Last.Body, "[+]") {
		t.Errorf("last answer %d %q, want 500 naming the etcd check", nre.Last.StatusCode, nre.Last.Body)
	}
	if len(answers) < 2 {
		t.Errorf("%d progress reports", len(answers))
	}
}

func checkObjects(t *testing.T, cp *controlPlane, admin kubernetes.Interface, dyn dynamic.Interface) {
	ctx := context.Background()
	m1, err := admin.CoreV1().Nodes().Get(ctx, "m1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"user": "keep", "tier": "control", LabelControlPlane: "", LabelExcludeFromExternalLB: ""} {
		if got, ok := m1.Labels[k]; !ok || got != v {
			t.Errorf("m1 label %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
	// The API server itself adds node.kubernetes.io/not-ready:NoSchedule to new nodes
	// (TaintNodesByCondition); it must survive.
	notReady := corev1.Taint{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}
	want := []corev1.Taint{notReady, {Key: LabelControlPlane, Effect: corev1.TaintEffectNoSchedule}}
	if !sameTaints(m1.Spec.Taints, want) {
		t.Errorf("m1 taints %v, want %v", m1.Spec.Taints, want)
	}
	w1, _ := admin.CoreV1().Nodes().Get(ctx, "w1", metav1.GetOptions{})
	want = []corev1.Taint{notReady, {Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoSchedule}}
	if w1.Labels["gpu"] != "yes" || !sameTaints(w1.Spec.Taints, want) {
		t.Errorf("w1 labels %v taints %v, want %v", w1.Labels, w1.Spec.Taints, want)
	}
	svc, err := admin.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil || svc.Spec.ClusterIP != "10.96.0.10" {
		t.Errorf("kube-dns: %v %v", svc.Spec.ClusterIP, err)
	}
	// Someone edits kforge's objects: the next run puts them back, through real updates.
	svc.Spec.Ports = svc.Spec.Ports[:1]
	svc.Labels["team"] = "dns"
	if _, err := admin.CoreV1().Services("kube-system").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ds, err := admin.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds.Spec.Template.Spec.Containers[0].Image = "example.invalid/kube-proxy:edited"
	if _, err := admin.AppsV1().DaemonSets("kube-system").Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	images := testImages()
	ch, err := CoreDNS(ctx, admin, CoreDNSInputFor(cp.cluster, images))
	if err != nil || actions(ch)["Service kube-system/kube-dns"] != Updated {
		t.Errorf("CoreDNS after an edit of kube-dns: %v %v", ch, err)
	}
	ch, err = KubeProxy(ctx, admin, KubeProxyInputFor(zeroConntrack(cp.cluster), images, inventory.ProxyModeIptables))
	if err != nil || actions(ch)["DaemonSet kube-system/kube-proxy"] != Updated {
		t.Errorf("KubeProxy after an edit of its DaemonSet: %v %v", ch, err)
	}
	svc, _ = admin.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if len(svc.Spec.Ports) != 3 || svc.Labels["team"] != "dns" || svc.Spec.ClusterIP != "10.96.0.10" {
		t.Errorf("kube-dns after repair: ports %v labels %v", svc.Spec.Ports, svc.Labels)
	}
	ds, _ = admin.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if ds.Spec.Template.Spec.Containers[0].Image != images.KubeProxy {
		t.Errorf("kube-proxy image after repair: %s", ds.Spec.Template.Spec.Containers[0].Image)
	}

	cm, err := admin.CoreV1().ConfigMaps("default").Get(ctx, "settings", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("user manifest ConfigMap without namespace not in default: %v", err)
	}
	managers := map[string]string{}
	for _, f := range cm.ManagedFields {
		managers[f.Manager] = string(f.Operation)
	}
	if managers[FieldManager] != "Apply" {
		t.Errorf("settings managed fields %v, want %s/Apply", managers, FieldManager)
	}
	w, err := dyn.Resource(resources["Widget"]).Namespace("demo").Get(ctx, "w", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("custom resource: %v", err)
	}
	if size, _, _ := unstructuredInt(w.Object, "spec", "size"); size != 3 {
		t.Errorf("widget spec %v", w.Object["spec"])
	}
	// A changed manifest is an update through server-side apply.
	ch, err = ApplyManifests(ctx, dyn, NewRESTMapper(admin.Discovery()), ApplyInput{Manifests: []Manifest{{Path: "x.yaml", Data: []byte(
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: \"2\"}\n")}}})
	if err != nil || len(ch) != 1 || ch[0].Action != Updated {
		t.Errorf("changed manifest: %v %v", ch, err)
	}
	// A document of a kind the server does not serve names the file, the document and the kind.
	_, err = ApplyManifests(ctx, dyn, NewRESTMapper(admin.Discovery()), ApplyInput{KindWait: time.Second, Manifests: []Manifest{{Path: "bad.yaml", Data: []byte(
		"apiVersion: nope.example/v1\nkind: Gadget\nmetadata: {name: g}\n")}}})
	if err == nil || !strings.Contains(err.Error(), "bad.yaml: document 1 (Gadget g)") {
		t.Errorf("unknown kind: %v", err)
	}
}

func unstructuredInt(obj map[string]any, path ...string) (int64, bool, error) {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return 0, false, nil
		}
		cur = m[p]
	}
	n, ok := cur.(int64)
	return n, ok, nil
}

// checkTokenRights proves the RBAC kforge created does for a joining node what kubeadm's does:
// anonymous users read cluster-info only; the bootstrap token authenticates in kubeadm's group
// and may read the cluster configuration, get nodes and post CSRs.
func checkTokenRights(t *testing.T, cp *controlPlane, token BootstrapToken) {
	ctx := context.Background()
	anon := cp.anonymous(t)
	if _, err := anon.CoreV1().ConfigMaps("kube-public").Get(ctx, "cluster-info", metav1.GetOptions{}); err != nil {
		t.Errorf("anonymous get cluster-info: %v", err)
	}
	if _, err := anon.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubeadm-config", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("anonymous get kubeadm-config: err = %v, want forbidden", err)
	}
	tc := cp.token(t, token.ID+"."+token.Secret)
	r, err := tc.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("bootstrap token does not authenticate: %v", err)
	}
	if u := r.Status.UserInfo; u.Username != "system:bootstrap:abcdef" || !strings.Contains(strings.Join(u.Groups, ","), NodeBootstrapTokenAuthGroup) {
		t.Errorf("bootstrap token user %+v", u)
	}
	for _, a := range []authorizationv1.ResourceAttributes{
		{Namespace: "kube-system", Verb: "get", Resource: "configmaps", Name: "kubeadm-config"},
		{Namespace: "kube-system", Verb: "get", Resource: "configmaps", Name: "kubelet-config"},
		{Namespace: "kube-system", Verb: "get", Resource: "configmaps", Name: "kube-proxy"},
		{Verb: "get", Resource: "nodes", Name: "m1"},
		{Verb: "create", Group: "certificates.k8s.io", Resource: "certificatesigningrequests"},
		{Verb: "create", Group: "certificates.k8s.io", Resource: "certificatesigningrequests", Subresource: "nodeclient"},
	} {
		res, err := tc.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &a}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Status.Allowed {
			t.Errorf("bootstrap token may not %s %s/%s %s: %s", a.Verb, a.Resource, a.Subresource, a.Name, res.Status.Reason)
		}
	}
	res, err := tc.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "kube-system", Verb: "get", Resource: "secrets"}}}, metav1.CreateOptions{})
	if err != nil || res.Status.Allowed {
		t.Errorf("bootstrap token may read secrets: %v %v", res.Status, err)
	}
}

func checkWaitForReady(t *testing.T, admin kubernetes.Interface) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := WaitForReady(ctx, admin, WaitReadyInput{Nodes: []string{"m1", "w1"}, Interval: 200 * time.Millisecond})
	var nre *NotReadyError
	if !errors.As(err, &nre) {
		t.Fatalf("err = %v, want *NotReadyError (no kubelet, no controllers)", err)
	}
	d := strings.Join(nre.Details(), "\n")
	for _, want := range []string{"node m1: no Ready condition yet", "node w1: no Ready condition yet", "Deployment kube-system/coredns: 0 of 2 pods ready"} {
		if !strings.Contains(d, want) {
			t.Errorf("details lack %q:\n%s", want, d)
		}
	}
	// Nodes reporting Ready, in a namespace with no workloads: ready at once.
	for _, name := range []string{"m1", "w1"} {
		n, err := admin.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		if _, err := admin.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := WaitForReady(ctx2, admin, WaitReadyInput{Nodes: []string{"m1", "w1"}, Namespaces: []string{"kube-public"}}); err != nil {
		t.Errorf("ready nodes: %v", err)
	}
}

func sameTaints(a, b []corev1.Taint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || a[i].Value != b[i].Value || a[i].Effect != b[i].Effect {
			return false
		}
	}
	return true
}

// zeroConntrack is c with kube-proxy leaving the conntrack table alone, as test hosts sharing
// this machine's kernel need.
func zeroConntrack(c *inventory.Cluster) *inventory.Cluster {
	cc := *c
	cc.KubeProxy.ConntrackMaxPerCore = new(0)
	return &cc
}
