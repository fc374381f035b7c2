package pki

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRotationPhases walks a rotation of the cluster and etcd CAs through its phases: who signs,
// who is trusted, which leaves are re-issued, and that the end is a plain set of the new CAs.
func TestRotationPhases(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	o := Options{Dir: dir, Params: testParams(), Masters: testMasters[:2], Now: t0, Rand: seeded(31)}
	before, _ := ensure(t, o)
	oldCA, oldEtcd, oldFP := before.CAs[CA].Cert, before.CAs[EtcdCA].Cert, before.CAs[FrontProxyCA].Cert

	rot, err := StartRotation(dir, []string{CA, EtcdCA}, o.Params, t0.Add(time.Hour), seeded(32))
	if err != nil {
		t.Fatal(err)
	}
	if rot.Phase != PhaseTrust || rot.Old[CA] != SPKIPin(oldCA) {
		t.Fatalf("started rotation: %+v", rot)
	}
	if _, err := StartRotation(dir, []string{FrontProxyCA}, o.Params, t0, seeded(33)); err == nil || !strings.Contains(err.Error(), "in progress") {
		t.Errorf("a second rotation of other CAs: %v", err)
	}
	again, err := StartRotation(dir, []string{CA, EtcdCA}, o.Params, t0, seeded(34))
	if err != nil || again.Phase != PhaseTrust {
		t.Fatalf("resuming: %+v %v", again, err)
	}
	next, err := NextCAs(dir)
	if err != nil || len(next) != 2 || next[CA].Equal(oldCA) || next[CA].Subject.CommonName != "kubernetes" {
		t.Fatalf("next CAs: %v %v", next, err)
	}

	// trust: the old CA signs, both are trusted, the old first; nothing is re-issued.
	set, ch := ensure(t, o)
	if !set.CAs[CA].Cert.Equal(oldCA) || len(set.Trust[CA]) != 2 || !set.Trust[CA][1].Equal(next[CA]) || len(set.Trust[FrontProxyCA]) != 1 {
		t.Errorf("trust phase: signer %s, trust %d/%d", SPKIPin(set.CAs[CA].Cert), len(set.Trust[CA]), len(set.Trust[FrontProxyCA]))
	}
	if got := changed(ch); len(got) != 1 || !strings.Contains(got["cluster,etcd"], "phase trust") {
		t.Errorf("trust phase changes: %v", got)
	}
	if pem := string(set.TrustPEM(CA)); strings.Count(pem, "BEGIN CERTIFICATE") != 2 {
		t.Errorf("ca.crt bundle holds %d certificates", strings.Count(pem, "BEGIN CERTIFICATE"))
	}

	// reissue: the new CAs sign; every leaf of theirs is re-issued; front-proxy's are not.
	if err := AdvanceRotation(dir, rot); err != nil {
		t.Fatal(err)
	}
	set, ch = ensure(t, o)
	got := changed(ch)
	for _, key := range []string{"apiserver@m1", "etcd-peer@m2", "admin.conf", "apiserver-etcd-client"} {
		if got[key] != "renewed: signed by a different CA" {
			t.Errorf("reissue phase, %s: %q", key, got[key])
		}
	}
	if _, ok := got["front-proxy-client"]; ok {
		t.Error("front-proxy-client re-issued though its CA is not rotated")
	}
	if !set.CAs[CA].Cert.Equal(next[CA]) || !set.Trust[CA][0].Equal(next[CA]) || !set.Trust[CA][1].Equal(oldCA) {
		t.Error("reissue phase: the new CA must sign and come first")
	}
	if !SignedBy(set.Get("etcd-server", "m1").Cert, next[EtcdCA]) {
		t.Error("etcd-server not signed by the new etcd CA")
	}

	// drop, then finish: only the new CAs; a second finish (an interrupted one) is harmless.
	if err := AdvanceRotation(dir, rot); err != nil {
		t.Fatal(err)
	}
	set, _ = ensure(t, o)
	if len(set.Trust[CA]) != 1 || len(set.Trust[EtcdCA]) != 1 || !set.Trust[EtcdCA][0].Equal(next[EtcdCA]) {
		t.Error("drop phase: old CA still trusted")
	}
	if err := AdvanceRotation(dir, rot); err == nil {
		t.Error("advancing past drop: no error")
	}
	if err := FinishRotation(dir, rot); err != nil {
		t.Fatal(err)
	}
	if r, err := ReadRotation(dir); r != nil || err != nil {
		t.Errorf("rotation after finish: %v %v", r, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "next")); !os.IsNotExist(err) {
		t.Errorf("next/ left behind: %v", err)
	}
	final, ch := ensure(t, o)
	if len(ch) != 0 || !final.CAs[CA].Cert.Equal(next[CA]) || !final.CAs[EtcdCA].Cert.Equal(next[EtcdCA]) || !final.CAs[FrontProxyCA].Cert.Equal(oldFP) {
		t.Errorf("after finish: changes %v; CA new %v, etcd new %v, front-proxy kept %v", ch,
			final.CAs[CA].Cert.Equal(next[CA]), final.CAs[EtcdCA].Cert.Equal(next[EtcdCA]), final.CAs[FrontProxyCA].Cert.Equal(oldFP))
	}
	if final.CAs[EtcdCA].Cert.Equal(oldEtcd) {
		t.Error("etcd CA not replaced")
	}
}
