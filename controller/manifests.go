package controller

import (
	"bytes"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// ManifestOptions say how the controller is installed.
type ManifestOptions struct {
	Namespace string // default kforge-system
	Image     string // kforge's image
	// Clusters is how many clusters are worked on at once (--clusters).
	Clusters int
	// BundleHostPath, when set, is a directory on every node of the management cluster holding
	// the offline bundle, mounted at /bundle (a KforgeCluster's spec.bundle: /bundle).
	BundleHostPath string
}

// Manifests are the objects that install kforge controller: the KforgeCluster CRD, a
// namespace, the controller's ServiceAccount with the RBAC it needs, and its Deployment (two
// replicas, one leading), as one multi-document YAML.
func Manifests(o ManifestOptions) ([]byte, error) {
	if o.Namespace == "" {
		o.Namespace = "kforge-system"
	}
	crd, err := CRD()
	if err != nil {
		return nil, err
	}
	name := "kforge-controller"
	labels := map[string]string{"app.kubernetes.io/name": name}
	meta := func(kind, apiVersion string) (metav1.TypeMeta, metav1.ObjectMeta) {
		return metav1.TypeMeta{Kind: kind, APIVersion: apiVersion}, metav1.ObjectMeta{Name: name, Namespace: o.Namespace, Labels: labels}
	}
	rule := func(group string, resources []string, verbs ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: resources, Verbs: verbs}
	}
	all := []string{"get", "list", "watch", "create", "update", "patch", "delete"}

	ns := &corev1.Namespace{TypeMeta: metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: o.Namespace}}
	if o.BundleHostPath != "" {
		// Pod Security's baseline forbids hostPath volumes; the container itself stays within
		// restricted (non-root, no capabilities, read-only root, RuntimeDefault seccomp).
		ns.Labels = map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}
	}
	sa := &corev1.ServiceAccount{}
	sa.TypeMeta, sa.ObjectMeta = meta("ServiceAccount", "v1")
	role := &rbacv1.ClusterRole{Rules: []rbacv1.PolicyRule{
		rule(Group, []string{Resource}, "get", "list", "watch", "update", "patch"),
		rule(Group, []string{Resource + "/status", Resource + "/finalizers"}, "get", "update", "patch"),
		// The clusters' state (kube.StateStore) and their credentials.
		rule("", []string{"secrets", "configmaps"}, all...),
		// kube.DeleteState removes a reset cluster's run records (ConfigMaps) by label.
		rule("", []string{"configmaps"}, "deletecollection"),
		rule("coordination.k8s.io", []string{"leases"}, all...),
		rule("events.k8s.io", []string{"events"}, "create", "patch", "update"),
		rule("", []string{"events"}, "create", "patch", "update"),
	}}
	role.TypeMeta, role.ObjectMeta = meta("ClusterRole", "rbac.authorization.k8s.io/v1")
	role.Namespace = ""
	binding := &rbacv1.ClusterRoleBinding{
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: o.Namespace}},
	}
	binding.TypeMeta, binding.ObjectMeta = meta("ClusterRoleBinding", "rbac.authorization.k8s.io/v1")
	binding.Namespace = ""

	replicas := int32(2)
	env := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	args := []string{"controller", "-v", "--namespace=$(POD_NAMESPACE)", "--identity=$(POD_NAME)", "--work-dir=/work"}
	if o.Clusters > 0 {
		args = append(args, "--clusters="+strconv.Itoa(o.Clusters))
	}
	memory := resource.MustParse("256Mi")
	volumes := []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &memory}}}}
	mounts := []corev1.VolumeMount{{Name: "work", MountPath: "/work"}}
	if o.BundleHostPath != "" {
		dir := corev1.HostPathDirectory
		volumes = append(volumes, corev1.Volume{Name: "bundle", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: o.BundleHostPath, Type: &dir}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "bundle", MountPath: "/bundle", ReadOnly: true})
	}
	no, yes := false, true
	uid := int64(65532)
	dep := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{
		Replicas: &replicas,
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{
				ServiceAccountName: name,
				SecurityContext:    &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
				Containers: []corev1.Container{{
					Name: "controller", Image: o.Image, Args: args,
					// The root filesystem is read-only: temporary files go to the work dir.
					Env:          []corev1.EnvVar{env("POD_NAME", "metadata.name"), env("POD_NAMESPACE", "metadata.namespace"), {Name: "TMPDIR", Value: "/work"}},
					VolumeMounts: mounts,
					Ports:        []corev1.ContainerPort{{Name: "metrics", ContainerPort: 8080}, {Name: "probes", ContainerPort: 8081}},
					LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("probes")}},
						PeriodSeconds: 20},
					SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
						Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("128Mi")}},
				}},
				Volumes: volumes,
			},
		},
	}}
	dep.TypeMeta, dep.ObjectMeta = meta("Deployment", "apps/v1")

	var out bytes.Buffer
	for i, obj := range []any{crd, ns, sa, role, binding, dep} {
		b, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out.WriteString("---\n")
		}
		out.Write(b)
	}
	return out.Bytes(), nil
}
