package kube

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// MetricsServerInput is what MetricsServer deploys.
type MetricsServerInput struct {
	// Enabled runs metrics-server; false removes what an earlier run installed.
	Enabled bool
	Image   string
}

// MetricsServerName names metrics-server's Deployment, Service and ServiceAccount in
// kube-system.
const MetricsServerName = "metrics-server"

// metricsAPIService is the APIService that hands metrics.k8s.io to metrics-server.
const metricsAPIService = "v1beta1.metrics.k8s.io"

// metricsServerCA is where metrics-server reads the cluster CA (the kube-root-ca.crt ConfigMap
// every namespace has), which signs every kubelet's serving certificate (docs/security.md).
const metricsServerCA = "/etc/kubernetes/cluster-ca"

// apiServiceGVR is apiregistration.k8s.io/v1's APIService.
var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// MetricsServer runs metrics-server as its manifests/base does (v0.8.0): ServiceAccount,
// ClusterRoles system:aggregated-metrics-reader (aggregated to view, edit and admin) and
// system:metrics-server, their bindings (and system:auth-delegator's and the
// extension-apiserver-authentication-reader Role's), the Service, the Deployment and the
// APIService v1beta1.metrics.k8s.io. Unlike upstream's it verifies every kubelet's serving
// certificate against the cluster CA (--kubelet-certificate-authority; upstream's examples
// turn verification off), and it tolerates the control-plane taint, so a cluster of masters
// alone has it too. With in.Enabled false it deletes them.
func MetricsServer(ctx context.Context, c kubernetes.Interface, dyn dynamic.Interface, in MetricsServerInput) ([]Change, error) {
	if !in.Enabled {
		return removeMetricsServer(ctx, c, dyn)
	}
	o, err := metricsServerObjects(in)
	if err != nil {
		return nil, err
	}
	cs, err := o.apply(ctx, c)
	if err != nil {
		return cs, err
	}
	ch, err := ensureAPIService(ctx, dyn, metricsAPIServiceObject())
	return append(cs, ch), err
}

// metricsAPIServiceObject is upstream's APIService. The aggregator does not verify
// metrics-server's self-signed serving certificate (insecureSkipTLSVerify), as upstream's.
func metricsAPIServiceObject() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": metricsAPIService, "labels": map[string]any{"k8s-app": MetricsServerName}},
		"spec": map[string]any{
			"service":               map[string]any{"name": MetricsServerName, "namespace": "kube-system"},
			"group":                 "metrics.k8s.io",
			"version":               "v1beta1",
			"insecureSkipTLSVerify": true,
			"groupPriorityMinimum":  int64(100),
			"versionPriority":       int64(100),
		},
	}}
}

