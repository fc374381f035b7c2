package kube

import (
	"cmp"
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Names kubeadm v1.36 gives the groups and RBAC objects kforge creates
// (cmd/kubeadm/app/constants/constants.go).
const (
	NodesGroup                  = "system:nodes"
	NodeBootstrapTokenAuthGroup = "system:bootstrappers:kubeadm:default-node-token"
	ClusterAdminsGroup          = "kubeadm:cluster-admins"

	NodesKubeadmConfigRole      = "kubeadm:nodes-kubeadm-config"
	KubeletConfigRole           = "kubeadm:kubelet-config"
	KubeletBootstrapBinding     = "kubeadm:kubelet-bootstrap"
	NodeAutoApproveBootstrap    = "kubeadm:node-autoapprove-bootstrap"
	NodeAutoApproveRotation     = "kubeadm:node-autoapprove-certificate-rotation"
	GetNodesRole                = "kubeadm:get-nodes"
	APIServerKubeletClient      = "kubeadm:apiserver-kubelet-client"
	ClusterInfoRole             = "kubeadm:bootstrap-signer-clusterinfo"
	NodeProxierBinding          = "kubeadm:node-proxier"
	nodeBootstrapperClusterRole = "system:node-bootstrapper"
	csrNodeClientClusterRole    = "system:certificates.k8s.io:certificatesigningrequests:nodeclient"
	csrSelfNodeClusterRole      = "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"
	kubeletAPIAdminClusterRole  = "system:kubelet-api-admin"
	nodeProxierClusterRole      = "system:node-proxier"
	apiserverKubeletClientUser  = "kube-apiserver-kubelet-client"
	anonymousUser               = "system:anonymous"
	schedulerUser               = "system:kube-scheduler"
)

// VIPRole is kforge's Role and RoleBinding in kube-system that let kforge-vip (as the
// scheduler's identity) hold the control plane's virtual IP's Lease.
const VIPRole = "kforge:vip"

func group(name string) rbacv1.Subject { return rbacv1.Subject{Kind: rbacv1.GroupKind, Name: name} }
func user(name string) rbacv1.Subject  { return rbacv1.Subject{Kind: rbacv1.UserKind, Name: name} }
func serviceAccount(ns, name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}
}

// getConfigMapRole is a Role allowing get on one ConfigMap, as kubeadm writes them.
func getConfigMapRole(ns, name, configMap string) *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Rules: []rbacv1.PolicyRule{{
			Verbs:         []string{"get"},
			APIGroups:     []string{""},
			Resources:     []string{"configmaps"},
			ResourceNames: []string{configMap},
		}},
	}
}

func roleBinding(ns, name, role string, subjects ...rbacv1.Subject) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
		Subjects:   subjects,
	}
}

func clusterRoleBinding(name, clusterRole string, subjects ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   subjects,
	}
}

// objects is an ordered list of typed objects to ensure. Each ensure call is appended as a
// closure so one list can mix kinds.
type objects []func(context.Context, kubernetes.Interface) (Change, error)

func (o *objects) role(r *rbacv1.Role) {
	*o = append(*o, func(ctx context.Context, c kubernetes.Interface) (Change, error) {
		return ensure(ctx, c.RbacV1().Roles(r.Namespace), "Role", r)
	})
}

func (o *objects) roleBinding(b *rbacv1.RoleBinding) {
	*o = append(*o, func(ctx context.Context, c kubernetes.Interface) (Change, error) {
		return ensure(ctx, c.RbacV1().RoleBindings(b.Namespace), "RoleBinding", b)
	})
}

func (o *objects) clusterRole(r *rbacv1.ClusterRole) {
	*o = append(*o, func(ctx context.Context, c kubernetes.Interface) (Change, error) {
		return ensure(ctx, c.RbacV1().ClusterRoles(), "ClusterRole", r)
	})
}

func (o *objects) clusterRoleBinding(b *rbacv1.ClusterRoleBinding) {
	*o = append(*o, func(ctx context.Context, c kubernetes.Interface) (Change, error) {
		return ensure(ctx, c.RbacV1().ClusterRoleBindings(), "ClusterRoleBinding", b)
	})
}

// apply ensures every object in order and stops at the first error. A Namespace it creates
// that is not there right after was created by a server-side dry run (kforge plan), which
// stores nothing: the objects in it cannot be dry-run (their namespace is not found), and are
// reported as the creates they would be.
func (o objects) apply(ctx context.Context, c kubernetes.Interface) ([]Change, error) {
	var out []Change
	dryRunNamespaces := map[string]bool{}
	for _, f := range o {
		ch, err := f(ctx, c)
		if err != nil && dryRunNamespaces[ch.Namespace] && apierrors.IsNotFound(err) {
			ch.Action, err = Created, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, ch)
		if ch.Kind == "Namespace" && ch.Action == Created {
			if _, err := c.CoreV1().Namespaces().Get(ctx, ch.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				dryRunNamespaces[ch.Name] = true
			}
		}
	}
	return out, nil
}

