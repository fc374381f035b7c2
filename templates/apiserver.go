package templates

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"sigs.k8s.io/yaml"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
)

// The API server's hardening (docs/security.md): what its files say and which of its flags
// they set.

// AlwaysExemptNamespaces are exempt from Pod Security admission whatever the inventory says:
// kube-system (kube-proxy, the static pods' mirrors) and flannel's, whose agents need the host.
var AlwaysExemptNamespaces = []string{"kube-flannel", "kube-system"}

// TLSCipherSuites are the only TLS 1.2 cipher suites the API server and kubelets offer: ECDHE
// key exchange and an AEAD, for ECDSA and RSA keys (TLS 1.3's suites are always on). This is
// the intersection of what the CIS Kubernetes Benchmark accepts for both (1.2.29, 4.2.12).
var TLSCipherSuites = []string{
	"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
	"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
}

// TLSMinVersion is the oldest TLS the API server and kubelets speak.
const TLSMinVersion = "VersionTLS12"

// EncryptionConfig is the API servers' EncryptionConfiguration for Secrets: provider encrypts
// with the first key; every key also decrypts with the other local provider (so that a change
// of provider, or of key, never leaves a Secret unreadable), and identity last reads what was
// written before encryption was on. Provider none writes in plain text and still reads the
// encrypted.
func EncryptionConfig(provider string, keys *pki.EncryptionKeys) ([]byte, error) {
	if keys == nil || len(keys.Keys) == 0 {
		return nil, fmt.Errorf("no encryption keys")
	}
	var ks []apiserverv1.Key
	for _, k := range keys.Keys {
		ks = append(ks, apiserverv1.Key{Name: k.Name, Secret: k.Base64()})
	}
	secretbox := apiserverv1.ProviderConfiguration{Secretbox: &apiserverv1.SecretboxConfiguration{Keys: ks}}
	aescbc := apiserverv1.ProviderConfiguration{AESCBC: &apiserverv1.AESConfiguration{Keys: ks}}
	identity := apiserverv1.ProviderConfiguration{Identity: &apiserverv1.IdentityConfiguration{}}
	var providers []apiserverv1.ProviderConfiguration
	switch provider {
	case inventory.EncryptionSecretbox:
		providers = []apiserverv1.ProviderConfiguration{secretbox, aescbc, identity}
	case inventory.EncryptionAESCBC:
		providers = []apiserverv1.ProviderConfiguration{aescbc, secretbox, identity}
	case inventory.EncryptionNone:
		providers = []apiserverv1.ProviderConfiguration{identity, secretbox, aescbc}
	default:
		return nil, fmt.Errorf("unknown encryption provider %q", provider)
	}
	cfg := apiserverv1.EncryptionConfiguration{
		TypeMeta:  metav1.TypeMeta{APIVersion: "apiserver.config.k8s.io/v1", Kind: "EncryptionConfiguration"},
		Resources: []apiserverv1.ResourceConfiguration{{Resources: []string{"secrets"}, Providers: providers}},
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	return append([]byte("# Written by kforge: how the API servers encrypt Secrets in etcd. The keys are secret.\n"), b...), nil
}

// AdmissionConfig is the API servers' AdmissionConfiguration: Pod Security's cluster-wide
// levels and exemptions, and EventRateLimit's limits.
func AdmissionConfig(ps inventory.PodSecurity) ([]byte, error) {
	ns := slices.Concat(AlwaysExemptNamespaces, ps.ExemptNamespaces)
	slices.Sort(ns)
	return render("admission.yaml.tmpl", struct {
		Enforce, Warn, Audit, Namespaces string
	}{ps.Enforce, ps.Warn, ps.Audit, strings.Join(slices.Compact(ns), ", ")})
}

// AuditPolicy is the API servers' audit policy (files/audit-policy.yaml).
func AuditPolicy() []byte { return mustFile("audit-policy.yaml") }

// AuthenticationConfig is the API servers' AuthenticationConfiguration: anonymous requests
// only to the health checks (files/authentication.yaml).
func AuthenticationConfig() []byte { return mustFile("authentication.yaml") }

func mustFile(name string) []byte {
	b, err := files.ReadFile("files/" + name)
	if err != nil {
		panic(err)
	}
	return b
}

// APIServerFiles are a master's kube-apiserver configuration files (under
// hostpath.APIServerConfigDir, 0600 each).
func APIServerFiles(c *inventory.Cluster, set *pki.Set) ([]File, error) {
	enc, err := EncryptionConfig(or(c.Security.EncryptionAtRest, inventory.EncryptionSecretbox), set.Encryption)
	if err != nil {
		return nil, err
	}
	ps := c.Security.PodSecurity
	ps.Enforce, ps.Warn, ps.Audit = or(ps.Enforce, inventory.DefaultPodSecurityEnforce), or(ps.Warn, inventory.DefaultPodSecurityWarn), or(ps.Audit, inventory.DefaultPodSecurityAudit)
	adm, err := AdmissionConfig(ps)
	if err != nil {
		return nil, err
	}
	fs := []File{
		{Path: hostpath.EncryptionConfig, Mode: 0o600, Data: enc},
		{Path: hostpath.AdmissionConfig, Mode: 0o600, Data: adm},
		{Path: hostpath.AuthenticationConfig, Mode: 0o600, Data: AuthenticationConfig()},
	}
	if c.Security.Audit.AuditEnabled() {
		fs = append(fs, File{Path: hostpath.AuditPolicy, Mode: 0o600, Data: AuditPolicy()})
	}
	return fs, nil
}
