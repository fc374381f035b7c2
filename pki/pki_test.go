package pki

import (
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// seeded is a deterministic randomness source for tests.
func seeded(seed uint64) io.Reader { return rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}) }

func testParams() Params {
	return Params{
		ClusterName: "lab", DNSDomain: "cluster.local", ServiceSubnet: "10.96.0.0/12",
		ControlPlaneEndpoint: "lb.example.test:6443", APIServerCertSANs: []string{"api.example.test", "198.51.100.200"},
		KeyAlgorithm: ECDSAP256, CertValidity: 365 * 24 * time.Hour, CAValidity: 3650 * 24 * time.Hour,
	}
}

var testMasters = []Master{{Name: "m1", IP: "198.51.100.11"}, {Name: "m2", IP: "198.51.100.12"}, {Name: "m3", IP: "198.51.100.13"}}

func ipStrings(ips []net.IP) []string {
	var s []string
	for _, ip := range ips {
		s = append(s, ip.String())
	}
	slices.Sort(s)
	return s
}

// TestTableMatchesKubeadm pins every row's subject, usages and SANs to what kubeadm v1.36
// (certlist.go, pkiutil, phases/kubeconfig) sets, and kforge's own row (kforge-registry) to the
// master's name and addresses.
func TestTableMatchesKubeadm(t *testing.T) {
	p, m := testParams(), testMasters[1]
	type want struct {
		cn, org, signer string
		ext             []x509.ExtKeyUsage
		dns, ips        []string
	}
	sa, ca := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	etcdDNS, etcdIPs := []string{"localhost", "m2"}, []string{"127.0.0.1", "198.51.100.12", "::1"}
	wants := map[string]want{
		"ca":                       {cn: "kubernetes", dns: []string{"kubernetes"}},
		"front-proxy-ca":           {cn: "front-proxy-ca", dns: []string{"front-proxy-ca"}},
		"etcd-ca":                  {cn: "etcd-ca", dns: []string{"etcd-ca"}},
		"apiserver":                {cn: "kube-apiserver", signer: "ca", ext: sa, dns: []string{"api.example.test", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "lb.example.test", "m2"}, ips: []string{"10.96.0.1", "198.51.100.12", "198.51.100.200"}},
		"apiserver-kubelet-client": {cn: "kube-apiserver-kubelet-client", signer: "ca", ext: ca},
		"front-proxy-client":       {cn: "front-proxy-client", signer: "front-proxy-ca", ext: ca},
		"etcd-server":              {cn: "m2", signer: "etcd-ca", ext: both, dns: etcdDNS, ips: etcdIPs},
		"etcd-peer":                {cn: "m2", signer: "etcd-ca", ext: both, dns: etcdDNS, ips: etcdIPs},
		"etcd-healthcheck-client":  {cn: "kube-etcd-healthcheck-client", signer: "etcd-ca", ext: ca},
		"apiserver-etcd-client":    {cn: "kube-apiserver-etcd-client", signer: "etcd-ca", ext: ca},
		"kforge-registry":          {cn: "kforge-registry", signer: "ca", ext: sa, dns: []string{"m2"}, ips: []string{"198.51.100.12"}},
		"admin.conf":               {cn: "kubernetes-admin", org: "kubeadm:cluster-admins", signer: "ca", ext: ca},
		"super-admin.conf":         {cn: "kubernetes-super-admin", org: "system:masters", signer: "ca", ext: ca},
		"controller-manager.conf":  {cn: "system:kube-controller-manager", signer: "ca", ext: ca},
		"scheduler.conf":           {cn: "system:kube-scheduler", signer: "ca", ext: ca},
		"kubelet.conf":             {cn: "system:node:m2", org: "system:nodes", signer: "ca", ext: ca},
		"kubelet-server":           {cn: "system:node:m2", org: "system:nodes", signer: "ca", ext: sa, dns: []string{"m2"}, ips: []string{"198.51.100.12"}},
	}
	rows := Table()
	if len(rows) != len(wants) {
		t.Fatalf("table has %d rows, want %d", len(rows), len(wants))
	}
	for _, s := range rows {
		w, ok := wants[s.Name]
		if !ok {
			t.Errorf("unexpected row %s", s.Name)
			continue
		}
		r, err := s.Resolve(p, m)
		if err != nil {
			t.Fatal(err)
		}
		if r.Subject.CommonName != w.cn || strings.Join(r.Subject.Organization, ",") != w.org {
			t.Errorf("%s: subject CN=%q O=%v, want CN=%q O=%q", s.Name, r.Subject.CommonName, r.Subject.Organization, w.cn, w.org)
		}
		if s.SignedBy != w.signer || !slices.Equal(s.ExtKeyUsage, w.ext) {
			t.Errorf("%s: signer %q usages %v, want %q %v", s.Name, s.SignedBy, s.ExtKeyUsage, w.signer, w.ext)
		}
		if !slices.Equal(r.DNSNames, w.dns) || !slices.Equal(ipStrings(r.IPs), w.ips) {
			t.Errorf("%s: SANs %v %v, want %v %v", s.Name, r.DNSNames, ipStrings(r.IPs), w.dns, w.ips)
		}
	}
}

