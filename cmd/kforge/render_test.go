package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/state"
	"k8s.io/client-go/tools/clientcmd"
)

const renderInventory = `apiVersion: kforge.dev/v1alpha1
kind: Cluster
name: lab
controlPlaneEndpoint: 198.51.100.10:6443
masters:
  - name: m1
    address: 198.51.100.11
  - name: m2
    address: 198.51.100.12
workers:
  - name: w1
    address: 198.51.100.21
`

func TestRenderWritesTreesAndReusesPKI(t *testing.T) {
	dir := t.TempDir()
	inv := filepath.Join(dir, "kforge.yaml")
	if err := os.WriteFile(inv, []byte(renderInventory), 0o644); err != nil {
		t.Fatal(err)
	}
	out, state := filepath.Join(dir, "out"), filepath.Join(dir, "state")
	const token = "abcdef.0123456789abcdef"
	t.Setenv("KFORGE_BOOTSTRAP_TOKEN", token)
	code, stdout, stderr := kforge(t, "-i", inv, "--state-dir", state, "render", "-o", out)
	if code != 0 || stdout != "" {
		t.Fatalf("render: code %d stdout %q stderr %s", code, stdout, stderr)
	}
	if strings.Contains(stderr, token) {
		t.Error("the bootstrap token appeared in the output")
	}
	if !strings.Contains(stderr, "pki: created apiserver@m2: missing") {
		t.Errorf("first render does not say what it created:\n%s", stderr)
	}
	for _, f := range []string{
		"m1/etc/kubernetes/pki/apiserver.key", "m1/etc/kubernetes/super-admin.conf", "m1/etc/kubernetes/manifests/etcd.yaml",
		"m2/etc/kubernetes/pki/etcd/peer.key", "m2/var/lib/kubelet/config.yaml", "m2/etc/containerd/config.toml",
		"w1/etc/kubernetes/bootstrap-kubelet.conf", "w1/etc/kubernetes/pki/ca.crt", "w1/etc/systemd/system/kubelet.service", "admin.conf",
	} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	for _, f := range []string{"m2/etc/kubernetes/super-admin.conf", "w1/etc/kubernetes/pki/ca.key", "w1/etc/kubernetes/manifests/etcd.yaml"} {
		if _, err := os.Stat(filepath.Join(out, f)); err == nil {
			t.Errorf("%s should not be rendered", f)
		}
	}
	// Every private key and kubeconfig is 0600.
	filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
		if strings.HasSuffix(p, ".key") || strings.HasSuffix(p, ".conf") && strings.Contains(p, "/etc/kubernetes/") {
			if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
				t.Errorf("%s has mode %v", p, fi.Mode().Perm())
			}
		}
		return nil
	})
	cfg, err := clientcmd.LoadFromFile(filepath.Join(out, "w1/etc/kubernetes/bootstrap-kubelet.conf"))
	if err != nil || cfg.AuthInfos[pki.BootstrapTokenUser].Token != token || cfg.Clusters["lab"].Server != "https://198.51.100.10:6443" {
		t.Errorf("bootstrap kubeconfig: %v %+v", err, cfg)
	}
	ca1, _ := os.ReadFile(filepath.Join(out, "m1/etc/kubernetes/pki/ca.crt"))
	apiserver1, _ := os.ReadFile(filepath.Join(out, "m2/etc/kubernetes/pki/apiserver.crt"))

	// Second render: same PKI, nothing re-issued, the directory replaced.
	os.WriteFile(filepath.Join(out, "m1", "stale"), []byte("x"), 0o644)
	code, _, stderr = kforge(t, "-i", inv, "--state-dir", state, "render", "-o", out)
	if code != 0 || strings.Contains(stderr, "pki:") {
		t.Fatalf("second render: code %d, stderr %s", code, stderr)
	}
	ca2, _ := os.ReadFile(filepath.Join(out, "m1/etc/kubernetes/pki/ca.crt"))
	apiserver2, _ := os.ReadFile(filepath.Join(out, "m2/etc/kubernetes/pki/apiserver.crt"))
	if !bytes.Equal(ca1, ca2) || !bytes.Equal(apiserver1, apiserver2) {
		t.Error("second render re-issued certificates")
	}
	if _, err := os.Stat(filepath.Join(out, "m1", "stale")); err == nil {
		t.Error("a stale file survived the re-render")
	}

	// A non-empty directory kforge did not write is refused.
	foreign := filepath.Join(dir, "foreign")
	os.MkdirAll(foreign, 0o755)
	os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("mine"), 0o644)
	code, _, stderr = kforge(t, "-i", inv, "--state-dir", state, "render", "-o", foreign)
	if code == 0 || !strings.Contains(stderr, "not written by kforge render") {
		t.Errorf("foreign dir: code %d stderr %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(foreign, "notes.txt")); err != nil {
		t.Error("render deleted a user's file")
	}
}

