package pki

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"strings"
	"testing"
	"time"
)

func testCSR(t *testing.T, subject pkix.Name) *x509.CertificateRequest {
	t.Helper()
	key, err := NewKey(ECDSAP256, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: subject}, key)
	if err != nil {
		t.Fatal(err)
	}
	cr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	return cr
}

// TestSignCSRLikeTheControllerManager pins SignCSR to kube-controller-manager's signing policy:
// the request's subject and key, the given usages, 5 minutes of backdating, the lifetime capped
// at the CA's expiry, and the CA's chain.
func TestSignCSRLikeTheControllerManager(t *testing.T) {
	reqs, _ := Requests(testParams(), Hosts{Masters: testMasters[:1]})
	ca, err := Issue(reqs[0], nil, ECDSAP256, t0, 48*time.Hour, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	subject := pkix.Name{CommonName: "system:node:w1", Organization: []string{"system:nodes"}}
	cr := testCSR(t, subject)
	ku, eku := x509.KeyUsageDigitalSignature, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}

	cert, err := SignCSR(cr, ku, eku, ca, t0, DefaultSigningDuration, seeded(2))
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "system:node:w1" || len(cert.Subject.Organization) != 1 || cert.Subject.Organization[0] != "system:nodes" {
		t.Errorf("subject %v", cert.Subject)
	}
	if cert.KeyUsage != ku || len(cert.ExtKeyUsage) != 1 || cert.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth || cert.IsCA {
		t.Errorf("usages %v %v, CA %v", cert.KeyUsage, cert.ExtKeyUsage, cert.IsCA)
	}
	if !cert.NotBefore.Equal(t0.Add(-SigningBackdate)) {
		t.Errorf("NotBefore %s, want %s", cert.NotBefore, t0.Add(-SigningBackdate))
	}
	if !cert.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("NotAfter %s, want the CA's %s (a year asked, the CA lives 48 h)", cert.NotAfter, ca.Cert.NotAfter)
	}
	if cert.SerialNumber.BitLen() > 128 || cert.SerialNumber.Sign() <= 0 {
		t.Errorf("serial %v", cert.SerialNumber)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: t0, KeyUsages: eku}); err != nil {
		t.Errorf("does not verify against the CA: %v", err)
	}
	if !samePublicKeys(cert.PublicKey, cr.PublicKey) {
		t.Error("the certificate does not carry the request's public key")
	}

	// Long lifetimes end 5 minutes early, short ones do not.
	long, err := Issue(reqs[0], nil, ECDSAP256, t0, 3650*24*time.Hour, seeded(3))
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := SignCSR(cr, ku, eku, long, t0, 24*time.Hour, seeded(4)); c == nil || !c.NotAfter.Equal(t0.Add(24*time.Hour-SigningBackdate)) {
		t.Errorf("24 h certificate ends %v", c)
	}
	if c, _ := SignCSR(cr, ku, eku, long, t0, time.Hour, seeded(4)); c == nil || !c.NotAfter.Equal(t0.Add(time.Hour)) {
		t.Errorf("1 h certificate ends %v", c)
	}

	// Refusals: an expired CA, a CA without its key, a request whose signature is broken.
	if _, err := SignCSR(cr, ku, eku, ca, t0.Add(49*time.Hour), time.Hour, seeded(5)); err == nil || !strings.Contains(err.Error(), "CA expired") {
		t.Errorf("expired CA: %v", err)
	}
	if _, err := SignCSR(cr, ku, eku, &KeyPair{Cert: ca.Cert}, t0, time.Hour, seeded(5)); err == nil {
		t.Error("signed without the CA's key")
	}
	bad := *cr
	bad.Signature = append([]byte{}, cr.Signature...)
	bad.Signature[len(bad.Signature)/2] ^= 0xff
	if _, err := SignCSR(&bad, ku, eku, ca, t0, time.Hour, seeded(5)); err == nil || !strings.Contains(err.Error(), "bad signature") {
		t.Errorf("tampered request: %v", err)
	}
}

func samePublicKeys(a, b any) bool {
	ea, err1 := x509.MarshalPKIXPublicKey(a)
	eb, err2 := x509.MarshalPKIXPublicKey(b)
	return err1 == nil && err2 == nil && string(ea) == string(eb)
}
