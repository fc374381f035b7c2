package pki

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kforge/kforge/internal/fsx"
)

// DefaultRenewBefore is how close to expiry a leaf certificate is re-issued.
const DefaultRenewBefore = 30 * 24 * time.Hour

// RenewBefore is how close to expiry apply re-issues a leaf of the given validity: 30 days, or
// a third of the validity when that is shorter, so that certificates of a few minutes (tests)
// or days are not re-issued on every run.
func RenewBefore(validity time.Duration) time.Duration {
	if validity > 0 && validity/3 < DefaultRenewBefore {
		return validity / 3
	}
	return DefaultRenewBefore
}

// Set is a cluster's PKI material, complete for its params and masters.
type Set struct {
	Params  Params
	Masters []Master
	Workers []Master
	Etcd    []Master // the etcd group's hosts (external etcd), else none
	// CAs by name (CA, FrontProxyCA, EtcdCA). The cluster CA's key is nil only when it came
	// from an external CA whose key is not available (never the case today).
	CAs map[string]*KeyPair
	// Certs by Request.Key(): "apiserver@m1", "front-proxy-client", "admin.conf", ...
	Certs map[string]*KeyPair
	// Trust are the certificates each CA's clients trust (its ca.crt), the signing CA first:
	// the CA alone, or the old and the new CA while it is rotated (Rotation).
	Trust map[string][]*x509.Certificate
	// ServiceAccount is the sa.key pair.
	ServiceAccount crypto.Signer
	// ExternalCA is true when the cluster CA is the user's (pki.externalCA).
	ExternalCA bool
	// Encryption are the keys the API servers encrypt Secrets in etcd with (EncryptionFile).
	Encryption *EncryptionKeys
}

// Get returns the certificate of row name for node ("" for Cluster rows).
func (s *Set) Get(name, node string) *KeyPair {
	if kp, ok := s.CAs[name]; ok {
		return kp
	}
	return s.Certs[Key(name, node)]
}

// TrustPEM is the PEM bundle of the certificates CA name's clients trust, the signer first.
func (s *Set) TrustPEM(name string) []byte {
	certs := s.Trust[name]
	if len(certs) == 0 && s.CAs[name] != nil {
		certs = []*x509.Certificate{s.CAs[name].Cert}
	}
	var out []byte
	for _, c := range certs {
		out = append(out, EncodeCert(c)...)
	}
	return out
}

// Change is one thing Ensure did or wants the user to know, with the reason.
type Change struct {
	Key    string `json:"key"`    // "apiserver@m1", "ca", "sa"
	Action string `json:"action"` // "created", "renewed", "removed", "warning"
	Reason string `json:"reason"`
}

func (c Change) String() string { return fmt.Sprintf("%s %s: %s", c.Action, c.Key, c.Reason) }

// Options are Ensure's inputs.
type Options struct {
	// Dir holds the material (the state dir's pki/ directory); created 0700.
	Dir     string
	Params  Params
	Masters []Master
	// Workers get the PerNode rows (their kubelets' serving certificates).
	Workers []Master
	// Etcd are the etcd group's hosts (external etcd): they, not the masters, get the PerEtcd
	// rows (etcd's serving and peer certificates).
	Etcd []Master
	// ExternalCA, when set, is the cluster CA (cert and key) to use instead of generating one.
	ExternalCA *KeyPair
	Now        time.Time
	Rand       io.Reader
	// RenewBefore re-issues leaves expiring within it; 0 means RenewBefore(CertValidity).
	RenewBefore time.Duration
	// Renew says which leaves (by Request.Key) are re-issued whatever their state
	// (kforge certs renew); nil renews none that are still good.
	Renew func(key string) bool
	// DryRun computes the same set and changes without writing, removing or locking anything
	// in Dir (kforge plan): what would be issued is issued in memory only.
	DryRun bool
}