// TestIssueEveryRow is the per-row property test: for every row and several masters and key
// algorithms, the issued certificate carries exactly the request's subject, SANs and usages,
// verifies against its CA for its usages, has the key it was issued with, and the validity
// the params ask for.
func TestIssueEveryRow(t *testing.T) {
	algs := []KeyAlgorithm{ECDSAP256, ECDSAP384, RSA2048}
	if testing.Short() {
		algs = algs[:2]
	}
	for i, alg := range algs {
		p := testParams()
		p.KeyAlgorithm = alg
		p.CertValidity = time.Duration(i+1) * 97 * time.Hour
		random := seeded(uint64(i))
		cas := map[string]*KeyPair{}
		reqs, err := Requests(p, Hosts{Masters: testMasters})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range reqs {
			var signer *KeyPair
			validity := p.CertValidity
			if r.Spec.IsCA() {
				validity = p.CAValidity
			} else {
				signer = cas[r.Spec.SignedBy]
			}
			kp, err := Issue(r, signer, alg, t0, validity, random)
			if err != nil {
				t.Fatalf("%s %s: %v", alg, r.Key(), err)
			}
			if r.Spec.IsCA() {
				cas[r.Spec.Name] = kp
				signer = kp
			}
			c := kp.Cert
			if c.Subject.CommonName != r.Subject.CommonName || !slices.Equal(c.Subject.Organization, r.Subject.Organization) {
				t.Errorf("%s %s: subject %v", alg, r.Key(), c.Subject)
			}
			if !slices.Equal(c.DNSNames, r.DNSNames) || !slices.Equal(ipStrings(c.IPAddresses), ipStrings(r.IPs)) {
				t.Errorf("%s %s: SANs %v %v", alg, r.Key(), c.DNSNames, c.IPAddresses)
			}
			if c.IsCA != r.Spec.IsCA() || !c.BasicConstraintsValid || c.KeyUsage != r.Spec.KeyUsage() || !slices.Equal(c.ExtKeyUsage, r.Spec.ExtKeyUsage) {
				t.Errorf("%s %s: CA %v usages %v %v", alg, r.Key(), c.IsCA, c.KeyUsage, c.ExtKeyUsage)
			}
			if !c.NotBefore.Equal(t0.Add(-Backdate)) || !c.NotAfter.Equal(t0.Add(validity)) {
				t.Errorf("%s %s: validity %v..%v", alg, r.Key(), c.NotBefore, c.NotAfter)
			}
			if AlgorithmOf(c.PublicKey) != alg {
				t.Errorf("%s %s: key algorithm %s", alg, r.Key(), AlgorithmOf(c.PublicKey))
			}
			if err := Verify(kp, signer.Cert, r.Spec.ExtKeyUsage, t0); err != nil {
				t.Errorf("%s %s: does not verify against %s: %v", alg, r.Key(), r.Spec.SignedBy, err)
			}
			if r.Spec.IsCA() {
				continue
			}
			// A certificate from another CA of the same name must not verify.
			other, _ := Issue(Request{Spec: Spec{Name: "x", Subject: fixed(signer.Cert.Subject.CommonName)}, Subject: signer.Cert.Subject}, nil, alg, t0, time.Hour, random)
			if Verify(kp, other.Cert, nil, t0) == nil {
				t.Errorf("%s %s: verifies against a foreign CA", alg, r.Key())
			}
			if got := Staleness(kp, r, signer, alg, t0, 24*time.Hour); got != "" {
				t.Errorf("%s %s: fresh certificate is stale: %s", alg, r.Key(), got)
			}
		}
	}
}

