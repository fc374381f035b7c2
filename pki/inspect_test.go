package pki

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

// TestRenewBeforeScalesWithValidity: a year's certificates are re-issued 30 days ahead,
// certificates of minutes a third of their life ahead, so a re-run does not re-issue them all.
func TestRenewBeforeScalesWithValidity(t *testing.T) {
	for v, want := range map[time.Duration]time.Duration{
		365 * 24 * time.Hour: DefaultRenewBefore,
		60 * 24 * time.Hour:  20 * 24 * time.Hour,
		5 * time.Minute:      100 * time.Second,
		0:                    DefaultRenewBefore,
	} {
		if got := RenewBefore(v); got != want {
			t.Errorf("RenewBefore(%s) = %s, want %s", v, got, want)
		}
	}
}

// TestRenewAskedIsDryUntilSaved: renewing re-issues exactly the selected leaves with a reason,
// writes nothing, and SaveIssued then keeps them; CAs and other leaves stay.
func TestRenewAskedIsDryUntilSaved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	o := Options{Dir: dir, Params: testParams(), Masters: testMasters[:2], Now: t0, Rand: seeded(21)}
	before, _ := ensure(t, o)

	o.DryRun, o.Now = true, t0.Add(time.Hour)
	o.Renew = func(key string) bool { return strings.HasPrefix(key, "apiserver@") || key == "admin.conf" }
	set, ch := ensure(t, o)
	got := changed(ch)
	for _, key := range []string{"apiserver@m1", "apiserver@m2", "admin.conf"} {
		if !strings.HasPrefix(got[key], "renewed: renewal asked; it expires ") {
			t.Errorf("%s: %q, want renewed because asked", key, got[key])
		}
	}
	if len(got) != 3 {
		t.Errorf("changes %v, want only the three asked for", got)
	}
	if set.CAs[CA].Cert.Equal(before.CAs[CA].Cert) == false || !set.Get("apiserver-kubelet-client", "").Cert.Equal(before.Get("apiserver-kubelet-client", "").Cert) {
		t.Error("a CA or a leaf not asked for changed")
	}
	if set.Get("apiserver", "m1").Cert.Equal(before.Get("apiserver", "m1").Cert) {
		t.Error("apiserver@m1 was not re-issued")
	}
	// Nothing written yet.
	o.DryRun, o.Renew = false, nil
	again, _ := ensure(t, o)
	if !again.Get("apiserver", "m1").Cert.Equal(before.Get("apiserver", "m1").Cert) {
		t.Fatal("the dry run wrote the renewed certificate")
	}
	if err := set.SaveIssued(dir, ch); err != nil {
		t.Fatal(err)
	}
	saved, ch2 := ensure(t, o)
	if len(ch2) != 0 || !saved.Get("apiserver", "m2").Cert.Equal(set.Get("apiserver", "m2").Cert) || !saved.Get("admin.conf", "").Cert.Equal(set.Get("admin.conf", "").Cert) {
		t.Errorf("after SaveIssued the state dir does not hold the renewed set (changes %v)", ch2)
	}
}

// TestInspectNamesIssuerAndDrift: the issuer is the CA that signed a certificate; drift names
// a missing SAN, another CA, and a certificate that is not the state dir's.
func TestInspectNamesIssuerAndDrift(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	o := Options{Dir: dir, Params: testParams(), Masters: testMasters[:1], Now: t0, Rand: seeded(22)}
	set, _ := ensure(t, o)
	reqs, _ := Requests(o.Params, Hosts{Masters: o.Masters})
	certs, errs := StateCerts(dir, reqs)
	if len(errs) != 0 || len(certs) != len(reqs) {
		t.Fatalf("StateCerts: %d certs, errors %v", len(certs), errs)
	}
	cas := StateCAs(certs)
	var apiserver, etcdPeer Request
	for _, r := range reqs {
		switch r.Key() {
		case "apiserver@m1":
			apiserver = r
		case "etcd-peer@m1":
			etcdPeer = r
		}
	}
	fits := Inspect("m1", "apiserver", "/etc/kubernetes/pki/apiserver.crt", certs["apiserver@m1"], cas, Expect{Request: &apiserver, Signer: CA, Alg: ECDSAP256, State: certs["apiserver@m1"]})
	if fits.Issuer != CA || len(fits.Drift) != 0 || !fits.NotAfter.Equal(t0.Add(365*24*time.Hour).UTC()) {
		t.Errorf("state's own apiserver certificate: %+v", fits)
	}
	if in := Inspect("m1", "etcd-peer", "", certs["etcd-peer@m1"], cas, Expect{Request: &etcdPeer, Signer: EtcdCA, Alg: ECDSAP256}); in.Issuer != EtcdCA || len(in.Drift) != 0 {
		t.Errorf("etcd-peer: %+v", in)
	}
	if in := Inspect("state", "ca", "", certs["ca"], cas, Expect{}); in.Issuer != "self-signed" {
		t.Errorf("CA issuer %q, want self-signed", in.Issuer)
	}

	// The inventory gained a SAN; the host holds an older certificate from another CA.
	p := testParams()
	p.APIServerCertSANs = append(p.APIServerCertSANs, "new.example.test")
	wantNow, _ := apiserver.Spec.Resolve(p, testMasters[0])
	other := Options{Dir: filepath.Join(t.TempDir(), "pki"), Params: testParams(), Masters: testMasters[:1], Now: t0, Rand: seeded(23)}
	foreign, _ := ensure(t, other)
	in := Inspect("m1", "apiserver", "", foreign.Get("apiserver", "m1").Cert, cas, Expect{Request: &wantNow, Signer: CA, Alg: ECDSAP256, State: set.Get("apiserver", "m1").Cert})
	joined := strings.Join(in.Drift, " | ")
	for _, want := range []string{"not signed by the state dir's ca", "SANs changed: added new.example.test", "not the state dir's certificate"} {
		if !strings.Contains(joined, want) {
			t.Errorf("drift %q lacks %q", joined, want)
		}
	}
	if !strings.HasPrefix(in.Issuer, "unknown (CN=kubernetes") {
		t.Errorf("issuer of a foreign certificate: %q", in.Issuer)
	}
	caReq := reqs[0]
	if in := Inspect("m1", "ca", "", foreign.CAs[CA].Cert, cas, Expect{Request: &caReq, State: certs["ca"]}); len(in.Drift) != 1 || !strings.Contains(in.Drift[0], "a different CA than the state dir's") {
		t.Errorf("a host's other CA: %v", in.Drift)
	}
}

// TestIssuerOfAKubeletsOwnServingCertificate: the kubelet's self-made serving certificate
// (client-go's GenerateSelfSignedCertKey, as the kubelet calls it: a leaf signed by a CA made
// for it, both in kubelet.crt) is self-signed, not of an unknown issuer; a leaf without its
// issuer stays unknown.
func TestIssuerOfAKubeletsOwnServingCertificate(t *testing.T) {
	certPEM, _, err := certutil.GenerateSelfSignedCertKey("node-1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := ParseCerts(certPEM)
	if err != nil || len(chain) != 2 {
		t.Fatalf("kubelet.crt: %d certificates, %v", len(chain), err)
	}
	if got := IssuerOfChain(chain, nil); !strings.HasPrefix(got, "self-signed (CN=node-1-ca@") {
		t.Errorf("IssuerOfChain = %q, want self-signed by node-1-ca@…", got)
	}
	if got := IssuerOfChain(chain[:1], nil); !strings.HasPrefix(got, "unknown (CN=node-1-ca@") {
		t.Errorf("the leaf alone: %q, want unknown", got)
	}
}