// Ensure loads the material in o.Dir, creates what is missing, re-issues leaves that are
// missing, expiring within RenewBefore, or no longer match the inventory (subject, SANs, key
// algorithm, signing CA), removes the certificates of masters no longer listed, and returns the
// complete set with every change and its reason. A CA is never replaced: a CA that conflicts
// with the inventory is an error that says what to do.
func Ensure(o Options) (*Set, []Change, error) {
	if o.RenewBefore == 0 {
		o.RenewBefore = RenewBefore(o.Params.CertValidity)
	}
	if !o.DryRun {
		if err := os.MkdirAll(o.Dir, 0o700); err != nil {
			return nil, nil, err
		}
		if err := os.Chmod(o.Dir, 0o700); err != nil {
			return nil, nil, err
		}
		unlock, err := lockDir(o.Dir)
		if err != nil {
			return nil, nil, err
		}
		defer unlock()
	}
	reqs, err := Requests(o.Params, o.hosts())
	if err != nil {
		return nil, nil, err
	}
	set := &Set{Params: o.Params, Masters: o.Masters, Workers: o.Workers, Etcd: o.Etcd, CAs: map[string]*KeyPair{}, Certs: map[string]*KeyPair{}, ExternalCA: o.ExternalCA != nil}
	var changes []Change
	rot, err := ReadRotation(o.Dir)
	if err != nil {
		return nil, nil, err
	}
	set.Trust = map[string][]*x509.Certificate{}
	for _, r := range reqs {
		if !r.Spec.IsCA() {
			continue
		}
		kp, ch, err := ensureCA(o, r)
		if err != nil {
			return nil, nil, err
		}
		// During a CA rotation the phase decides which CA signs and which are trusted.
		if set.CAs[r.Spec.Name], set.Trust[r.Spec.Name], err = rotated(o.Dir, rot, r.Spec.Name, kp); err != nil {
			return nil, nil, err
		}
		changes = append(changes, ch...)
	}
	if rot != nil {
		changes = append(changes, Change{Key: caFlag(rot.CAs), Action: "warning", Reason: fmt.Sprintf("CA rotation in phase %s since %s: kforge certs rotate-ca finishes it", rot.Phase, rot.Started.Format(time.RFC3339))})
	}
	for _, r := range reqs {
		if r.Spec.IsCA() {
			continue
		}
		kp, ch, err := ensureLeaf(o, r, set.CAs[r.Spec.SignedBy])
		if err != nil {
			return nil, nil, err
		}
		set.Certs[r.Key()] = kp
		changes = append(changes, ch...)
	}
	sa, ch, err := ensureSA(o)
	if err != nil {
		return nil, nil, err
	}
	set.ServiceAccount = sa
	changes = append(changes, ch...)
	if set.Encryption, ch, err = ensureEncryption(o); err != nil {
		return nil, nil, err
	}
	changes = append(changes, ch...)
	ch, err = removeGoneNodes(o)
	if err != nil {
		return nil, nil, err
	}
	return set, append(changes, ch...), nil
}

// StatePath is where a request's certificate lives under dir, without extension.
func StatePath(dir string, r Request) string {
	base := r.Spec.BaseName
	if base == "" {
		base = filepath.Join("kubeconfig", strings.TrimSuffix(r.Spec.Kubeconfig, ".conf"))
	}
	if r.Node != "" {
		return filepath.Join(dir, "nodes", r.Node, base)
	}
	return filepath.Join(dir, base)
}

func ensureCA(o Options, r Request) (*KeyPair, []Change, error) {
	base := StatePath(o.Dir, r)
	cur, loadErr := loadPair(base)
	if r.Spec.Name == CA && o.ExternalCA != nil {
		ext := o.ExternalCA
		if !ext.Cert.IsCA || !samePublicKey(ext.Cert, ext.Key) {
			return nil, nil, errors.New("pki.externalCA: the certificate is not a CA or the key does not belong to it")
		}
		stored, err := os.ReadFile(base + ".crt")
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := o.write(base+".crt", EncodeCert(ext.Cert), 0o644); err != nil {
				return nil, nil, err
			}
			return ext, []Change{{Key: r.Key(), Action: "created", Reason: "using pki.externalCA " + SPKIPin(ext.Cert)}}, nil
		case err != nil:
			return nil, nil, err
		}
		if c, err := ParseCert(stored); err != nil || !c.Equal(ext.Cert) {
			return nil, nil, caConflict(base, "pki.externalCA is a different CA than the one this cluster was built with", stored, ext.Cert)
		}
		return ext, nil, nil
	}
	if loadErr == nil {
		if !cur.Cert.IsCA {
			return nil, nil, fmt.Errorf("%s.crt is not a CA certificate; restore the cluster's CA there (kforge never replaces a CA)", base)
		}
		var ch []Change
		if !o.Now.Before(cur.Cert.NotAfter) {
			return nil, nil, fmt.Errorf("CA %s expired on %s; kforge does not rotate CAs: replace %s.crt and %s.key with a renewed CA (same key) or start a new cluster CA", r.Key(), cur.Cert.NotAfter.Format(time.RFC3339), base, base)
		}
		if left := cur.Cert.NotAfter.Sub(o.Now); left < o.RenewBefore {
			ch = append(ch, Change{Key: r.Key(), Action: "warning", Reason: fmt.Sprintf("CA expires %s (in %s); kforge does not rotate CAs automatically", cur.Cert.NotAfter.Format(time.RFC3339), left.Round(time.Hour))})
		}
		return cur, ch, nil
	}
	if _, err := os.Stat(base + ".crt"); err == nil {
		return nil, nil, fmt.Errorf("CA %s: %v; kforge never replaces a CA: restore %s.crt and %s.key, or remove both to start a new cluster CA (every node must then be re-joined)", r.Key(), loadErr, base, base)
	}
	if _, err := os.Stat(base + ".key"); err == nil {
		return nil, nil, fmt.Errorf("CA %s: %s.key exists without %s.crt; restore the certificate or remove the key", r.Key(), base, base)
	}
	kp, err := Issue(r, nil, o.Params.KeyAlgorithm, o.Now, o.Params.CAValidity, o.Rand)
	if err != nil {
		return nil, nil, err
	}
	if err := o.savePair(base, kp); err != nil {
		return nil, nil, err
	}
	return kp, []Change{{Key: r.Key(), Action: "created", Reason: "new CA " + SPKIPin(kp.Cert)}}, nil
}