func TestRenderUsesExternalCARelativeToInventory(t *testing.T) {
	dir := t.TempDir()
	// A user-made CA, written where the inventory points (relative path).
	first := filepath.Join(dir, "first")
	inv0 := filepath.Join(dir, "kforge.yaml")
	os.WriteFile(inv0, []byte(renderInventory), 0o644)
	if code, _, stderr := kforge(t, "-i", inv0, "--state-dir", first, "render", "-o", filepath.Join(dir, "out0")); code != 0 {
		t.Fatal(stderr)
	}
	os.MkdirAll(filepath.Join(dir, "secrets"), 0o700)
	copyFile(t, filepath.Join(first, "pki", "ca.crt"), filepath.Join(dir, "secrets", "ca.crt"))
	copyFile(t, filepath.Join(first, "pki", "ca.key"), filepath.Join(dir, "secrets", "ca.key"))

	inv := filepath.Join(dir, "ext.yaml")
	os.WriteFile(inv, []byte(renderInventory+"pki:\n  externalCA: {cert: secrets/ca.crt, key: secrets/ca.key}\n"), 0o644)
	out, state := filepath.Join(dir, "out"), filepath.Join(dir, "state")
	code, _, stderr := kforge(t, "-i", inv, "--state-dir", state, "render", "-o", out)
	if code != 0 || !strings.Contains(stderr, "using pki.externalCA") {
		t.Fatalf("code %d: %s", code, stderr)
	}
	want, _ := os.ReadFile(filepath.Join(dir, "secrets", "ca.crt"))
	got, _ := os.ReadFile(filepath.Join(out, "m1/etc/kubernetes/pki/ca.crt"))
	if !bytes.Equal(want, got) {
		t.Error("rendered ca.crt is not the external CA")
	}
	if _, err := os.Stat(filepath.Join(state, "pki", "ca.key")); err == nil {
		t.Error("the external CA key was copied into the state dir")
	}

	// Pointing the same state at a different CA is refused, with what to do.
	copyFile(t, filepath.Join(state, "pki", "front-proxy-ca.crt"), filepath.Join(dir, "secrets", "ca.crt"))
	copyFile(t, filepath.Join(state, "pki", "front-proxy-ca.key"), filepath.Join(dir, "secrets", "ca.key"))
	code, _, stderr = kforge(t, "-i", inv, "--state-dir", state, "render", "-o", out)
	if code == 0 || !strings.Contains(stderr, "never replaces a CA silently") {
		t.Errorf("different external CA: code %d, %s", code, stderr)
	}
}

// TestStateDirOwnsLogAndLock: a command on a cluster logs into its state dir's logs/, and a
// second run on the same state dir while one holds it is refused, naming the dir.
func TestStateDirOwnsLogAndLock(t *testing.T) {
	dir := t.TempDir()
	inv, st := filepath.Join(dir, "kforge.yaml"), filepath.Join(dir, "state")
	os.WriteFile(inv, []byte(renderInventory), 0o644)
	if code, _, stderr := kforge(t, "-i", inv, "--state-dir", st, "render", "-o", filepath.Join(dir, "out")); code != 0 {
		t.Fatal(stderr)
	}
	if logs, _ := filepath.Glob(filepath.Join(st, "logs", "kforge-*.log")); len(logs) != 1 {
		t.Errorf("debug logs in the state dir: %v, want one", logs)
	}
	unlock, err := state.At(st).Lock()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	code, _, stderr := kforge(t, "-i", inv, "--state-dir", st, "render", "-o", filepath.Join(dir, "out"))
	if code == 0 || !strings.Contains(stderr, st+" is in use by another kforge run") {
		t.Errorf("second run while the state dir is held: code %d, stderr %q", code, stderr)
	}
}
