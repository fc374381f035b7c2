package tasks

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/remote/remotetest"
	"github.com/kforge/kforge/templates"
)

// TestReadHostCertsSendsNoKey runs the command certs check and renew send to hosts in a real
// shell, on a kubeconfig with an embedded key and a kubelet store file (certificate and key):
// both certificates come back, a missing file is absent, and no key leaves the "host".
func TestReadHostCertsSendsNoKey(t *testing.T) {
	dir := t.TempDir()
	set, _, err := pki.Ensure(pki.Options{Dir: filepath.Join(dir, "pki"), Params: testPKIParams(), Masters: []pki.Master{{Name: "m1", IP: "10.0.0.1"}}, Now: time.Now(), Rand: rand.Reader})
	if err != nil {
		t.Fatal(err)
	}
	admin := set.Get("admin.conf", "")
	conf, err := pki.Kubeconfig("c", "https://10.0.0.1:6443", set.TrustPEM(pki.CA), admin)
	if err != nil {
		t.Fatal(err)
	}
	kubelet := set.Get("kubelet.conf", "m1")
	key, _ := pki.EncodeKey(kubelet.Key)
	files := []hostCertFile{
		{Name: "admin.conf", Path: filepath.Join(dir, "admin.conf"), kubeconfig: true},
		{Name: kubeletClient, Path: filepath.Join(dir, "kubelet-client-current.pem")},
		{Name: kubeletServing, Path: filepath.Join(dir, "missing.crt"), optional: true},
	}
	os.WriteFile(files[0].Path, conf, 0o600)
	os.WriteFile(files[1].Path, append(pki.EncodeCert(kubelet.Cert), key...), 0o600)

	h := remotetest.New("m1")
	var sent bytes.Buffer
	h.Handle(func(string) bool { return true }, func(ctx context.Context, c remote.Cmd) error {
		cmd := exec.CommandContext(ctx, "sh", "-c", c.Command)
		cmd.Stdout, cmd.Stderr = &sent, c.Stderr
		err := cmd.Run()
		c.Stdout.Write(sent.Bytes())
		return err
	})
	certs, err := readHostCerts(context.Background(), h, files)
	if err != nil {
		t.Fatal(err)
	}
	if c := certs.first(files[0].Path); c == nil || !c.Equal(admin.Cert) {
		t.Errorf("admin.conf's client certificate: %v", c)
	}
	if c := certs.first(files[1].Path); c == nil || !c.Equal(kubelet.Cert) {
		t.Errorf("kubelet store certificate: %v", c)
	}
	if _, ok := certs[files[2].Path]; ok || len(certs) != 2 {
		t.Errorf("got %d certificates, want 2 (the missing file absent)", len(certs))
	}
	if s := sent.String(); strings.Contains(s, "PRIVATE KEY") || strings.Contains(s, "client-key-data") {
		t.Errorf("the host sent key material:\n%s", s)
	}
}

func testPKIParams() pki.Params {
	return pki.Params{ClusterName: "c", DNSDomain: "cluster.local", ServiceSubnet: "10.96.0.0/12", KeyAlgorithm: pki.ECDSAP256,
		CertValidity: time.Hour, CAValidity: 24 * time.Hour}
}

// TestRenewSelector: names are kubeadm's, on every master; CAs and unknown names are refused
// with the list; names and --all go alone.
func TestRenewSelector(t *testing.T) {
	sel, err := RenewSelector([]string{"apiserver", "admin.conf"}, false)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{"apiserver@m1": true, "apiserver@m3": true, "admin.conf": true, "etcd-server@m1": false, "apiserver-kubelet-client": false} {
		if sel(key) != want {
			t.Errorf("selects %s: %v, want %v", key, !want, want)
		}
	}
	all, err := RenewSelector(nil, true)
	if err != nil || !all("etcd-peer@m2") {
		t.Errorf("--all: %v", err)
	}
	for _, bad := range [][]string{{"ca"}, {"apiserver.crt"}} {
		if _, err := RenewSelector(bad, false); err == nil || !strings.Contains(err.Error(), "choose from") {
			t.Errorf("%v: %v", bad, err)
		}
	}
	if _, err := RenewSelector(nil, false); err == nil {
		t.Error("neither names nor --all: no error")
	}
	if _, err := RenewSelector([]string{"apiserver"}, true); err == nil {
		t.Error("names and --all: no error")
	}
}

// TestInputsLineIsAllRenewIgnores: two manifests that differ only in the credentials' hash are
// the same to renew; any other difference is not.
func TestInputsLineIsAllRenewIgnores(t *testing.T) {
	a := "metadata:\n  annotations:\n    " + templates.InputsAnnotation + ": aaa\n    other: x\nspec: {}\n"
	b := strings.Replace(a, "aaa", "bbb", 1)
	c := strings.Replace(b, "other: x", "other: y", 1)
	strip := func(s string) string { return string(inputsLine.ReplaceAll([]byte(s), nil)) }
	if strip(a) != strip(b) {
		t.Errorf("hash-only difference seen:\n%s\n%s", strip(a), strip(b))
	}
	if strip(a) == strip(c) {
		t.Error("a difference besides the hash was ignored")
	}
}