func caConflict(base, what string, stored []byte, want *x509.Certificate) error {
	have := "unreadable"
	if c, err := ParseCert(stored); err == nil {
		have = SPKIPin(c)
	}
	return fmt.Errorf("%s (state %s.crt has %s, inventory gives %s); kforge never replaces a CA silently: to switch CAs remove %s.crt and %s.key (every certificate is then re-issued and every node must be re-joined)", what, base, have, SPKIPin(want), base, base)
}

// Staleness says why an existing certificate no longer fits request r, or "" when it fits.
func Staleness(kp *KeyPair, r Request, ca *KeyPair, alg KeyAlgorithm, now time.Time, renewBefore time.Duration) string {
	c := kp.Cert
	if !samePublicKey(c, kp.Key) {
		return "private key does not match the certificate"
	}
	if !SignedBy(c, ca.Cert) {
		return "signed by a different CA"
	}
	if left := c.NotAfter.Sub(now); left < renewBefore {
		if left <= 0 {
			return "expired " + c.NotAfter.Format(time.RFC3339)
		}
		return fmt.Sprintf("expires %s, within %s", c.NotAfter.Format(time.RFC3339), renewBefore)
	}
	return Mismatch(c, r, alg)
}

// SignedBy says whether ca signed c.
func SignedBy(c, ca *x509.Certificate) bool {
	return ca != nil && bytes.Equal(c.RawIssuer, ca.RawSubject) && c.CheckSignatureFrom(ca) == nil
}

// Mismatch says how certificate c no longer fits request r: its subject, SANs, key usages or
// key algorithm (unless alg is ""); "" when it fits. Neither expiry nor the signing CA is
// looked at.
func Mismatch(c *x509.Certificate, r Request, alg KeyAlgorithm) string {
	if c.Subject.CommonName != r.Subject.CommonName || !slices.Equal(c.Subject.Organization, r.Subject.Organization) {
		return fmt.Sprintf("subject was CN=%s O=%v, want CN=%s O=%v", c.Subject.CommonName, c.Subject.Organization, r.Subject.CommonName, r.Subject.Organization)
	}
	if d := sanDiff(c, r); d != "" {
		return "SANs changed: " + d
	}
	if !slices.Equal(c.ExtKeyUsage, r.Spec.ExtKeyUsage) || c.KeyUsage != r.Spec.KeyUsage() {
		return "key usages changed"
	}
	if got := AlgorithmOf(c.PublicKey); alg != "" && got != alg {
		return fmt.Sprintf("key algorithm was %s, want %s", got, alg)
	}
	return ""
}

