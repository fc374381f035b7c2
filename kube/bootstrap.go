package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
)

// BootstrapToken is a kubeadm bootstrap token. Secret is a credential: it is stored in the
// token's Secret and nowhere else, and never appears in an error.
type BootstrapToken struct {
	ID     string // 6 characters [a-z0-9]
	Secret string // 16 characters [a-z0-9]
	// TTL sets the expiration to Now+TTL; 0 means the token never expires.
	TTL         time.Duration
	Description string
	// Usages default to signing and authentication; Groups to
	// system:bootstrappers:kubeadm:default-node-token (kubeadm's defaults).
	Usages []string
	Groups []string
}

// String is the token's ID only: the secret never reaches a log through %v.
func (t BootstrapToken) String() string { return t.ID + ".<secret>" }

// BootstrapInput is what Bootstrap creates.
type BootstrapInput struct {
	Token BootstrapToken
	// Now is the time expirations are computed from (no clock is read here).
	Now time.Time
	// Server is the API server URL published in cluster-info (https://endpoint).
	Server string
	// CACert is the cluster CA certificate (PEM) published in cluster-info.
	CACert []byte
	// VIPLease, when set, is the Lease in kube-system kforge-vip holds the control plane's
	// virtual IP with, as the scheduler's identity (templates.VIPIdentity): the Role and
	// RoleBinding kforge:vip allow that identity this one Lease.
	VIPLease string
}

// Bootstrap does what `kubeadm init phase bootstrap-token` does: the bootstrap token Secret
// kube-system/bootstrap-token-<id>, the RBAC that lets bootstrap tokens get nodes
// (kubeadm:get-nodes), post CSRs (kubeadm:kubelet-bootstrap) and have them approved
// (kubeadm:node-autoapprove-bootstrap), lets nodes rotate their certificates
// (kubeadm:node-autoapprove-certificate-rotation), lets the API server's kubelet client reach
// kubelets (kubeadm:apiserver-kubelet-client), and the cluster-info ConfigMap in kube-public
// with the Role and RoleBinding that let system:anonymous read it.
//
// A token Secret that exists with the same secret, usages and groups and an expiration at least
// TTL/2 away (or none, when TTL is 0) is left alone; otherwise it is updated with Now+TTL.
func Bootstrap(ctx context.Context, c kubernetes.Interface, in BootstrapInput) ([]Change, error) {
	o, err := bootstrapObjects(ctx, c, in)
	if err != nil {
		return nil, err
	}
	return o.apply(ctx, c)
}

// TokenSecret is the Secret kubeadm stores a bootstrap token in (BootstrapTokenToSecret).
func TokenSecret(t BootstrapToken, now time.Time) (*corev1.Secret, error) {
	if !bootstraputil.IsValidBootstrapToken(t.ID + "." + t.Secret) {
		// Name only the ID: the secret part is a credential.
		return nil, fmt.Errorf("bootstrap token %q: want an ID of 6 and a secret of 16 characters [a-z0-9]", t.ID+".<secret>")
	}
	usages := t.Usages
	if usages == nil {
		usages = bootstrapapi.KnownTokenUsages
	}
	groups := t.Groups
	if groups == nil {
		groups = []string{NodeBootstrapTokenAuthGroup}
	}
	data := map[string][]byte{
		bootstrapapi.BootstrapTokenIDKey:     []byte(t.ID),
		bootstrapapi.BootstrapTokenSecretKey: []byte(t.Secret),
	}
	if t.Description != "" {
		data[bootstrapapi.BootstrapTokenDescriptionKey] = []byte(t.Description)
	}
	if t.TTL > 0 {
		data[bootstrapapi.BootstrapTokenExpirationKey] = []byte(now.Add(t.TTL).UTC().Format(time.RFC3339))
	}
	for _, u := range usages {
		data[bootstrapapi.BootstrapTokenUsagePrefix+u] = []byte("true")
	}
	if len(groups) > 0 {
		data[bootstrapapi.BootstrapTokenExtraGroupsKey] = []byte(strings.Join(groups, ","))
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: bootstraputil.BootstrapTokenSecretName(t.ID), Namespace: metav1.NamespaceSystem},
		Type:       bootstrapapi.SecretTypeBootstrapToken,
		Data:       data,
	}, nil
}

