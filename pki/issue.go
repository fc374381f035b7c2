package pki

import (
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"time"
)

// KeyPair is a certificate with its private key.
type KeyPair struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// Issue creates a key of algorithm alg and a certificate for r: self-signed when r is a CA
// (signer must be nil), otherwise signed by signer. NotBefore is now minus Backdate; NotAfter
// is now plus validity. It reads only its arguments. random draws the serial number; since Go
// 1.26 the standard library generates keys and signatures from its own secure source whatever
// reader it is given (tests needing fixed keys use testing/cryptotest.SetGlobalRandom).
func Issue(r Request, signer *KeyPair, alg KeyAlgorithm, now time.Time, validity time.Duration, random io.Reader) (*KeyPair, error) {
	key, err := NewKey(alg, random)
	if err != nil {
		return nil, fmt.Errorf("certificate %s: new key: %w", r.Key(), err)
	}
	return Sign(r, key, signer, now, validity, random)
}

// Sign is Issue with a given key.
func Sign(r Request, key crypto.Signer, signer *KeyPair, now time.Time, validity time.Duration, random io.Reader) (*KeyPair, error) {
	if r.Spec.IsCA() != (signer == nil) {
		return nil, fmt.Errorf("certificate %s: a CA is self-signed and a leaf needs a signing CA", r.Key())
	}
	if r.Subject.CommonName == "" {
		return nil, errors.New("certificate " + r.Key() + ": empty common name")
	}
	// Serial numbers as kubeadm draws them: uniform in [1, MaxInt64).
	serial, err := randInt(random, big.NewInt(math.MaxInt64-1))
	if err != nil {
		return nil, fmt.Errorf("certificate %s: serial: %w", r.Key(), err)
	}
	serial.Add(serial, big.NewInt(1))
	now = now.UTC()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               r.Subject,
		DNSNames:              r.DNSNames,
		IPAddresses:           r.IPs,
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              r.Spec.KeyUsage(),
		ExtKeyUsage:           r.Spec.ExtKeyUsage,
		BasicConstraintsValid: true,
		IsCA:                  r.Spec.IsCA(),
	}
	parent, parentKey := tmpl, key
	if signer != nil {
		parent, parentKey = signer.Cert, signer.Key
		tmpl.AuthorityKeyId = signer.Cert.SubjectKeyId
	}
	der, err := x509.CreateCertificate(random, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return nil, fmt.Errorf("certificate %s: sign: %w", r.Key(), err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &KeyPair{Cert: cert, Key: key}, nil
}

// randInt draws a uniform number in [0, max) from random, so callers (and tests) choose the
// source.
func randInt(random io.Reader, max *big.Int) (*big.Int, error) {
	b := make([]byte, (max.BitLen()+7)/8)
	for {
		if _, err := io.ReadFull(random, b); err != nil {
			return nil, err
		}
		b[0] &= byte(1<<(uint(max.BitLen()-1)%8+1) - 1)
		n := new(big.Int).SetBytes(b)
		if n.Cmp(max) < 0 {
			return n, nil
		}
	}
}

// ServiceAccountKey is the key pair the API server signs service-account tokens with (sa.key,
// sa.pub); like kubeadm's, it uses the cluster's key algorithm.
func ServiceAccountKey(alg KeyAlgorithm, random io.Reader) (crypto.Signer, error) {
	return NewKey(alg, random)
}

// Verify checks that kp is signed by ca, is valid at now, and that its key matches.
func Verify(kp *KeyPair, ca *x509.Certificate, usages []x509.ExtKeyUsage, now time.Time) error {
	if !samePublicKey(kp.Cert, kp.Key) {
		return errors.New("private key does not match the certificate")
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if len(usages) == 0 {
		usages = []x509.ExtKeyUsage{x509.ExtKeyUsageAny}
	}
	_, err := kp.Cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: usages})
	return err
}