func sanDiff(c *x509.Certificate, r Request) string {
	have := map[string]bool{}
	for _, d := range c.DNSNames {
		have[d] = true
	}
	for _, ip := range c.IPAddresses {
		have[ip.String()] = true
	}
	want := map[string]bool{}
	for _, d := range r.DNSNames {
		want[d] = true
	}
	for _, ip := range r.IPs {
		want[ip.String()] = true
	}
	var add, del []string
	for k := range want {
		if !have[k] {
			add = append(add, k)
		}
	}
	for k := range have {
		if !want[k] {
			del = append(del, k)
		}
	}
	slices.Sort(add)
	slices.Sort(del)
	var parts []string
	if len(add) > 0 {
		parts = append(parts, "added "+strings.Join(add, ", "))
	}
	if len(del) > 0 {
		parts = append(parts, "removed "+strings.Join(del, ", "))
	}
	return strings.Join(parts, "; ")
}

func ensureLeaf(o Options, r Request, ca *KeyPair) (*KeyPair, []Change, error) {
	base := StatePath(o.Dir, r)
	cur, err := loadPair(base)
	action, reason := "created", "missing"
	switch {
	case err == nil:
		reason = Staleness(cur, r, ca, o.Params.KeyAlgorithm, o.Now, o.RenewBefore)
		if reason == "" && o.Renew != nil && o.Renew(r.Key()) {
			reason = "renewal asked; it expires " + cur.Cert.NotAfter.UTC().Format(time.RFC3339)
		}
		if reason == "" {
			return cur, nil, nil
		}
		action = "renewed"
	case !errors.Is(err, fs.ErrNotExist):
		action, reason = "renewed", "unreadable: "+err.Error()
	}
	kp, err := Issue(r, ca, o.Params.KeyAlgorithm, o.Now, o.Params.CertValidity, o.Rand)
	if err != nil {
		return nil, nil, err
	}
	if err := o.savePair(base, kp); err != nil {
		return nil, nil, err
	}
	return kp, []Change{{Key: r.Key(), Action: action, Reason: reason}}, nil
}

func ensureSA(o Options) (crypto.Signer, []Change, error) {
	path := filepath.Join(o.Dir, "sa.key")
	data, err := os.ReadFile(path)
	if err == nil {
		k, err := ParseKey(data)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %v; restore it (tokens signed with it stop working if it changes) or remove it to create a new one", path, err)
		}
		return k, nil, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	k, err := ServiceAccountKey(o.Params.KeyAlgorithm, o.Rand)
	if err != nil {
		return nil, nil, err
	}
	pemKey, err := EncodeKey(k)
	if err != nil {
		return nil, nil, err
	}
	pub, err := EncodePublicKey(k.Public())
	if err != nil {
		return nil, nil, err
	}
	if err := o.write(filepath.Join(o.Dir, "sa.pub"), pub, 0o644); err != nil {
		return nil, nil, err
	}
	if err := o.write(path, pemKey, 0o600); err != nil {
		return nil, nil, err
	}
	return k, []Change{{Key: "sa", Action: "created", Reason: "missing"}}, nil
}

