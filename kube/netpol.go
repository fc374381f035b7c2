package kube

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"net"
	"path"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// NetworkPolicyInput is what NetworkPolicies deploys.
type NetworkPolicyInput struct {
	// Enforce runs the agent; false removes what an earlier run installed.
	Enforce bool
	Image   string
	// Endpoint is the control-plane endpoint as host:port: the agent runs in the host network
	// and must not depend on kube-proxy's Service rules to reach the API (as flannel).
	Endpoint string
	// Admin enforces AdminNetworkPolicies and BaselineAdminNetworkPolicies too (their CRDs are
	// AdminNetworkPolicyCRDs, applied apart): the agent then also watches nodes and those kinds.
	Admin bool
}

// NetworkPolicyAPIVersion is the sigs.k8s.io/network-policy-api whose CRDs
// (config/crd/experimental) kforge installs for AdminNetworkPolicy: the one kube-network-policies
// v0.8.0 is built with (policy.networking.k8s.io/v1alpha1).
const NetworkPolicyAPIVersion = "v0.1.6-0.20250401132235-45061d10895e"

//go:embed files/network-policy-api/*.yaml
var networkPolicyAPI embed.FS

// AdminNetworkPolicyCRDs are the CustomResourceDefinitions of AdminNetworkPolicy and
// BaselineAdminNetworkPolicy, as network-policy-api NetworkPolicyAPIVersion ships them.
func AdminNetworkPolicyCRDs() []Manifest {
	names, _ := fs.Glob(networkPolicyAPI, "files/network-policy-api/*.yaml")
	var out []Manifest
	for _, n := range names {
		data, _ := networkPolicyAPI.ReadFile(n)
		out = append(out, Manifest{Path: "network-policy-api " + NetworkPolicyAPIVersion + " " + path.Base(n), Data: data})
	}
	return out
}

// NetworkPolicyName names the agent's DaemonSet, ServiceAccount, ClusterRole and
// ClusterRoleBinding, all kube-system's or cluster-wide.
const NetworkPolicyName = "kube-network-policies"

// NetworkPolicyQueue is the netfilter queue the agent takes packets from (its install.yaml's
// choice, clear of the default 0 that others use).
const NetworkPolicyQueue = 98

// NetworkPolicyTable is the nftables table (inet family) the agent keeps its rules in.
const NetworkPolicyTable = "kube-network-policies"

// NetworkPolicies runs SIG Network's NetworkPolicy agent (sigs.k8s.io/kube-network-policies)
// on every node as its install.yaml does: a privileged DaemonSet in the host network, with
// its ServiceAccount, ClusterRole (pods, namespaces and NetworkPolicies: list and watch) and
// ClusterRoleBinding, and the NRI socket, through which containerd tells it a new pod's
// address before the API does. With in.Enforce false it deletes them instead; the agent's
// pods remove their nftables table as they stop.
func NetworkPolicies(ctx context.Context, c kubernetes.Interface, in NetworkPolicyInput) ([]Change, error) {
	if !in.Enforce {
		return removeNetworkPolicies(ctx, c)
	}
	o, err := networkPolicyObjects(in)
	if err != nil {
		return nil, err
	}
	return o.apply(ctx, c)
}

func networkPolicyObjects(in NetworkPolicyInput) (objects, error) {
	if in.Image == "" {
		return nil, fmt.Errorf("kube-network-policies: image is required")
	}
	host, port, err := net.SplitHostPort(in.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("kube-network-policies: control-plane endpoint %q: want host:port", in.Endpoint)
	}
	const ns, name = "kube-system", NetworkPolicyName
	labels := map[string]string{"app": name, "tier": "node", "k8s-app": name}
	core := []string{"pods", "namespaces"}
	args := []string{"--hostname-override=$(MY_NODE_NAME)", "--v=2", fmt.Sprintf("--nfqueue-id=%d", NetworkPolicyQueue)}
	rules := []rbacv1.PolicyRule{{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"list", "watch"}}}
	if in.Admin { // as the agent's install-anp.yaml
		core = append(core, "nodes")
		args = append(args, "--admin-network-policy", "--baseline-admin-network-policy")
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{"policy.networking.k8s.io"}, Resources: []string{"adminnetworkpolicies", "baselineadminnetworkpolicies"}, Verbs: []string{"list", "watch"}})
	}
	var o objects
	o.serviceAccount(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
	o.clusterRole(&rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      append([]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: core, Verbs: []string{"list", "watch"}}}, rules...),
	})
	o.clusterRoleBinding(clusterRoleBinding(name, name, serviceAccount(ns, name)))
	o.daemonSet(&appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork:        true,
					DNSPolicy:          corev1.DNSClusterFirstWithHostNet,
					NodeSelector:       map[string]string{"kubernetes.io/os": "linux"},
					PriorityClassName:  "system-node-critical",
					Tolerations:        []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					ServiceAccountName: name,
					Containers: []corev1.Container{{
						Name:            name,
						Image:           in.Image,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Command:         []string{"/bin/netpol"},
						Args:            args,
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("50Mi"),
						}},
						SecurityContext: &corev1.SecurityContext{
							Privileged:   ptr.To(true),
							Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}},
						},
						Env: []corev1.EnvVar{
							{Name: "MY_NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
							{Name: "KUBERNETES_SERVICE_HOST", Value: host},
							{Name: "KUBERNETES_SERVICE_PORT", Value: port},
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "nri-plugin", MountPath: "/var/run/nri"}},
					}},
					Volumes: []corev1.Volume{hostPathVolume("nri-plugin", "/var/run/nri", "")},
				},
			},
		},
	})
	return o, nil
}

// removeNetworkPolicies deletes the agent's objects, the DaemonSet first; each that was there
// is a Deleted change.
func removeNetworkPolicies(ctx context.Context, c kubernetes.Interface) ([]Change, error) {
	const ns, name = "kube-system", NetworkPolicyName
	del := metav1.DeleteOptions{}
	return removeAll([]removal{
		{"DaemonSet", ns, name, func() error { return c.AppsV1().DaemonSets(ns).Delete(ctx, name, del) }},
		{"ClusterRoleBinding", "", name, func() error { return c.RbacV1().ClusterRoleBindings().Delete(ctx, name, del) }},
		{"ClusterRole", "", name, func() error { return c.RbacV1().ClusterRoles().Delete(ctx, name, del) }},
		{"ServiceAccount", ns, name, func() error { return c.CoreV1().ServiceAccounts(ns).Delete(ctx, name, del) }},
	})
}