// ClusterInfoKubeconfig is the kubeconfig kubeadm publishes in kube-public/cluster-info: one
// cluster named "" with the server and CA data, nothing else.
func ClusterInfoKubeconfig(server string, caCert []byte) ([]byte, error) {
	if server == "" || len(caCert) == 0 {
		return nil, fmt.Errorf("cluster-info: need the API server URL and the CA certificate")
	}
	return clientcmd.Write(clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{"": {Server: server, CertificateAuthorityData: caCert}},
	})
}

func bootstrapObjects(ctx context.Context, c kubernetes.Interface, in BootstrapInput) (objects, error) {
	sec, err := TokenSecret(in.Token, in.Now)
	if err != nil {
		return nil, err
	}
	if c != nil {
		keep, err := tokenStillGood(ctx, c, sec, in.Token.TTL, in.Now)
		if err != nil {
			return nil, err
		}
		if keep != nil {
			sec.Data[bootstrapapi.BootstrapTokenExpirationKey] = keep
		}
	}
	kubeconfig, err := ClusterInfoKubeconfig(in.Server, in.CACert)
	if err != nil {
		return nil, err
	}
	var o objects
	o.secret(sec)
	o.clusterRole(&rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: GetNodesRole},
		Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"nodes"}}},
	})
	o.clusterRoleBinding(clusterRoleBinding(GetNodesRole, GetNodesRole, group(NodeBootstrapTokenAuthGroup)))
	o.clusterRoleBinding(clusterRoleBinding(KubeletBootstrapBinding, nodeBootstrapperClusterRole, group(NodeBootstrapTokenAuthGroup)))
	o.clusterRoleBinding(clusterRoleBinding(NodeAutoApproveBootstrap, csrNodeClientClusterRole, group(NodeBootstrapTokenAuthGroup)))
	o.clusterRoleBinding(clusterRoleBinding(NodeAutoApproveRotation, csrSelfNodeClusterRole, group(NodesGroup)))
	o.clusterRoleBinding(clusterRoleBinding(APIServerKubeletClient, kubeletAPIAdminClusterRole, user(apiserverKubeletClientUser)))
	o.configMap(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: bootstrapapi.ConfigMapClusterInfo, Namespace: metav1.NamespacePublic},
		Data:       map[string]string{bootstrapapi.KubeConfigKey: string(kubeconfig)},
	})
	o.role(getConfigMapRole(metav1.NamespacePublic, ClusterInfoRole, bootstrapapi.ConfigMapClusterInfo))
	o.roleBinding(roleBinding(metav1.NamespacePublic, ClusterInfoRole, ClusterInfoRole, user(anonymousUser)))
	if in.VIPLease != "" {
		o.role(&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: VIPRole, Namespace: metav1.NamespaceSystem},
			Rules: []rbacv1.PolicyRule{
				// create cannot be limited to a name; the rest can.
				{Verbs: []string{"create"}, APIGroups: []string{coordinationv1.GroupName}, Resources: []string{"leases"}},
				{Verbs: []string{"get", "update", "patch"}, APIGroups: []string{coordinationv1.GroupName}, Resources: []string{"leases"}, ResourceNames: []string{in.VIPLease}},
			},
		})
		o.roleBinding(roleBinding(metav1.NamespaceSystem, VIPRole, VIPRole, user(schedulerUser)))
	}
	return o, nil
}

// tokenStillGood returns the stored expiration of the token's Secret when everything else
// matches want and it is far enough away (at least half the TTL from now; never-expiring
// tokens always are), so an unchanged token is not rewritten on every run.
func tokenStillGood(ctx context.Context, c kubernetes.Interface, want *corev1.Secret, ttl time.Duration, now time.Time) ([]byte, error) {
	have, err := c.CoreV1().Secrets(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read bootstrap token secret %s/%s: %w", want.Namespace, want.Name, err)
	}
	exp, hasExp := have.Data[bootstrapapi.BootstrapTokenExpirationKey]
	if ttl <= 0 || !hasExp {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339, string(exp))
	if err != nil || t.Sub(now) < ttl/2 {
		return nil, nil
	}
	for k, v := range want.Data {
		if k == bootstrapapi.BootstrapTokenExpirationKey {
			continue
		}
		if !slices.Equal(have.Data[k], v) {
			return nil, nil
		}
	}
	return exp, nil
}
