package templates

import (
	"crypto/x509"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
)

// externalEtcdCluster is haCluster with two masters behind the node-local proxy and an etcd
// group of three hosts.
func externalEtcdCluster() *inventory.Cluster {
	c := haCluster()
	c.ControlPlaneEndpoint = ""
	c.APIProxy.Port = 6444
	c.Masters = c.Masters[:2]
	c.Etcd = []inventory.Host{{Name: "e1", Address: "198.51.100.31"}, {Name: "e2", Address: "198.51.100.32"}, {Name: "e3", Address: "198.51.100.33"}}
	c.Bundle = "/bundle" // scheduled snapshots on
	c.EtcdSnapshots.Every, c.EtcdSnapshots.Keep = inventory.Duration(time.Hour), 3
	return c
}

// TestExternalEtcdTree: with an etcd group, each etcd host gets its member's static pod (every
// member in --initial-cluster), its serving, peer and health-check certificates, the etcd CA's
// certificate and no CA key, and a standalone kubelet (no kubeconfig, loopback only); the
// masters get no etcd member, no etcd CA key and no member certificates, and their API servers
// list every member.
func TestExternalEtcdTree(t *testing.T) {
	c := externalEtcdCluster()
	trees, set := renderTree(t, c)
	if len(trees) != 6 {
		t.Fatalf("%d hosts rendered, want 2 masters, 1 worker, 3 etcd hosts", len(trees))
	}
	pod := func(data []byte) *corev1.Pod {
		t.Helper()
		var p corev1.Pod
		if err := yaml.Unmarshal(data, &p); err != nil {
			t.Fatal(err)
		}
		return &p
	}
	etcdManifest := hostpath.ManifestsDir + "/etcd.yaml"
	for _, h := range trees {
		files := filesByPath(h)
		switch h.Node.Role {
		case inventory.RoleMaster:
			for _, p := range []string{etcdManifest, pkiPath("etcd/ca.key"), pkiPath("etcd/server.crt"), pkiPath("etcd/peer.key"), pkiPath("etcd/healthcheck-client.key"), hostpath.EtcdSnapshotConfig} {
				if _, ok := files[p]; ok {
					t.Errorf("master %s has %s", h.Node.Name, p)
				}
			}
			for _, p := range []string{pkiPath("etcd/ca.crt"), pkiPath("apiserver-etcd-client.crt"), pkiPath("apiserver-etcd-client.key")} {
				if _, ok := files[p]; !ok {
					t.Errorf("master %s lacks %s", h.Node.Name, p)
				}
			}
			api := strings.Join(pod(files[hostpath.ManifestsDir+"/kube-apiserver.yaml"]).Spec.Containers[0].Command, " ")
			if want := "--etcd-servers=https://198.51.100.31:2379,https://198.51.100.32:2379,https://198.51.100.33:2379"; !strings.Contains(api, want) {
				t.Errorf("master %s's kube-apiserver: want %s in\n%s", h.Node.Name, want, api)
			}
		case inventory.RoleEtcd:
			if _, ok := files[pkiPath("etcd/ca.key")]; ok {
				t.Errorf("etcd host %s has the etcd CA's key", h.Node.Name)
			}
			for p := range files {
				if strings.HasPrefix(p, hostpath.ManifestsDir+"/") && p != etcdManifest || p == pkiPath("ca.crt") || p == pkiPath("apiserver-etcd-client.key") ||
					p == hostpath.ServiceRouteUnitPath || p == hostpath.APIProxyUnitPath || p == hostpath.KubeletServerKey || strings.HasPrefix(p, hostpath.KubernetesDir+"/") && strings.HasSuffix(p, ".conf") {
					t.Errorf("etcd host %s has %s", h.Node.Name, p)
				}
			}
			cmd := strings.Join(pod(files[etcdManifest]).Spec.Containers[0].Command, " ")
			ip := h.Node.NodeIP()
			for _, want := range []string{"--name=" + h.Node.Name, "--initial-cluster=e1=https://198.51.100.31:2380,e2=https://198.51.100.32:2380,e3=https://198.51.100.33:2380",
				"--advertise-client-urls=https://" + ip + ":2379", "--listen-peer-urls=https://" + ip + ":2380"} {
				if !strings.Contains(cmd, want) {
					t.Errorf("etcd host %s's etcd: want %s in\n%s", h.Node.Name, want, cmd)
				}
			}
			for _, base := range []string{"etcd/server", "etcd/peer"} {
				cert, err := pki.ParseCert(files[pkiPath(base+".crt")])
				if err != nil {
					t.Fatalf("%s %s: %v", h.Node.Name, base, err)
				}
				if !slices.ContainsFunc(cert.IPAddresses, func(a net.IP) bool { return a.String() == ip }) || cert.CheckSignatureFrom(set.CAs[pki.EtcdCA].Cert) != nil {
					t.Errorf("%s's %s: IPs %v, signed by the etcd CA: %v; want %s", h.Node.Name, base, cert.IPAddresses, cert.CheckSignatureFrom(set.CAs[pki.EtcdCA].Cert), ip)
				}
				if !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
					t.Errorf("%s's %s is no serving certificate", h.Node.Name, base)
				}
			}
			cfg := string(files[hostpath.KubeletConfigPath])
			for _, want := range []string{"address: 127.0.0.1", "mode: AlwaysAllow", "staticPodPath: " + hostpath.ManifestsDir} {
				if !strings.Contains(cfg, want) {
					t.Errorf("etcd host %s's kubelet config lacks %q:\n%s", h.Node.Name, want, cfg)
				}
			}
			if d := string(files[hostpath.KubeletDropInPath]); strings.Contains(d, "--kubeconfig") || !strings.Contains(d, "KUBELET_KUBECONFIG_ARGS=\"") {
				t.Errorf("etcd host %s's kubelet drop-in names a kubeconfig:\n%s", h.Node.Name, d)
			}
			if snap := string(files[hostpath.EtcdSnapshotConfig]); !strings.Contains(snap, pkiPath("etcd/healthcheck-client.key")) || !strings.Contains(snap, `"member": "`+h.Node.Name+`"`) {
				t.Errorf("etcd host %s's scheduled snapshots: want its member, through the health-check client:\n%s", h.Node.Name, snap)
			}
		}
	}
}