func TestSignRefusesMismatchedCA(t *testing.T) {
	reqs, _ := Requests(testParams(), Hosts{Masters: testMasters[:1]})
	ca, err := Issue(reqs[0], nil, ECDSAP256, t0, time.Hour, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Issue(reqs[0], ca, ECDSAP256, t0, time.Hour, seeded(1)); err == nil {
		t.Error("a CA row signed by another CA was accepted")
	}
	if _, err := Issue(reqs[3], nil, ECDSAP256, t0, time.Hour, seeded(1)); err == nil {
		t.Error("a leaf without a signer was accepted")
	}
}

func TestSPKIPinAndKeyRoundTrip(t *testing.T) {
	for _, alg := range []KeyAlgorithm{ECDSAP256, ECDSAP384, RSA2048} {
		reqs, _ := Requests(testParams(), Hosts{Masters: testMasters[:1]})
		kp, err := Issue(reqs[0], nil, alg, t0, time.Hour, seeded(2))
		if err != nil {
			t.Fatal(err)
		}
		pin := SPKIPin(kp.Cert)
		if !strings.HasPrefix(pin, "sha256:") || len(pin) != 7+64 {
			t.Errorf("pin %q", pin)
		}
		other, _ := Issue(reqs[0], nil, alg, t0, time.Hour, seeded(3))
		if SPKIPin(other.Cert) == pin {
			t.Error("two CAs share a pin")
		}
		pemCert, pemKey, err := kp.PEM()
		if err != nil {
			t.Fatal(err)
		}
		k, err := ParseKey(pemKey)
		if err != nil || !samePublicKey(kp.Cert, k) {
			t.Errorf("%s: key round trip: %v", alg, err)
		}
		c, err := ParseCert(pemCert)
		if err != nil || !c.Equal(kp.Cert) {
			t.Errorf("%s: cert round trip: %v", alg, err)
		}
	}
	if _, err := ParseKeyAlgorithm("dsa-1024"); err == nil {
		t.Error("unknown algorithm accepted")
	}
}

func TestFirstServiceIP(t *testing.T) {
	for in, want := range map[string]string{"10.96.0.0/12": "10.96.0.1", "10.100.3.0/24": "10.100.3.1", "fd00::/108": "fd00::1"} {
		ip, err := FirstServiceIP(in)
		if err != nil || ip.String() != want {
			t.Errorf("%s: %v %v, want %s", in, ip, err, want)
		}
	}
	if _, err := FirstServiceIP("10.0.0.1/32"); err == nil {
		t.Error("a /32 has no service IP")
	}
}

func ensure(t *testing.T, o Options) (*Set, []Change) {
	t.Helper()
	s, ch, err := Ensure(o)
	if err != nil {
		t.Fatal(err)
	}
	return s, ch
}

func changed(ch []Change) map[string]string {
	m := map[string]string{}
	for _, c := range ch {
		m[c.Key] = c.Action + ": " + c.Reason
	}
	return m
}

func TestEnsureReusesAndReissuesWithReasons(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	o := Options{Dir: dir, Params: testParams(), Masters: testMasters[:1], Now: t0, Rand: seeded(4)}
	set, ch := ensure(t, o)
	reqs, _ := Requests(o.Params, Hosts{Masters: o.Masters})
	if len(ch) != len(reqs)+2 { // every row plus sa and the encryption key
		t.Fatalf("first run: %d changes, want %d: %v", len(ch), len(reqs)+2, ch)
	}
	if set.Encryption == nil || len(set.Encryption.Keys) != 1 || len(set.Encryption.Keys[0].Secret) != 32 {
		t.Errorf("first run: encryption keys %v", set.Encryption)
	} else if fi, _ := os.Stat(filepath.Join(dir, EncryptionFile)); fi == nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v", EncryptionFile, fi)
	}
	// Permissions: dir 0700, keys 0600.
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("state dir mode %v", fi.Mode().Perm())
	}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if strings.HasSuffix(p, ".key") {
			if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
				t.Errorf("%s mode %v", p, fi.Mode().Perm())
			}
		}
		return nil
	})

	// Second run: nothing changes, same certificates.
	set2, ch := ensure(t, o)
	if len(ch) != 0 {
		t.Fatalf("second run changed: %v", ch)
	}
	if !set2.Get("apiserver", "m1").Cert.Equal(set.Get("apiserver", "m1").Cert) || !set2.Get(CA, "").Cert.Equal(set.Get(CA, "").Cert) {
		t.Error("second run re-issued")
	}

	// Grow to three masters and add a SAN: new masters' certs created, m1's apiserver renewed
	// for its SAN, the rest kept.
	o.Masters = testMasters
	o.Params.APIServerCertSANs = append(o.Params.APIServerCertSANs, "api2.example.test")
	_, ch = ensure(t, o)
	got := changed(ch)
	if !strings.Contains(got["apiserver@m1"], "renewed: SANs changed: added api2.example.test") {
		t.Errorf("apiserver@m1: %q", got["apiserver@m1"])
	}
	for _, k := range []string{"apiserver@m2", "etcd-server@m3", "etcd-peer@m2", "kubelet.conf@m3"} {
		if got[k] != "created: missing" {
			t.Errorf("%s: %q", k, got[k])
		}
	}
	if _, ok := got["etcd-server@m1"]; ok || len(got) != 1+2*5 { // five rows per master, kubelet-server the fifth
		t.Errorf("unexpected changes: %v", got)
	}

	// Shrink back to m1 and m3: m2's material is removed.
	o.Masters = []Master{testMasters[0], testMasters[2]}
	_, ch = ensure(t, o)
	if got := changed(ch); len(got) != 1 || !strings.HasPrefix(got["m2"], "removed") {
		t.Errorf("shrink: %v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "nodes", "m2")); !os.IsNotExist(err) {
		t.Error("m2's directory survived")
	}

	// Close to expiry: leaves renewed, CAs only warned about.
	o.Now = t0.Add(o.Params.CertValidity - 10*24*time.Hour)
	_, ch = ensure(t, o)
	got = changed(ch)
	if !strings.HasPrefix(got["front-proxy-client"], "renewed: expires") || strings.HasPrefix(got["ca"], "created") {
		t.Errorf("expiry: %v", got)
	}

	// Subject change (a renamed node keeps its IP): kubelet.conf for the new name is created,
	// the old one removed.
	o.Now = t0
	o.Masters = []Master{{Name: "m1", IP: testMasters[0].IP}, {Name: "m9", IP: testMasters[2].IP}}
	_, ch = ensure(t, o)
	got = changed(ch)
	if got["kubelet.conf@m9"] != "created: missing" || !strings.HasPrefix(got["m3"], "removed") {
		t.Errorf("rename: %v", got)
	}

	// Key algorithm change re-issues every leaf and keeps the CAs.
	o.Params.KeyAlgorithm = ECDSAP384
	_, ch = ensure(t, o)
	got = changed(ch)
	if !strings.Contains(got["apiserver@m1"], "key algorithm was ecdsa-p256, want ecdsa-p384") {
		t.Errorf("algorithm: %v", got["apiserver@m1"])
	}
	if _, ok := got["ca"]; ok {
		t.Errorf("CA touched: %v", got["ca"])
	}
}

func TestEnsureNeverReplacesCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	o := Options{Dir: dir, Params: testParams(), Masters: testMasters[:1], Now: t0, Rand: seeded(5)}
	ensure(t, o)

	// A CA key gone: error naming the file and what to do, nothing regenerated.
	os.Rename(filepath.Join(dir, "etcd/ca.key"), filepath.Join(dir, "etcd/ca.key.bak"))
	if _, _, err := Ensure(o); err == nil || !strings.Contains(err.Error(), "never replaces a CA") || !strings.Contains(err.Error(), "etcd/ca") {
		t.Errorf("missing CA key: %v", err)
	}
	os.Rename(filepath.Join(dir, "etcd/ca.key.bak"), filepath.Join(dir, "etcd/ca.key"))

	// A different external CA than the state's: refused.
	reqs, _ := Requests(o.Params, Hosts{Masters: o.Masters})
	ext, _ := Issue(reqs[0], nil, ECDSAP256, t0, time.Hour*24*3650, seeded(6))
	o.ExternalCA = ext
	if _, _, err := Ensure(o); err == nil || !strings.Contains(err.Error(), "never replaces a CA silently") {
		t.Errorf("conflicting external CA: %v", err)
	}
}

func TestEnsureExternalCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	reqs, _ := Requests(testParams(), Hosts{Masters: testMasters[:1]})
	ext, _ := Issue(reqs[0], nil, RSA2048, t0, time.Hour*24*3650, seeded(7))
	o := Options{Dir: dir, Params: testParams(), Masters: testMasters[:1], Now: t0, Rand: seeded(8), ExternalCA: ext}
	set, _ := ensure(t, o)
	if !set.ExternalCA || !set.Get(CA, "").Cert.Equal(ext.Cert) {
		t.Fatal("external CA not used")
	}
	if err := Verify(set.Get("apiserver", "m1"), ext.Cert, nil, t0); err != nil {
		t.Errorf("apiserver not signed by the external CA: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ca.key")); !os.IsNotExist(err) {
		t.Error("the external CA's key was copied into the state dir")
	}
	if _, ch := ensure(t, o); len(ch) != 0 {
		t.Errorf("second run with external CA changed: %v", ch)
	}
}