// ensureAPIService is ensure for an APIService (which the typed clientset does not serve): it
// creates want when missing, leaves it when every field of want's spec and its labels are as
// want has them, and otherwise updates it.
func ensureAPIService(ctx context.Context, dyn dynamic.Interface, want *unstructured.Unstructured) (Change, error) {
	ch := Change{Kind: "APIService", Name: want.GetName()}
	ri := dyn.Resource(apiServiceGVR)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		have, err := ri.Get(ctx, want.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			ch.Action = Created
			_, err = ri.Create(ctx, want, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		if equality.Semantic.DeepDerivative(want.Object["spec"], have.Object["spec"]) && subset(want.GetLabels(), have.GetLabels()) {
			ch.Action = Unchanged
			return nil
		}
		upd := want.DeepCopy()
		upd.SetResourceVersion(have.GetResourceVersion())
		upd.SetLabels(overlay(have.GetLabels(), want.GetLabels()))
		upd.SetAnnotations(have.GetAnnotations())
		ch.Action = Updated
		_, err = ri.Update(ctx, upd, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return ch, fmt.Errorf("ensure %s: %w", objName(ch), err)
	}
	return ch, nil
}

func metricsServerObjects(in MetricsServerInput) (objects, error) {
	if in.Image == "" {
		return nil, fmt.Errorf("metrics-server: image is required")
	}
	const ns, name = "kube-system", MetricsServerName
	labels := map[string]string{"k8s-app": name}
	sa := serviceAccount(ns, name)
	var o objects
	o.serviceAccount(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}})
	o.clusterRole(&rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "system:aggregated-metrics-reader", Labels: map[string]string{
			"k8s-app": name,
			"rbac.authorization.k8s.io/aggregate-to-view":  "true",
			"rbac.authorization.k8s.io/aggregate-to-edit":  "true",
			"rbac.authorization.k8s.io/aggregate-to-admin": "true",
		}},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"metrics.k8s.io"}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list", "watch"}}},
	})
	o.clusterRole(&rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "system:metrics-server", Labels: labels},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes/metrics"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list", "watch"}},
		},
	})
	o.roleBinding(&rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-server-auth-reader", Namespace: ns, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
		Subjects:   []rbacv1.Subject{sa},
	})
	for _, b := range [][2]string{{"metrics-server:system:auth-delegator", "system:auth-delegator"}, {"system:metrics-server", "system:metrics-server"}} {
		crb := clusterRoleBinding(b[0], b[1], sa)
		crb.Labels = labels
		o.clusterRoleBinding(crb)
	}
	o.service(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("https"), AppProtocol: ptr.To("https")}},
		},
	})
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("https"), Scheme: corev1.URISchemeHTTPS}},
			PeriodSeconds:    10,
			FailureThreshold: 3,
			TimeoutSeconds:   1, // the API's defaults, set: a number left 0 would differ from the stored one
			SuccessThreshold: 1,
		}
	}
	// Ready once it holds two scrapes (--metric-resolution apart): asked from the start, every
	// 5 s, where upstream waits 20 s and asks every 10 (apply waits for it: about 10 s less).
	ready := probe("/readyz")
	ready.PeriodSeconds = 5
	o.deployment(&appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr.To(intstr.FromInt32(0))}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: name,
					PriorityClassName:  "system-cluster-critical",
					NodeSelector:       map[string]string{"kubernetes.io/os": "linux"},
					Tolerations:        []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					Containers: []corev1.Container{{
						Name:            name,
						Image:           in.Image,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Command:         []string{"/metrics-server"},
						Args: []string{
							"--cert-dir=/tmp",
							"--secure-port=10250",
							"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
							"--kubelet-use-node-status-port",
							"--metric-resolution=15s",
							"--kubelet-certificate-authority=" + metricsServerCA + "/ca.crt",
						},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("200Mi"),
						}},
						Ports:           []corev1.ContainerPort{{Name: "https", ContainerPort: 10250, Protocol: corev1.ProtocolTCP}},
						ReadinessProbe:  ready,
						LivenessProbe:   probe("/livez"),
						SecurityContext: restrictedUser(1000),
						VolumeMounts: []corev1.VolumeMount{
							{Name: "tmp-dir", MountPath: "/tmp"},
							{Name: "cluster-ca", MountPath: metricsServerCA, ReadOnly: true},
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "tmp-dir", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
						{Name: "cluster-ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}}},
					},
				},
			},
		},
	})
	return o, nil
}

// removeMetricsServer deletes metrics-server's objects, the APIService first (so the API stops
// sending metrics.k8s.io to a server that goes); each that was there is a Deleted change.
func removeMetricsServer(ctx context.Context, c kubernetes.Interface, dyn dynamic.Interface) ([]Change, error) {
	const ns, name = "kube-system", MetricsServerName
	del := metav1.DeleteOptions{}
	return removeAll([]removal{
		{"APIService", "", metricsAPIService, func() error { return dyn.Resource(apiServiceGVR).Delete(ctx, metricsAPIService, del) }},
		{"Deployment", ns, name, func() error { return c.AppsV1().Deployments(ns).Delete(ctx, name, del) }},
		{"Service", ns, name, func() error { return c.CoreV1().Services(ns).Delete(ctx, name, del) }},
		{"ClusterRoleBinding", "", "system:metrics-server", func() error {
			return c.RbacV1().ClusterRoleBindings().Delete(ctx, "system:metrics-server", del)
		}},
		{"ClusterRoleBinding", "", "metrics-server:system:auth-delegator", func() error {
			return c.RbacV1().ClusterRoleBindings().Delete(ctx, "metrics-server:system:auth-delegator", del)
		}},
		{"RoleBinding", ns, "metrics-server-auth-reader", func() error {
			return c.RbacV1().RoleBindings(ns).Delete(ctx, "metrics-server-auth-reader", del)
		}},
		{"ClusterRole", "", "system:metrics-server", func() error { return c.RbacV1().ClusterRoles().Delete(ctx, "system:metrics-server", del) }},
		{"ClusterRole", "", "system:aggregated-metrics-reader", func() error {
			return c.RbacV1().ClusterRoles().Delete(ctx, "system:aggregated-metrics-reader", del)
		}},
		{"ServiceAccount", ns, name, func() error { return c.CoreV1().ServiceAccounts(ns).Delete(ctx, name, del) }},
	})
}

// restrictedUser is the security context of a container that Pod Security's restricted profile
// admits: user uid (not root), a read-only root filesystem, no privilege escalation, the
// runtime's seccomp profile and no capabilities.
func restrictedUser(uid int64) *corev1.SecurityContext {
	return &corev1.SecurityContext{
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		RunAsUser:                ptr.To(uid),
		AllowPrivilegeEscalation: ptr.To(false),
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}