// EnsureClusterAdmins creates the ClusterRoleBinding kubeadm:cluster-admins (group
// kubeadm:cluster-admins → cluster-admin) that gives admin.conf its rights. As with `kubeadm
// init`, it must be called with a client authenticated as system:masters (super-admin.conf):
// admin.conf itself can do nothing before the binding exists.
func EnsureClusterAdmins(ctx context.Context, superAdmin kubernetes.Interface) ([]Change, error) {
	var o objects
	o.clusterRoleBinding(clusterRoleBinding(ClusterAdminsGroup, "cluster-admin", group(ClusterAdminsGroup)))
	return o.apply(ctx, superAdmin)
}

// WaitAdminsAuthorized waits, after EnsureClusterAdmins created the binding, until the API
// server allows admin (a client of admin.conf) what kforge does next with it (get ConfigMaps in
// kube-system): each API server's RBAC authorizer learns of a new ClusterRoleBinding through its
// informer, a moment after the create returned (187f0a9's CI: "forbidden" 35 ms after it, under
// load). kubeadm init's next calls retry every error instead.
func WaitAdminsAuthorized(ctx context.Context, admin kubernetes.Interface, timeout time.Duration) error {
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "kube-system", Verb: "get", Resource: "configmaps"}}}
	start := time.Now()
	last := "not asked yet"
	for {
		r, err := admin.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		switch {
		case err != nil:
			last = err.Error()
		case r.Status.Allowed:
			return nil
		default:
			last = "not allowed: " + cmp.Or(r.Status.Reason, "no reason given")
		}
		if time.Since(start) >= timeout {
			return fmt.Errorf("ClusterRoleBinding %s: admin.conf's group still has no rights after %s (%s)", ClusterAdminsGroup, timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func addObject[T object](o *objects, kind string, client func(kubernetes.Interface) typedClient[T], obj T) {
	*o = append(*o, func(ctx context.Context, c kubernetes.Interface) (Change, error) {
		return ensure(ctx, client(c), kind, obj)
	})
}

func (o *objects) configMap(cm *corev1.ConfigMap) {
	addObject(o, "ConfigMap", func(c kubernetes.Interface) typedClient[*corev1.ConfigMap] {
		return c.CoreV1().ConfigMaps(cm.Namespace)
	}, cm)
}

// configMapRetain creates cm when missing and never changes an existing one.
func (o *objects) configMapRetain(cm *corev1.ConfigMap) {
	*o = append(*o, func(ctx context.Context, c kubernetes.Interface) (Change, error) {
		return ensureRetain(ctx, c.CoreV1().ConfigMaps(cm.Namespace), "ConfigMap", cm)
	})
}

func (o *objects) secret(s *corev1.Secret) {
	addObject(o, "Secret", func(c kubernetes.Interface) typedClient[*corev1.Secret] { return c.CoreV1().Secrets(s.Namespace) }, s)
}

func (o *objects) serviceAccount(sa *corev1.ServiceAccount) {
	addObject(o, "ServiceAccount", func(c kubernetes.Interface) typedClient[*corev1.ServiceAccount] {
		return c.CoreV1().ServiceAccounts(sa.Namespace)
	}, sa)
}

func (o *objects) service(s *corev1.Service) {
	addObject(o, "Service", func(c kubernetes.Interface) typedClient[*corev1.Service] { return c.CoreV1().Services(s.Namespace) }, s)
}

func (o *objects) namespace(n *corev1.Namespace) {
	addObject(o, "Namespace", func(c kubernetes.Interface) typedClient[*corev1.Namespace] { return c.CoreV1().Namespaces() }, n)
}

func (o *objects) deployment(d *appsv1.Deployment) {
	addObject(o, "Deployment", func(c kubernetes.Interface) typedClient[*appsv1.Deployment] {
		return c.AppsV1().Deployments(d.Namespace)
	}, d)
}

func (o *objects) storageClass(sc *storagev1.StorageClass) {
	addObject(o, "StorageClass", func(c kubernetes.Interface) typedClient[*storagev1.StorageClass] {
		return c.StorageV1().StorageClasses()
	}, sc)
}

func (o *objects) daemonSet(d *appsv1.DaemonSet) {
	addObject(o, "DaemonSet", func(c kubernetes.Interface) typedClient[*appsv1.DaemonSet] { return c.AppsV1().DaemonSets(d.Namespace) }, d)
}
