package pki

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"
)

// Inspection is one certificate the cluster depends on, as `kforge certs check` reports it.
type Inspection struct {
	// Where is "state" (the state dir), a host's name, or "issued" (user kubeconfigs).
	Where string `json:"where"`
	// Name is the table's row name ("apiserver", "admin.conf"), "kubelet-client",
	// "kubelet-serving", or "user:<name>".
	Name string `json:"name"`
	File string `json:"file"`
	// Subject is "CN=… O=…".
	Subject string `json:"subject,omitempty"`
	// Issuer is the CA that signed it: "ca", "etcd-ca", "front-proxy-ca", "self-signed", or
	// "unknown (CN=…)" when none of the state dir's CAs did.
	Issuer   string    `json:"issuer,omitempty"`
	NotAfter time.Time `json:"notAfter,omitzero"`
	// Drift says how it differs from what the inventory and the state dir say it should be.
	Drift []string `json:"drift,omitempty"`
	// Error is why there is no certificate to show: missing, unreadable, host unreachable.
	Error string `json:"error,omitempty"`
}

// Left is how long the certificate is valid at now; negative once it expired.
func (i Inspection) Left(now time.Time) time.Duration { return i.NotAfter.Sub(now) }

// Expect is what a certificate should be, for Inspect.
type Expect struct {
	// Request is the inventory's request for it (subject, SANs, key usages); nil when kforge
	// does not issue it (kubelets' certificates, user kubeconfigs).
	Request *Request
	// Subject, when set, is the subject it must have (kubelet client certificates).
	Subject *pkix.Name
	// Signer names the CA that should have signed it; "" for CAs and self-signed certificates.
	Signer string
	// Alg is the key algorithm leaves kforge issues have; "" to not look.
	Alg KeyAlgorithm
	// State is the state dir's copy, when the state dir keeps one.
	State *x509.Certificate
}

// Inspect describes certificate c, found at where in file as row name, against cas (the state
// dir's CAs by name) and what it should be.
func Inspect(where, name, file string, c *x509.Certificate, cas map[string]*x509.Certificate, want Expect) Inspection {
	in := Inspection{Where: where, Name: name, File: file, Subject: subjectString(c.Subject), Issuer: IssuerOf(c, cas), NotAfter: c.NotAfter.UTC()}
	isCA := want.Request != nil && want.Request.Spec.IsCA()
	switch {
	case isCA && want.State != nil && !c.Equal(want.State):
		in.Drift = append(in.Drift, "a different CA than the state dir's ("+SPKIPin(want.State)+")")
	case want.Signer != "" && !SignedBy(c, cas[want.Signer]):
		in.Drift = append(in.Drift, "not signed by the state dir's "+want.Signer)
	}
	if want.Request != nil {
		if d := Mismatch(c, *want.Request, want.Alg); d != "" {
			in.Drift = append(in.Drift, d)
		}
	}
	if s := want.Subject; s != nil && (c.Subject.CommonName != s.CommonName || !slices.Equal(c.Subject.Organization, s.Organization)) {
		in.Drift = append(in.Drift, "subject is not "+subjectString(*s))
	}
	if !isCA && want.State != nil && !c.Equal(want.State) {
		in.Drift = append(in.Drift, "not the state dir's certificate (kforge certs renew or apply pushes it)")
	}
	return in
}

// IssuerOf names the CA of cas that signed c, "self-signed", or "unknown (CN=…)".
func IssuerOf(c *x509.Certificate, cas map[string]*x509.Certificate) string {
	for _, name := range []string{CA, EtcdCA, FrontProxyCA} {
		if ca := cas[name]; ca != nil && c.Equal(ca) {
			return "self-signed"
		}
		if SignedBy(c, cas[name]) {
			return name
		}
	}
	if SignedBy(c, c) {
		return "self-signed"
	}
	return "unknown (CN=" + c.Issuer.CommonName + ")"
}

// IssuerOfChain is IssuerOf for the first certificate of a file that also holds its issuer: a
// kubelet's own serving certificate is signed by a CA the kubelet made for it alone
// ("<host>-ca@<time>", client-go's GenerateSelfSignedCertKey) and written after it in
// kubelet.crt. Such a chain is "self-signed (CN=…)", not unknown.
func IssuerOfChain(chain []*x509.Certificate, cas map[string]*x509.Certificate) string {
	issuer := IssuerOf(chain[0], cas)
	if !strings.HasPrefix(issuer, "unknown") || len(chain) < 2 {
		return issuer
	}
	if ca := chain[1]; SignedBy(chain[0], ca) && SignedBy(ca, ca) {
		return "self-signed (CN=" + ca.Subject.CommonName + ", in the same file)"
	}
	return issuer
}

func subjectString(n pkix.Name) string {
	s := "CN=" + n.CommonName
	if len(n.Organization) > 0 {
		s += " O=" + strings.Join(n.Organization, ",")
	}
	return s
}

// KubeletSubject is the subject of node's kubelet client certificate.
func KubeletSubject(node string) pkix.Name {
	return pkix.Name{CommonName: NodeUserPrefix + node, Organization: []string{NodesGroup}}
}

// StateCerts reads the state dir's certificate for each request (CAs included), without keys;
// a request whose certificate is missing or unreadable has an error instead.
func StateCerts(dir string, reqs []Request) (map[string]*x509.Certificate, map[string]error) {
	certs, errs := map[string]*x509.Certificate{}, map[string]error{}
	for _, r := range reqs {
		data, err := os.ReadFile(StatePath(dir, r) + ".crt")
		if errors.Is(err, fs.ErrNotExist) {
			errs[r.Key()] = errors.New("missing")
			continue
		} else if err != nil {
			errs[r.Key()] = err
			continue
		}
		c, err := ParseCert(data)
		if err != nil {
			errs[r.Key()] = fmt.Errorf("unreadable: %v", err)
			continue
		}
		certs[r.Key()] = c
	}
	return certs, errs
}

// StateCAs are the CAs of certs (StateCerts' result) by name.
func StateCAs(certs map[string]*x509.Certificate) map[string]*x509.Certificate {
	cas := map[string]*x509.Certificate{}
	for _, name := range []string{CA, EtcdCA, FrontProxyCA} {
		if c := certs[name]; c != nil {
			cas[name] = c
		}
	}
	return cas
}

// UserRequest is the request for a person's or a CI job's client certificate (kforge
// kubeconfig --user, like kubeadm kubeconfig user): CN the user, O the groups, signed by the
// cluster CA for client authentication.
func UserRequest(user string, groups []string) Request {
	return Request{
		Spec:    Spec{Name: "user:" + user, SignedBy: CA, ExtKeyUsage: clientAuth},
		Subject: pkix.Name{CommonName: user, Organization: groups},
	}
}
