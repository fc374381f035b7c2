package pki

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEncryptionKeys: the first Ensure makes one 32-byte key, the next ones keep it; printing
// a key shows its name only; a damaged file is an error that names it and says what to do.
func TestEncryptionKeys(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	o := Options{Dir: dir, Params: testParams(), Masters: testMasters[:1], Now: t0, Rand: seeded(31)}
	first, _ := ensure(t, o)
	o.Rand = seeded(32)
	again, ch := ensure(t, o)
	if len(ch) != 0 || !bytes.Equal(first.Encryption.Keys[0].Secret, again.Encryption.Keys[0].Secret) {
		t.Errorf("second Ensure: changes %v, key kept %v", ch, bytes.Equal(first.Encryption.Keys[0].Secret, again.Encryption.Keys[0].Secret))
	}
	k := first.Encryption.Keys[0]
	for _, f := range []string{"%v", "%s", "%+v", "%#v"} {
		if out := fmt.Sprintf(f, k) + fmt.Sprintf(f, first.Encryption); strings.Contains(out, k.Base64()) || strings.Contains(out, fmt.Sprint([]byte(k.Secret))) {
			t.Errorf("%s prints the key: %s", f, out)
		}
	}
	for _, bad := range []string{"keys: []\n", "keys:\n- name: a\n  secret: AAAA\n", "keys:\n- name: a\n  secret: " + k.Base64() + "\n- name: a\n  secret: " + k.Base64() + "\n", "other: 1\n"} {
		if err := os.WriteFile(filepath.Join(dir, EncryptionFile), []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadEncryptionKeys(dir); err == nil || !strings.Contains(err.Error(), EncryptionFile) || !strings.Contains(err.Error(), "restore it") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// TestWorkersGetServingCertificatesOnly: a worker gets its kubelet's serving certificate (its
// name and address, signed by the cluster CA) and nothing else; a worker that leaves has it
// removed; a master that becomes a worker keeps only that one.
func TestWorkersGetServingCertificatesOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	w1 := Master{Name: "w1", IP: "198.51.100.21", Address: "w1.lab.example.test"}
	o := Options{Dir: dir, Params: testParams(), Masters: testMasters[:2], Workers: []Master{w1}, Now: t0, Rand: seeded(33)}
	set, _ := ensure(t, o)
	kp := set.Get(KubeletServerCert, "w1")
	if kp == nil {
		t.Fatal("no kubelet-server@w1")
	}
	if c := kp.Cert; c.Subject.CommonName != "system:node:w1" || !slices.Equal(c.DNSNames, []string{"w1", "w1.lab.example.test"}) || len(c.IPAddresses) != 1 || c.IPAddresses[0].String() != "198.51.100.21" || !SignedBy(c, set.CAs[CA].Cert) {
		t.Errorf("kubelet-server@w1: %s %v %v", c.Subject, c.DNSNames, c.IPAddresses)
	}
	for k := range set.Certs {
		if strings.HasSuffix(k, "@w1") && k != KubeletServerCert+"@w1" {
			t.Errorf("worker w1 got %s", k)
		}
	}
	// m2 becomes a worker, w1 leaves.
	o.Masters, o.Workers = testMasters[:1], []Master{testMasters[1]}
	set, ch := ensure(t, o)
	if got := changed(ch); !strings.HasPrefix(got["w1"], "removed") {
		t.Errorf("w1 left: %v", got)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "nodes", "m2"))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"kubelet-server.crt", "kubelet-server.key"}) || set.Get(KubeletServerCert, "m2") == nil {
		t.Errorf("m2 as a worker keeps %v", names)
	}
}

// TestKeyRotationPhases: a rotation adds a key after the old one, puts it first, then keeps it
// alone; it is recorded in the state dir so a second start resumes it, and Ensure reports it.
func TestKeyRotationPhases(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	o := Options{Dir: dir, Params: testParams(), Masters: testMasters[:1], Now: t0, Rand: seeded(34)}
	first, _ := ensure(t, o)
	old := first.Encryption.Keys[0].Name
	ks, err := StartKeyRotation(dir, t0.Add(time.Hour), seeded(35))
	if err != nil {
		t.Fatal(err)
	}
	names := func(ks *EncryptionKeys) string {
		var n []string
		for _, k := range ks.Keys {
			n = append(n, k.Name)
		}
		return strings.Join(n, ",")
	}
	nw := ks.Rotation.New
	if ks.Rotation.Phase != KeyAdd || names(ks) != old+","+nw || nw == old {
		t.Fatalf("start: %s %s", ks.Rotation.Phase, names(ks))
	}
	again, err := StartKeyRotation(dir, t0.Add(2*time.Hour), seeded(36))
	if err != nil || again.Rotation.New != nw || names(again) != names(ks) {
		t.Errorf("a second start did not resume: %v %v", again, err)
	}
	if _, ch := ensure(t, o); len(ch) != 1 || ch[0].Action != "warning" || !strings.Contains(ch[0].Reason, "phase add") {
		t.Errorf("Ensure during the rotation: %v", ch)
	}
	for _, c := range []struct {
		p    KeyPhase
		want string
	}{{KeyWrite, nw + "," + old}, {KeyRewrite, nw + "," + old}, {KeyAdd, old + "," + nw}, {KeyDrop, nw}} {
		next, err := ks.Advance(c.p)
		if err != nil || names(next) != c.want || next.Rotation.Phase != c.p {
			t.Errorf("%s: %s %v, want %s", c.p, names(next), err, c.want)
		}
	}
}
