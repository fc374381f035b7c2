// Package kube is everything `kforge apply` does through the Kubernetes API (client-go): wait
// for the API server, upload kubeadm's cluster configuration, mark nodes, bootstrap tokens and
// their RBAC, cluster-info, the CoreDNS, kube-proxy and flannel addons, server-side apply of
// user manifests, and wait for the cluster to be ready.
//
// Every function is a plain, idempotent function over kubernetes.Interface (or a dynamic client
// and RESTMapper) and a small typed input: it creates what is missing, leaves alone what is
// already right and updates what differs, never fails on "already exists", and returns the
// Changes it made, so a second run reports nothing but Unchanged. Objects are typed k8s.io/api
// values matching what kubeadm v1.36 creates (names, rules, subjects, manifests), which kubeadm
// v1.35 and v1.37 create alike but for the images; where kforge or a minor differs, DIFFERENCES.md
// says so.
package kube
