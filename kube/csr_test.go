package kube

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"strings"
	"testing"

	certv1 "k8s.io/api/certificates/v1"

	"github.com/kforge/kforge/pki"
)

// TestKubeletClientCSRFor: kforge answers only what kube-controller-manager would call a
// kubelet client CSR, and only from the bootstrap token's user.
func TestKubeletClientCSRFor(t *testing.T) {
	key, err := pki.NewKey(pki.ECDSAP256, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	request := func(cr x509.CertificateRequest) []byte {
		der, err := x509.CreateCertificateRequest(rand.Reader, &cr, key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	}
	good := pkix.Name{CommonName: "system:node:w1", Organization: []string{"system:nodes"}}
	const me = "system:bootstrap:abcdef"
	csr := func(mod func(*certv1.CertificateSigningRequest)) *certv1.CertificateSigningRequest {
		c := &certv1.CertificateSigningRequest{Spec: certv1.CertificateSigningRequestSpec{
			Request: request(x509.CertificateRequest{Subject: good}), SignerName: certv1.KubeAPIServerClientKubeletSignerName,
			Username: me, Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth},
		}}
		if mod != nil {
			mod(c)
		}
		return c
	}
	if n, err := kubeletClientCSRFor(csr(nil), me); err != nil || n != "w1" {
		t.Fatalf("good request: %q, %v", n, err)
	}
	rsa := csr(func(c *certv1.CertificateSigningRequest) {
		c.Spec.Usages = []certv1.KeyUsage{certv1.UsageKeyEncipherment, certv1.UsageClientAuth, certv1.UsageDigitalSignature}
	})
	if n, err := kubeletClientCSRFor(rsa, me); err != nil || n != "w1" {
		t.Errorf("RSA usages: %q, %v", n, err)
	}
	for name, tc := range map[string]struct {
		mod  func(*certv1.CertificateSigningRequest)
		want string
	}{
		"other signer": {func(c *certv1.CertificateSigningRequest) { c.Spec.SignerName = certv1.KubeletServingSignerName }, "signer"},
		"other user":   {func(c *certv1.CertificateSigningRequest) { c.Spec.Username = "system:bootstrap:zzzzzz" }, "requested by"},
		"server usage": {func(c *certv1.CertificateSigningRequest) {
			c.Spec.Usages = append(c.Spec.Usages, certv1.UsageServerAuth)
		}, "usages"},
		"not PEM": {func(c *certv1.CertificateSigningRequest) { c.Spec.Request = []byte("junk") }, "PEM"},
		"other org": {func(c *certv1.CertificateSigningRequest) {
			c.Spec.Request = request(x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:w1", Organization: []string{"system:masters"}}})
		}, "organization"},
		"not a node": {func(c *certv1.CertificateSigningRequest) {
			c.Spec.Request = request(x509.CertificateRequest{Subject: pkix.Name{CommonName: "admin", Organization: []string{"system:nodes"}}})
		}, "common name"},
		"SANs": {func(c *certv1.CertificateSigningRequest) {
			c.Spec.Request = request(x509.CertificateRequest{Subject: good, IPAddresses: []net.IP{net.ParseIP("198.51.100.7")}})
		}, "alternative names"},
	} {
		if n, err := kubeletClientCSRFor(csr(tc.mod), me); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: node %q, err %v; want an error about %s", name, n, err, tc.want)
		}
	}
}