// BenchmarkFullSet issues the complete set (3 CAs, every leaf, sa key) for three masters.
func BenchmarkFullSet(b *testing.B) {
	for _, alg := range []KeyAlgorithm{ECDSAP256, RSA2048} {
		b.Run(string(alg), func(b *testing.B) {
			p := testParams()
			p.KeyAlgorithm = alg
			var n int
			for b.Loop() {
				_, ch, err := Ensure(Options{Dir: filepath.Join(b.TempDir(), "pki"), Params: p, Masters: testMasters, Now: t0, Rand: seeded(9)})
				if err != nil {
					b.Fatal(err)
				}
				n = len(ch)
			}
			b.ReportMetric(float64(n), "keys/op")
		})
	}
}

// BenchmarkIssueOnly issues the same set in memory: the signing cost without the state dir's
// file writes.
func BenchmarkIssueOnly(b *testing.B) {
	for _, alg := range []KeyAlgorithm{ECDSAP256, RSA2048} {
		b.Run(string(alg), func(b *testing.B) {
			p := testParams()
			p.KeyAlgorithm = alg
			reqs, err := Requests(p, Hosts{Masters: testMasters})
			if err != nil {
				b.Fatal(err)
			}
			random := seeded(10)
			for b.Loop() {
				cas := map[string]*KeyPair{}
				for _, r := range reqs {
					kp, err := Issue(r, cas[r.Spec.SignedBy], alg, t0, time.Hour, random)
					if err != nil {
						b.Fatal(err)
					}
					if r.Spec.IsCA() {
						cas[r.Spec.Name] = kp
					}
				}
				if _, err := ServiceAccountKey(alg, random); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(reqs)+1), "keys/op")
		})
	}
}

func TestEnsureRefusesExpiredCAAndConcurrentRuns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	o := Options{Dir: dir, Params: testParams(), Masters: testMasters[:1], Now: t0, Rand: seeded(13)}
	ensure(t, o)

	unlock, err := lockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Ensure(o); err == nil || !strings.Contains(err.Error(), "in use by another kforge run") {
		t.Errorf("concurrent run: %v", err)
	}
	unlock()

	o.Now = t0.Add(o.Params.CAValidity + time.Hour)
	if _, _, err := Ensure(o); err == nil || !strings.Contains(err.Error(), "expired") || !strings.Contains(err.Error(), "does not rotate CAs") {
		t.Errorf("expired CA: %v", err)
	}
}

// TestAPIServerCertCoversTheHostAddress: a master reached at an address other than its node IP
// (a public IP or a DNS name) gets that address in its apiserver certificate, so kubectl can
// use it; etcd certificates stay on the node IP.
func TestAPIServerCertCoversTheHostAddress(t *testing.T) {
	spec, _ := Lookup("apiserver")
	for addr, wantDNS := range map[string]bool{"m2.example.test": true, "203.0.113.7": false} {
		r, err := spec.Resolve(testParams(), Master{Name: "m2", IP: "198.51.100.12", Address: addr})
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Contains(r.DNSNames, addr); got != wantDNS {
			t.Errorf("%s: DNS SANs %v", addr, r.DNSNames)
		}
		if got := slices.Contains(ipStrings(r.IPs), addr); got == wantDNS {
			t.Errorf("%s: IP SANs %v", addr, ipStrings(r.IPs))
		}
	}
	etcd, _ := Lookup("etcd-server")
	r, _ := etcd.Resolve(testParams(), Master{Name: "m2", IP: "198.51.100.12", Address: "203.0.113.7"})
	if slices.Contains(ipStrings(r.IPs), "203.0.113.7") {
		t.Errorf("etcd server SANs %v", ipStrings(r.IPs))
	}
}

