package pki

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

func TestKubeconfigsNameClusterUserAndContextLikeKubeadm(t *testing.T) {
	reqs, _ := Requests(testParams(), Hosts{Masters: testMasters[:1]})
	ca, _ := Issue(reqs[0], nil, ECDSAP256, t0, time.Hour, seeded(11))
	r, _ := Lookup("kubelet.conf")
	kr, _ := r.Resolve(testParams(), testMasters[0])
	client, err := Issue(kr, ca, ECDSAP256, t0, time.Hour, seeded(12))
	if err != nil {
		t.Fatal(err)
	}
	data, err := Kubeconfig("lab", "https://198.51.100.10:6443", EncodeCert(ca.Cert), client)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CurrentContext != "system:node:m1@lab" || cfg.Contexts[cfg.CurrentContext].AuthInfo != "system:node:m1" || cfg.Clusters["lab"].Server != "https://198.51.100.10:6443" {
		t.Errorf("kubeconfig: %+v", cfg)
	}
	if c, err := ParseCert(cfg.AuthInfos["system:node:m1"].ClientCertificateData); err != nil || !c.Equal(client.Cert) {
		t.Errorf("client certificate: %v", err)
	}
	if k, err := ParseKey(cfg.AuthInfos["system:node:m1"].ClientKeyData); err != nil || !samePublicKey(client.Cert, k) {
		t.Errorf("client key: %v", err)
	}
	if c, err := ParseCert(cfg.Clusters["lab"].CertificateAuthorityData); err != nil || !c.Equal(ca.Cert) {
		t.Errorf("cluster CA: %v", err)
	}

	boot, err := BootstrapKubeconfig("lab", "https://198.51.100.10:6443", EncodeCert(ca.Cert), "abcdef.0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	bc, err := clientcmd.Load(boot)
	if err != nil || bc.AuthInfos[BootstrapTokenUser].Token != "abcdef.0123456789abcdef" || bc.CurrentContext != BootstrapTokenUser+"@lab" {
		t.Errorf("bootstrap kubeconfig: %v %+v", err, bc)
	}
	if _, err := BootstrapKubeconfig("lab", "https://x:6443", EncodeCert(ca.Cert), ""); err == nil || strings.Contains(err.Error(), "abcdef") {
		t.Errorf("empty token: %v", err)
	}
}
