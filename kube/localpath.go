package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// LocalVolumesInput is what LocalVolumes deploys.
type LocalVolumesInput struct {
	// Enabled serves the StorageClass; false removes what an earlier run installed.
	Enabled bool
	// Image is the provisioner's, Helper kforge's helper's (bundle/internal/localpath).
	Image, Helper string
	// Path is the directory on every node that holds the volumes.
	Path string
}

// Names of the local volumes' objects: upstream's (deploy/local-path-storage.yaml, v0.0.30).
const (
	LocalPathNamespace    = "local-path-storage"
	LocalPathName         = "local-path-provisioner" // the Deployment
	LocalPathStorageClass = "local-path"
	// LocalPathProvisioner is the provisioner's name, which the StorageClass names.
	LocalPathProvisioner    = "rancher.io/local-path"
	localPathServiceAccount = "local-path-provisioner-service-account"
	localPathRole           = "local-path-provisioner-role" // the Role and the ClusterRole
	localPathBinding        = "local-path-provisioner-bind" // the RoleBinding and the ClusterRoleBinding
	localPathConfigMap      = "local-path-config"
)

// The programs of the local volumes' images, where the bundle puts them
// (bundle.LocalPathBinary, bundle.LocalPathHelperBinary).
const (
	localPathBinary = "/usr/bin/local-path-provisioner"
	localPathHelper = "/local-path-helper"
)

// localPathConfigDir is where the provisioner reads its ConfigMap (config.json, helperPod.yaml),
// as upstream's Deployment mounts it; it reads both again when they change.
const localPathConfigDir = "/etc/config/"

// isDefaultClass is the annotation that makes a StorageClass the cluster's default: a claim
// that names no class gets it.
const isDefaultClass = "storageclass.kubernetes.io/is-default-class"

// LocalVolumes serves local volumes as local-path-provisioner's deploy/local-path-storage.yaml
// does (v0.0.30): the namespace local-path-storage, its ServiceAccount, Role and ClusterRole
// with their bindings, the ConfigMap local-path-config, the Deployment and the StorageClass
// local-path. Unlike upstream's: the StorageClass is the cluster's default; the helper pods run
// kforge's helper image, which needs no shell (config.json's setupCommand and teardownCommand),
// as root with two capabilities and a read-only root; the namespace is labelled privileged for
// Pod Security (a helper pod mounts the volumes' directory from its node); the provisioner runs
// as a user with nothing else, tolerates the control-plane taint (as metrics-server does, so a
// cluster of masters alone has it) and is replaced, never doubled (Recreate: it takes no lease).
// With in.Enabled false it deletes them.
func LocalVolumes(ctx context.Context, c kubernetes.Interface, in LocalVolumesInput) ([]Change, error) {
	if !in.Enabled {
		return removeLocalVolumes(ctx, c)
	}
	o, err := localVolumesObjects(in)
	if err != nil {
		return nil, err
	}
	if err := waitNamespaceGone(ctx, c, LocalPathNamespace, namespaceGoneTimeout); err != nil {
		return nil, err
	}
	return o.apply(ctx, c)
}

// namespaceGoneTimeout bounds the wait for a namespace an earlier run deleted: its controller
// deletes its pods first, each within its grace period.
const namespaceGoneTimeout = 2 * time.Minute

