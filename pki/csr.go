package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/big"
	"time"
)

// SigningBackdate and signingShort are kube-controller-manager's CSR signing policy
// (pkg/controller/certificates/signer): certificates start 5 minutes in the past, and those
// living 8 hours or more end 5 minutes early.
const (
	SigningBackdate = 5 * time.Minute
	signingShort    = 8 * time.Hour
)

// DefaultSigningDuration is kube-controller-manager's --cluster-signing-duration default: the
// lifetime of certificates signed for CSRs that do not ask for less.
const DefaultSigningDuration = 365 * 24 * time.Hour

// SignCSR signs a certificate request with ca the way kube-controller-manager's CSR signers do
// (pkg/controller/certificates/authority, Kubernetes v1.36): subject, SANs and public key from
// the request, no other extensions, the given key usages, a random 128-bit serial, NotBefore
// now-5m, NotAfter now+ttl (minus the 5 minutes when ttl is 8 hours or more), never past the
// CA's own expiry. The request's signature is checked first. It reads only its arguments.
func SignCSR(cr *x509.CertificateRequest, ku x509.KeyUsage, eku []x509.ExtKeyUsage, ca *KeyPair, now time.Time, ttl time.Duration, random io.Reader) (*x509.Certificate, error) {
	if ca == nil || ca.Key == nil {
		return nil, errors.New("sign certificate request: the CA's private key is not available")
	}
	if err := cr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("certificate request for %q: bad signature: %w", cr.Subject.CommonName, err)
	}
	serial, err := randInt(random, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("certificate request for %q: serial: %w", cr.Subject.CommonName, err)
	}
	now = now.UTC()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               cr.Subject,
		DNSNames:              cr.DNSNames,
		IPAddresses:           cr.IPAddresses,
		EmailAddresses:        cr.EmailAddresses,
		URIs:                  cr.URIs,
		KeyUsage:              ku,
		ExtKeyUsage:           eku,
		BasicConstraintsValid: true,
		NotBefore:             now.Add(-SigningBackdate),
		NotAfter:              now.Add(ttl),
		AuthorityKeyId:        ca.Cert.SubjectKeyId,
	}
	if ttl >= signingShort {
		tmpl.NotAfter = tmpl.NotAfter.Add(-SigningBackdate)
	}
	if !now.Before(ca.Cert.NotAfter) {
		return nil, fmt.Errorf("certificate request for %q: the CA expired at %s; renew it first", cr.Subject.CommonName, ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	der, err := x509.CreateCertificate(random, tmpl, ca.Cert, cr.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("certificate request for %q: sign: %w", cr.Subject.CommonName, err)
	}
	return x509.ParseCertificate(der)
}