// TestDualStackNodesAreCertifiedInBothFamilies: a dual-stack node's IPv6 address is a SAN of the
// API server's, the kubelet's and the registry's serving certificates (clients reach them in
// either family); the kubernetes Service IP stays the first family's, as kubeadm has it.
func TestDualStackNodesAreCertifiedInBothFamilies(t *testing.T) {
	p := testParams()
	m := Master{Name: "m1", IP: "198.51.100.11", IPv6: "2001:db8::11"}
	for _, row := range []string{"apiserver", KubeletServerCert, RegistryCert} {
		spec, _ := Lookup(row)
		r, err := spec.Resolve(p, m)
		if err != nil {
			t.Fatal(err)
		}
		if ips := ipStrings(r.IPs); !slices.Contains(ips, "2001:db8::11") || !slices.Contains(ips, "198.51.100.11") {
			t.Errorf("%s: IP SANs %v", row, ips)
		}
	}
	spec, _ := Lookup("apiserver")
	r, _ := spec.Resolve(p, m)
	if ips := ipStrings(r.IPs); ips[0] != "10.96.0.1" {
		t.Errorf("apiserver: IP SANs %v, want the kubernetes Service's first", ips)
	}
}

// TestDryRunWritesNothing: a dry run (kforge plan) reports what Ensure would do, the same
// changes with the same reasons, and leaves the directory exactly as it was: empty, then after
// a real run, unchanged even when a SAN is added.
func TestDryRunWritesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	o := Options{Dir: dir, Params: testParams(), Masters: testMasters[:1], Now: t0, Rand: seeded(21), DryRun: true}
	_, ch, err := Ensure(o)
	reqs, _ := Requests(o.Params, Hosts{Masters: o.Masters})
	if err != nil || len(ch) != len(reqs)+2 { // the leaves and CAs, sa and the encryption key
		t.Fatalf("dry run on nothing: %d changes, %v", len(ch), err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("dry run created %s: %v", dir, err)
	}
	o.DryRun = false
	ensure(t, o)
	listing := func() string {
		var b strings.Builder
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			data, _ := os.ReadFile(p)
			fmt.Fprintf(&b, "%s %x\n", p, sha256.Sum256(data))
			return nil
		})
		return b.String()
	}
	before := listing()
	o.DryRun = true
	o.Params.APIServerCertSANs = append(o.Params.APIServerCertSANs, "api3.example.test")
	_, ch, err = Ensure(o)
	if err != nil || len(ch) != 1 || ch[0].Key != "apiserver@m1" || ch[0].Action != "renewed" || !strings.Contains(ch[0].Reason, "api3.example.test") {
		t.Errorf("dry run with a new SAN: %v, %v", ch, err)
	}
	if after := listing(); after != before {
		t.Errorf("dry run changed the directory:\n%s\nwas\n%s", after, before)
	}
}

// TestRegistryCertOnlyWhenMastersServeTheBundle: the kforge-registry row is issued, per master,
// only for a cluster whose masters serve the bundle.
func TestRegistryCertOnlyWhenMastersServeTheBundle(t *testing.T) {
	for _, serve := range []bool{false, true} {
		p := testParams()
		p.MastersServeBundle = serve
		reqs, err := Requests(p, Hosts{Masters: testMasters})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range reqs {
			if r.Spec.Name == RegistryCert {
				got = append(got, r.Key())
			}
		}
		want := []string(nil)
		if serve {
			want = []string{"kforge-registry@m1", "kforge-registry@m2", "kforge-registry@m3"}
		}
		if !slices.Equal(got, want) {
			t.Errorf("MastersServeBundle %v: %v, want %v", serve, got, want)
		}
	}
}
