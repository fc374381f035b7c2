package kube

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/kforge/kforge/bundle"
)

func testLocalVolumes() LocalVolumesInput {
	im := testImages()
	return LocalVolumesInput{Enabled: true, Image: im.LocalPath, Helper: im.LocalPathHelper, Path: "/opt/local-path-provisioner"}
}

// helperPodOf reads the ConfigMap's helperPod.yaml as the provisioner does (loadHelperPodFile:
// YAML to JSON, then a Pod).
func helperPodOf(t *testing.T, cm *corev1.ConfigMap) *corev1.Pod {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(cm.Data["helperPod.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	var p corev1.Pod
	if err := json.Unmarshal(j, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// TestLocalVolumesTwiceThenOff: upstream's nine objects are created once and left alone the
// second time; the StorageClass is the default one, the provisioner reads a config that keeps
// every node's volumes under the inventory's path and runs kforge's helper, which the helper pods
// run from kforge's image; turned off, the nine are deleted, the StorageClass first and the
// namespace last, and a second removal finds nothing to do.
func TestLocalVolumesTwiceThenOff(t *testing.T) {
	ctx := context.Background()
	in := testLocalVolumes()
	c := fake.NewClientset()
	first := twice(t, c, func(c kubernetes.Interface) ([]Change, error) { return LocalVolumes(ctx, c, in) })
	allCreated(t, first, 9)
	if first[0].Kind != "Namespace" || first[8].Kind != "StorageClass" {
		t.Errorf("order: %v; want the namespace first and the StorageClass last", first)
	}

	sc, err := c.StorageV1().StorageClasses().Get(ctx, LocalPathStorageClass, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sc.Annotations[isDefaultClass] != "true" || sc.Provisioner != "rancher.io/local-path" ||
		*sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer || *sc.ReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		t.Errorf("StorageClass %+v", sc)
	}
	ns, _ := c.CoreV1().Namespaces().Get(ctx, LocalPathNamespace, metav1.GetOptions{})
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace labels %v; want Pod Security privileged (the helper pods mount the node's directory)", ns.Labels)
	}

	cm, err := c.CoreV1().ConfigMaps(LocalPathNamespace).Get(ctx, "local-path-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		NodePathMap []struct {
			Node  string
			Paths []string
		}
		SetupCommand, TeardownCommand string
	}
	if err := json.Unmarshal([]byte(cm.Data["config.json"]), &cfg); err != nil {
		t.Fatalf("config.json: %v\n%s", err, cm.Data["config.json"])
	}
	if len(cfg.NodePathMap) != 1 || cfg.NodePathMap[0].Node != "DEFAULT_PATH_FOR_NON_LISTED_NODES" || strings.Join(cfg.NodePathMap[0].Paths, ",") != in.Path ||
		cfg.SetupCommand != "/local-path-helper" || cfg.TeardownCommand != "/local-path-helper" {
		t.Errorf("config.json: %+v\n%s", cfg, cm.Data["config.json"])
	}
	helper := helperPodOf(t, cm)
	if len(helper.Spec.Containers) != 1 || helper.Spec.Containers[0].Name != "helper-pod" || helper.Spec.Containers[0].Image != "kforge.dev/local-path-helper:v0.0.30" ||
		*helper.Spec.AutomountServiceAccountToken || *helper.Spec.Containers[0].SecurityContext.RunAsUser != 0 {
		t.Errorf("helperPod.yaml: %+v\n%s", helper, cm.Data["helperPod.yaml"])
	}

	d, err := c.AppsV1().Deployments(LocalPathNamespace).Get(ctx, LocalPathName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctr := d.Spec.Template.Spec.Containers[0]
	if ctr.Image != "docker.io/rancher/local-path-provisioner:v0.0.30" || strings.Join(append(ctr.Command, ctr.Args...), " ") != "/usr/bin/local-path-provisioner --debug start --config /etc/config/config.json" ||
		d.Spec.Strategy.Type != "Recreate" || d.Spec.Template.Spec.ServiceAccountName != "local-path-provisioner-service-account" || !*ctr.SecurityContext.RunAsNonRoot {
		t.Errorf("Deployment: strategy %s, container %+v", d.Spec.Strategy.Type, ctr)
	}

	// A new path and a new helper image (another release) update the ConfigMap alone: the
	// provisioner reads it again.
	in.Path, in.Helper = "/data/volumes", "kforge.dev/local-path-helper:v0.0.31"
	cs, err := LocalVolumes(ctx, c, in)
	if err != nil || !Changed(cs) {
		t.Fatalf("new path: %v %v", cs, err)
	}
	for _, ch := range cs {
		if (ch.Action == Updated) != (ch.Kind == "ConfigMap") {
			t.Errorf("new path and helper: %s", ch)
		}
	}

	off, err := LocalVolumes(ctx, c, LocalVolumesInput{})
	if err != nil || len(off) != 9 || off[0].Kind != "StorageClass" || off[8].Kind != "Namespace" {
		t.Fatalf("turned off: %v %v; want 9 deleted, the StorageClass first and the namespace last", off, err)
	}
	for _, ch := range off {
		if ch.Action != Deleted {
			t.Errorf("turned off: %s", ch)
		}
	}
	c.ClearActions()
	if again, err := LocalVolumes(ctx, c, LocalVolumesInput{}); err != nil || len(again) != 0 {
		t.Errorf("turned off twice: %v %v", again, err)
	}
	if w := writes(c); len(w) > 0 {
		t.Errorf("turned off twice: %d writes, want none (a cluster without them is read only): %v", len(w), w)
	}
}

// TestLocalVolumesRefusesBadInput: no image or a path that is not a directory of the volumes'
// own is an error before anything is written.
func TestLocalVolumesRefusesBadInput(t *testing.T) {
	for _, in := range []LocalVolumesInput{
		{Enabled: true, Image: "p", Path: "/opt/v"},
		{Enabled: true, Image: "p", Helper: "h", Path: "opt/v"},
		{Enabled: true, Image: "p", Helper: "h", Path: "/"},
		{Enabled: true, Image: "p", Helper: "h", Path: "/opt/v/"},
	} {
		c := fake.NewClientset()
		if cs, err := LocalVolumes(context.Background(), c, in); err == nil || len(c.Actions()) > 0 {
			t.Errorf("%+v: %v %v, %d actions; want an error and nothing done", in, cs, err, len(c.Actions()))
		}
	}
}

// TestLocalVolumesWaitForTheirNamespaceToGo: turned off and on again while the namespace is
// still being deleted, apply waits until it is gone (nothing can be created in it meanwhile),
// and says so when it does not go; turned off again meanwhile, the namespace is not deleted
// twice (a conflict).
func TestLocalVolumesWaitForTheirNamespaceToGo(t *testing.T) {
	ctx := context.Background()
	now := metav1.Now()
	terminating := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: LocalPathNamespace, DeletionTimestamp: &now, Finalizers: []string{"kubernetes"}}}
	c := fake.NewClientset(terminating)
	if off, err := LocalVolumes(ctx, c, LocalVolumesInput{}); err != nil || len(off) != 0 {
		t.Errorf("off with the namespace terminating: %v %v; want nothing to do", off, err)
	}
	gets := 0
	c.PrependReactor("get", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
		if gets++; gets < 3 {
			return true, terminating, nil
		}
		return true, nil, apierrors.NewNotFound(corev1.Resource("namespaces"), LocalPathNamespace)
	})
	c.PrependReactor("create", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, terminating, nil
	})
	start := time.Now()
	if _, err := LocalVolumes(ctx, c, testLocalVolumes()); err != nil {
		t.Fatalf("on again once the namespace went: %v", err)
	}
	if took := time.Since(start); gets < 3 || took < time.Second {
		t.Errorf("created after %d reads of the namespace, %s; want it waited for", gets, took)
	}

	err := waitNamespaceGone(ctx, fake.NewClientset(terminating), LocalPathNamespace, 10*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "namespace local-path-storage is still being deleted") || !strings.Contains(err.Error(), "kubectl get all -n local-path-storage") {
		t.Errorf("a namespace that does not go: %v", err)
	}
}

// TestLocalPathNamesTheBundlesPrograms: the Deployment and config.json name the programs where
// the bundle puts them in their images.
func TestLocalPathNamesTheBundlesPrograms(t *testing.T) {
	if localPathBinary != bundle.LocalPathBinary || localPathHelper != bundle.LocalPathHelperBinary {
		t.Errorf("kube names %s and %s, the bundle's images hold %s and %s", localPathBinary, localPathHelper, bundle.LocalPathBinary, bundle.LocalPathHelperBinary)
	}
}
