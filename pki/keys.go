package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
)

// KeyAlgorithm names a key type and size, as written in the inventory (pki.keyAlgorithm).
type KeyAlgorithm string

const (
	ECDSAP256 KeyAlgorithm = "ecdsa-p256"
	ECDSAP384 KeyAlgorithm = "ecdsa-p384"
	RSA2048   KeyAlgorithm = "rsa-2048"
	RSA3072   KeyAlgorithm = "rsa-3072"
	RSA4096   KeyAlgorithm = "rsa-4096"

	DefaultKeyAlgorithm = ECDSAP256
)

// KeyAlgorithms lists every supported algorithm.
var KeyAlgorithms = []KeyAlgorithm{ECDSAP256, ECDSAP384, RSA2048, RSA3072, RSA4096}

// ParseKeyAlgorithm reads an inventory value; empty means the default.
func ParseKeyAlgorithm(s string) (KeyAlgorithm, error) {
	if s == "" {
		return DefaultKeyAlgorithm, nil
	}
	for _, a := range KeyAlgorithms {
		if string(a) == s {
			return a, nil
		}
	}
	return "", fmt.Errorf("pki.keyAlgorithm %q is not one of ecdsa-p256, ecdsa-p384, rsa-2048, rsa-3072, rsa-4096", s)
}

// KubeadmName is the kubeadm ClusterConfiguration encryptionAlgorithm for a.
func (a KeyAlgorithm) KubeadmName() string {
	switch a {
	case ECDSAP256:
		return "ECDSA-P256"
	case ECDSAP384:
		return "ECDSA-P384"
	case RSA3072:
		return "RSA-3072"
	case RSA4096:
		return "RSA-4096"
	}
	return "RSA-2048"
}

// NewKey generates a private key of algorithm a from random.
func NewKey(a KeyAlgorithm, random io.Reader) (crypto.Signer, error) {
	switch a {
	case ECDSAP256:
		return ecdsa.GenerateKey(elliptic.P256(), random)
	case ECDSAP384:
		return ecdsa.GenerateKey(elliptic.P384(), random)
	case RSA2048:
		return rsa.GenerateKey(random, 2048)
	case RSA3072:
		return rsa.GenerateKey(random, 3072)
	case RSA4096:
		return rsa.GenerateKey(random, 4096)
	}
	return nil, fmt.Errorf("unknown key algorithm %q", a)
}

// AlgorithmOf says which KeyAlgorithm a public key is, or "" when it is none of them.
func AlgorithmOf(pub crypto.PublicKey) KeyAlgorithm {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return ECDSAP256
		case elliptic.P384():
			return ECDSAP384
		}
	case *rsa.PublicKey:
		switch k.N.BitLen() {
		case 2048:
			return RSA2048
		case 3072:
			return RSA3072
		case 4096:
			return RSA4096
		}
	}
	return ""
}

// EncodeKey returns key as PEM: "EC PRIVATE KEY" for ECDSA and "RSA PRIVATE KEY" for RSA, the
// forms kubeadm (client-go keyutil) writes.
func EncodeKey(key crypto.Signer) ([]byte, error) {
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
	case *rsa.PrivateKey:
		return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}), nil
	}
	return nil, fmt.Errorf("unsupported private key type %T", key)
}

// ParseKey reads a PEM private key in PKCS#1, SEC 1 or PKCS#8 form.
func ParseKey(data []byte) (crypto.Signer, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, errors.New("no PEM private key found")
		}
		switch block.Type {
		case "EC PRIVATE KEY":
			return x509.ParseECPrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			return x509.ParsePKCS1PrivateKey(block.Bytes)
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
			if err != nil {
				return nil, err
			}
			s, ok := k.(crypto.Signer)
			if !ok {
				return nil, fmt.Errorf("unsupported PKCS#8 key type %T", k)
			}
			return s, nil
		}
	}
}

// EncodePublicKey returns pub as a PEM "PUBLIC KEY" (PKIX), the form of kubeadm's sa.pub.
func EncodePublicKey(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// PEM returns the pair's certificate and key as PEM (EncodeCert, EncodeKey): the two files
// a component is started with.
func (kp *KeyPair) PEM() (cert, key []byte, err error) {
	key, err = EncodeKey(kp.Key)
	if err != nil {
		return nil, nil, err
	}
	return EncodeCert(kp.Cert), key, nil
}

// EncodeCert returns c as a PEM "CERTIFICATE".
func EncodeCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// ParseCert reads the first PEM certificate in data.
func ParseCert(data []byte) (*x509.Certificate, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, errors.New("no PEM certificate found")
		}
		if block.Type == "CERTIFICATE" {
			return x509.ParseCertificate(block.Bytes)
		}
	}
}

// ParseCerts reads every PEM certificate in data (a CA bundle), skipping other blocks.
func ParseCerts(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return out, nil
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
}

// SPKIPin is the "sha256:<hex>" hash of a certificate's public key, the form of kubeadm's
// --discovery-token-ca-cert-hash.
func SPKIPin(c *x509.Certificate) string {
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// samePublicKey reports whether key belongs to cert.
func samePublicKey(cert *x509.Certificate, key crypto.Signer) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	p, ok := key.Public().(equaler)
	return ok && p.Equal(cert.PublicKey)
}