// waitNamespaceGone waits until namespace ns, when it is being deleted (an earlier run turned
// its addon off), is gone: nothing can be created in it meanwhile.
func waitNamespaceGone(ctx context.Context, c kubernetes.Interface, ns string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		n, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("read namespace %s: %w", ns, err)
		case n.DeletionTimestamp == nil:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("namespace %s is still being deleted (since %s, by the run that turned it off), after %s: nothing can be created in it until it is gone; see what it still holds with kubectl get all -n %s, then run apply again",
				ns, n.DeletionTimestamp.Format(time.RFC3339), timeout, ns)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// localPathConfig is the provisioner's config.json: every node keeps its volumes under one
// directory, made and removed by the helper's program.
type localPathConfig struct {
	NodePathMap []localPathNode `json:"nodePathMap"`
	// SetupCommand and TeardownCommand are run in a helper pod with -p PATH -s SIZE -m MODE -a
	// create|delete; set, the ConfigMap needs no setup and teardown scripts.
	SetupCommand    string `json:"setupCommand"`
	TeardownCommand string `json:"teardownCommand"`
}

type localPathNode struct {
	Node  string   `json:"node"`
	Paths []string `json:"paths"`
}

// localPathAllNodes is the provisioner's name for every node its config does not list.
const localPathAllNodes = "DEFAULT_PATH_FOR_NON_LISTED_NODES"

// LocalPathHelperPod is the template of the helper pods (the ConfigMap's helperPod.yaml), which
// the provisioner completes for each volume: the node, the volume's base directory (a hostPath
// volume), the command and its arguments, its ServiceAccount. Its container must be called
// helper-pod: the provisioner copies that container's log into its own.
func LocalPathHelperPod(image string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "helper-pod"},
		Spec: corev1.PodSpec{
			// As upstream's: the helper also runs on a node short of disk, which it may free.
			PriorityClassName: "system-node-critical",
			Tolerations:       []corev1.Toleration{{Key: "node.kubernetes.io/disk-pressure", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			// It makes and removes a directory: no API.
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name:            "helper-pod",
				Image:           image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				// Root, to make a directory in the base directory (root's, 0755) and to remove
				// what any pod wrote there: DAC_OVERRIDE enters and empties others' directories,
				// FOWNER removes others' files from a sticky one.
				SecurityContext: &corev1.SecurityContext{
					RunAsUser:                ptr.To[int64](0),
					ReadOnlyRootFilesystem:   ptr.To(true),
					AllowPrivilegeEscalation: ptr.To(false),
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"DAC_OVERRIDE", "FOWNER"}},
				},
			}},
		},
	}
}

func localVolumesObjects(in LocalVolumesInput) (objects, error) {
	if in.Image == "" || in.Helper == "" {
		return nil, fmt.Errorf("local volumes: the provisioner's and the helper's images are required")
	}
	if !path.IsAbs(in.Path) || path.Clean(in.Path) != in.Path || in.Path == "/" {
		return nil, fmt.Errorf("local volumes: %q is not a directory of their own", in.Path)
	}
	config, err := json.MarshalIndent(localPathConfig{
		NodePathMap:     []localPathNode{{Node: localPathAllNodes, Paths: []string{in.Path}}},
		SetupCommand:    localPathHelper,
		TeardownCommand: localPathHelper,
	}, "", "  ")
	if err != nil {
		return nil, err
	}
	helper, err := yaml.Marshal(LocalPathHelperPod(in.Helper))
	if err != nil {
		return nil, err
	}
	const ns = LocalPathNamespace
	labels := map[string]string{"app": LocalPathName}
	sa := serviceAccount(ns, localPathServiceAccount)
	var o objects
	o.namespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "privileged",
	}}})
	o.serviceAccount(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: localPathServiceAccount, Namespace: ns}})
	o.role(&rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: localPathRole, Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "create", "patch", "update", "delete"}}},
	})
	o.clusterRole(&rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: localPathRole},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes", "persistentvolumeclaims", "configmaps", "pods", "pods/log"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"get", "list", "watch", "create", "patch", "update", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch"}},
		},
	})
	o.roleBinding(roleBinding(ns, localPathBinding, localPathRole, sa))
	o.clusterRoleBinding(clusterRoleBinding(localPathBinding, localPathRole, sa))
	o.configMap(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: localPathConfigMap, Namespace: ns},
		Data:       map[string]string{"config.json": string(config) + "\n", "helperPod.yaml": string(helper)},
	})
	o.deployment(&appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: LocalPathName, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			// The old provisioner stops before the new one starts: two would both serve each
			// claim (they take no lease).
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: localPathServiceAccount,
					Tolerations:        []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					Containers: []corev1.Container{{
						Name:            LocalPathName,
						Image:           in.Image,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Command:         []string{localPathBinary},
						Args:            []string{"--debug", "start", "--config", localPathConfigDir + "config.json"},
						Env: []corev1.EnvVar{
							{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
							{Name: "CONFIG_MOUNT_PATH", Value: localPathConfigDir},
						},
						SecurityContext: restrictedUser(1000),
						VolumeMounts:    []corev1.VolumeMount{{Name: "config-volume", MountPath: localPathConfigDir}},
					}},
					Volumes: []corev1.Volume{{Name: "config-volume", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: localPathConfigMap}},
					}}},
				},
			},
		},
	})
	o.storageClass(&storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: LocalPathStorageClass, Annotations: map[string]string{isDefaultClass: "true"}},
		Provisioner:       LocalPathProvisioner,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
	})
	return o, nil
}