// TestCAsFlag: --ca names map to CA names in table order; all is every CA; others are refused.
func TestCAsFlag(t *testing.T) {
	for in, want := range map[string]string{
		"cluster":      "ca",
		"etcd,cluster": "ca,etcd-ca",
		"all":          "ca,front-proxy-ca,etcd-ca",
		"front-proxy":  "front-proxy-ca",
		"etcd, etcd":   "etcd-ca",
	} {
		got, err := CAsFlag(in)
		if err != nil || strings.Join(got, ",") != want {
			t.Errorf("CAsFlag(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	if _, err := CAsFlag("kubelet"); err == nil || !strings.Contains(err.Error(), "cluster, etcd, front-proxy or all") {
		t.Errorf("CAsFlag(kubelet): %v", err)
	}
}

// TestSetKubeconfigCA rewrites the CA data of a kubeconfig that names its certificate files (a
// worker's kubelet.conf), once: the second call changes nothing.
func TestSetKubeconfigCA(t *testing.T) {
	h := remotetest.New("w1")
	conf := "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: b2xk\n    server: https://10.0.0.1:6443\n  name: default-cluster\n" +
		"contexts:\n- context:\n    cluster: default-cluster\n    namespace: default\n    user: default-auth\n  name: default-context\ncurrent-context: default-context\n" +
		"users:\n- name: default-auth\n  user:\n    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem\n    client-key: /var/lib/kubelet/pki/kubelet-client-current.pem\n"
	h.SetFile("/etc/kubernetes/kubelet.conf", []byte(conf), 0o600)
	bundle := []byte("-----BEGIN CERTIFICATE-----\nbmV3\n-----END CERTIFICATE-----\n")
	changed, err := setKubeconfigCA(context.Background(), h, "/etc/kubernetes/kubelet.conf", bundle)
	if err != nil || !changed {
		t.Fatalf("first call: changed %v, %v", changed, err)
	}
	f, _ := h.File("/etc/kubernetes/kubelet.conf")
	s := string(f.Data)
	if !strings.Contains(s, "server: https://10.0.0.1:6443") || !strings.Contains(s, "client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem") || strings.Contains(s, "b2xk") {
		t.Errorf("rewritten kubelet.conf:\n%s", s)
	}
	if changed, err := setKubeconfigCA(context.Background(), h, "/etc/kubernetes/kubelet.conf", bundle); err != nil || changed {
		t.Errorf("second call: changed %v, %v", changed, err)
	}
}

// TestProbeURL: the URLs probeNow asks are those of the static pods' readiness probes, on the
// host's address when a probe names none.
func TestProbeURL(t *testing.T) {
	cp := templates.ControlPlane{ClusterName: "c", NodeName: "m1", AdvertiseAddress: "10.0.0.1", BindPort: 6443, ServiceSubnet: "10.96.0.0/12", EtcdClusterState: "new"}
	for pod, want := range map[string]string{
		"kube-apiserver":          "https://10.0.0.1:6443/readyz",
		"etcd":                    "http://127.0.0.1:2381/readyz",
		"kube-controller-manager": "https://127.0.0.1:10257/healthz",
		"kube-scheduler":          "https://127.0.0.1:10259/readyz",
	} {
		p := cp.StaticPods()[pod+".yaml"]
		if p == nil {
			t.Fatalf("no %s pod", pod)
		}
		if got := probeURL(p.Spec.Containers[0], "10.0.0.9"); got != want {
			t.Errorf("%s: %s, want %s", pod, got, want)
		}
	}
}

// TestRestartAPIServerScript runs the script in a real shell against a stand-in ctr: it kills
// the kube-apiserver container of any image repository, and nothing else.
func TestRestartAPIServerScript(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "killed")
	ctr := `#!/bin/sh
case "$*" in
"-n k8s.io containers ls") printf '%s\n' 'CONTAINER    IMAGE                                              RUNTIME' \
  'a1           registry.k8s.io/kube-apiserver:v1.36.3             io.containerd.runc.v2' \
  'b2           registry.k8s.io/kube-controller-manager:v1.36.3    io.containerd.runc.v2' \
  'c3           mirror.example/k8s/kube-apiserver:v1.36.3          io.containerd.runc.v2' \
  'd4           registry.k8s.io/etcd:3.6.5-0                       io.containerd.runc.v2' ;;
"-n k8s.io tasks kill -s SIGKILL "*) echo "$7" >>` + log + ` ;;
*) exit 1 ;;
esac
`
	if err := os.WriteFile(filepath.Join(dir, "ctr"), []byte(ctr), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", restartAPIServerScript)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	killed, _ := os.ReadFile(log)
	if string(killed) != "a1\nc3\n" {
		t.Errorf("killed %q, want the two kube-apiserver containers a1 and c3", killed)
	}
}

// TestServesComparesTheServedCertificate: serves reads the certificate a TLS server sends and
// tells the one it serves from another, which is how renew and apply know that a component
// reloaded its new certificate.
func TestServesComparesTheServedCertificate(t *testing.T) {
	selfSigned := func(cn string) tls.Certificate {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	old, renewed := selfSigned("old"), selfSigned("new")
	// Like etcd, the server asks for a client certificate, which serves does not have.
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{old}, ClientAuth: tls.RequireAnyClientCert})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	ctx := context.Background()
	if why := serves(ctx, &net.Dialer{}, l.Addr().String(), old.Certificate[0]); why != "" {
		t.Errorf("serves the certificate it serves: %q", why)
	}
	if why := serves(ctx, &net.Dialer{}, l.Addr().String(), renewed.Certificate[0]); why != "it serves the previous certificate" {
		t.Errorf("serves another certificate: %q", why)
	}
	l.Close()
	if why := serves(ctx, &net.Dialer{}, l.Addr().String(), old.Certificate[0]); !strings.Contains(why, "refused") {
		t.Errorf("serves on a closed port: %q", why)
	}
}