// removeGoneNodes removes the certificates of nodes no longer in the inventory: a master's, or
// a worker's serving certificate.
func removeGoneNodes(o Options) ([]Change, error) {
	entries, err := os.ReadDir(filepath.Join(o.Dir, "nodes"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ch []Change
	for _, e := range entries {
		listed := func(m Master) bool { return m.Name == e.Name() }
		if slices.ContainsFunc(o.Masters, listed) {
			continue
		}
		if slices.ContainsFunc(o.Workers, listed) {
			// A master that became a worker keeps only what a worker has.
			if err := o.keepOnly(e.Name(), KubeletServerCert+".crt", KubeletServerCert+".key"); err != nil {
				return nil, err
			}
			continue
		}
		if slices.ContainsFunc(o.Etcd, listed) {
			// A master that became an etcd host keeps only etcd's certificates.
			if err := o.keepOnly(e.Name(), "etcd"); err != nil {
				return nil, err
			}
			continue
		}
		if !o.DryRun {
			if err := os.RemoveAll(filepath.Join(o.Dir, "nodes", e.Name())); err != nil {
				return nil, err
			}
		}
		ch = append(ch, Change{Key: e.Name(), Action: "removed", Reason: "no longer a node of the inventory"})
	}
	return ch, nil
}

// hosts are the hosts Ensure issues certificates for.
func (o Options) hosts() Hosts { return Hosts{Masters: o.Masters, Workers: o.Workers, Etcd: o.Etcd} }

// keepOnly removes node's certificates but the entries of its directory named keep (nothing in
// a dry run).
func (o Options) keepOnly(node string, keep ...string) error {
	dir := filepath.Join(o.Dir, "nodes", node)
	entries, err := os.ReadDir(dir)
	if err != nil || o.DryRun {
		return err
	}
	for _, e := range entries {
		if !slices.Contains(keep, e.Name()) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// write writes one file of the material atomically, or nothing in a dry run.
func (o Options) write(file string, data []byte, mode os.FileMode) error {
	if o.DryRun {
		return nil
	}
	return fsx.WriteFile(file, data, mode)
}

// savePair writes a key pair, or nothing in a dry run.
func (o Options) savePair(base string, kp *KeyPair) error {
	if o.DryRun {
		return nil
	}
	return savePair(base, kp)
}

func loadPair(base string) (*KeyPair, error) {
	cdata, err := os.ReadFile(base + ".crt")
	if err != nil {
		return nil, err
	}
	kdata, err := os.ReadFile(base + ".key")
	if err != nil {
		return nil, err
	}
	c, err := ParseCert(cdata)
	if err != nil {
		return nil, fmt.Errorf("%s.crt: %v", base, err)
	}
	k, err := ParseKey(kdata)
	if err != nil {
		return nil, fmt.Errorf("%s.key: %v", base, err)
	}
	if !samePublicKey(c, k) {
		return nil, fmt.Errorf("%s.key does not belong to %s.crt", base, base)
	}
	return &KeyPair{Cert: c, Key: k}, nil
}

// LoadPair reads <base>.crt and <base>.key.
func LoadPair(certFile, keyFile string) (*KeyPair, error) {
	cdata, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	kdata, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	c, err := ParseCert(cdata)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", certFile, err)
	}
	k, err := ParseKey(kdata)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", keyFile, err)
	}
	if !samePublicKey(c, k) {
		return nil, fmt.Errorf("%s does not belong to %s", keyFile, certFile)
	}
	return &KeyPair{Cert: c, Key: k}, nil
}

func savePair(base string, kp *KeyPair) error {
	c, k, err := kp.PEM()
	if err != nil {
		return err
	}
	// A crash between the two writes leaves a key that does not match the certificate: the
	// next run reads that as unreadable and re-issues the pair.
	if err := fsx.WriteFile(base+".key", k, 0o600); err != nil {
		return err
	}
	return fsx.WriteFile(base+".crt", c, 0o644)
}

// lockDir takes an exclusive lock on dir/.lock so two kforge runs never issue into the same
// state at once; the returned function releases it.
func lockDir(dir string) (func(), error) {
	unlock, err := fsx.TryLock(filepath.Join(dir, ".lock"))
	if errors.Is(err, fsx.ErrLocked) {
		return nil, fmt.Errorf("%s is in use by another kforge run; wait for it to finish", dir)
	}
	return unlock, err
}

// Load reads the named Cluster rows (CAs and cluster-wide certificates) from dir, creating and
// changing nothing: for commands that only use the cluster's credentials, such as reaching etcd.
// Missing material is an error that names the file.
func Load(dir string, names ...string) (*Set, error) {
	set := &Set{CAs: map[string]*KeyPair{}, Certs: map[string]*KeyPair{}}
	for _, name := range names {
		spec, ok := Lookup(name)
		if !ok || spec.Scope != Cluster {
			return nil, fmt.Errorf("pki: %q is not a cluster-wide certificate", name)
		}
		base := StatePath(dir, Request{Spec: spec})
		kp, err := loadPair(base)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no %s certificate in %s (%s.crt): kforge apply creates the cluster's PKI; is --state-dir the cluster's?", name, dir, base)
		}
		if err != nil {
			return nil, err
		}
		if spec.IsCA() {
			set.CAs[name] = kp
		} else {
			set.Certs[Key(name, "")] = kp
		}
	}
	return set, nil
}

// SaveIssued writes into dir the leaves that changes say were created or renewed, each pair
// atomically, under dir's lock: for a set issued as a dry run (Options.DryRun) and checked
// before it is kept (kforge certs renew).
func (s *Set) SaveIssued(dir string, changes []Change) error {
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	for _, ch := range changes {
		if ch.Action != "created" && ch.Action != "renewed" {
			continue
		}
		name, node, _ := strings.Cut(ch.Key, "@")
		spec, ok := Lookup(name)
		kp := s.Certs[ch.Key]
		if !ok || spec.IsCA() || kp == nil {
			return fmt.Errorf("pki: cannot save %s: not a leaf of the set", ch.Key)
		}
		if err := savePair(StatePath(dir, Request{Spec: spec, Node: node}), kp); err != nil {
			return err
		}
	}
	return nil
}