// removeLocalVolumes deletes the local volumes' objects, the StorageClass first (no new claim is
// served) and the namespace last; each that was there is a Deleted change. The volumes, their
// PersistentVolumes and their data stay.
func removeLocalVolumes(ctx context.Context, c kubernetes.Interface) ([]Change, error) {
	const ns = LocalPathNamespace
	// Most clusters never served them: found so by reads alone, apply and plan write nothing.
	// What is namespaced goes with the namespace, which goes last.
	get := metav1.GetOptions{}
	there := false
	for _, read := range []func() error{
		func() error { _, err := c.CoreV1().Namespaces().Get(ctx, ns, get); return err },
		func() error {
			_, err := c.StorageV1().StorageClasses().Get(ctx, LocalPathStorageClass, get)
			return err
		},
		func() error { _, err := c.RbacV1().ClusterRoleBindings().Get(ctx, localPathBinding, get); return err },
		func() error { _, err := c.RbacV1().ClusterRoles().Get(ctx, localPathRole, get); return err },
	} {
		switch err := read(); {
		case err == nil:
			there = true
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("look for the local volumes' objects: %w", err)
		}
	}
	if !there {
		return nil, nil
	}
	del := metav1.DeleteOptions{}
	return removeAll([]removal{
		{"StorageClass", "", LocalPathStorageClass, func() error { return c.StorageV1().StorageClasses().Delete(ctx, LocalPathStorageClass, del) }},
		{"Deployment", ns, LocalPathName, func() error { return c.AppsV1().Deployments(ns).Delete(ctx, LocalPathName, del) }},
		{"ConfigMap", ns, localPathConfigMap, func() error { return c.CoreV1().ConfigMaps(ns).Delete(ctx, localPathConfigMap, del) }},
		{"ClusterRoleBinding", "", localPathBinding, func() error { return c.RbacV1().ClusterRoleBindings().Delete(ctx, localPathBinding, del) }},
		{"RoleBinding", ns, localPathBinding, func() error { return c.RbacV1().RoleBindings(ns).Delete(ctx, localPathBinding, del) }},
		{"ClusterRole", "", localPathRole, func() error { return c.RbacV1().ClusterRoles().Delete(ctx, localPathRole, del) }},
		{"Role", ns, localPathRole, func() error { return c.RbacV1().Roles(ns).Delete(ctx, localPathRole, del) }},
		{"ServiceAccount", ns, localPathServiceAccount, func() error {
			return c.CoreV1().ServiceAccounts(ns).Delete(ctx, localPathServiceAccount, del)
		}},
		{"Namespace", "", ns, func() error {
			// One already being deleted is on its way (deleting it again is a conflict).
			if n, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil && n.DeletionTimestamp != nil {
				return apierrors.NewNotFound(corev1.Resource("namespaces"), ns)
			}
			return c.CoreV1().Namespaces().Delete(ctx, ns, del)
		}},
	})
}
