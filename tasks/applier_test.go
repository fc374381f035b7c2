package tasks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/remote/remotetest"
	"github.com/kforge/kforge/state"
	"github.com/kforge/kforge/templates"
)

// fakeHost is an in-memory host that answers apply's one-round-trip hash command from its
// own files.
func fakeHost(name string) *remotetest.Host {
	h := remotetest.New(name)
	h.Handle(func(c string) bool { return strings.HasPrefix(c, "for f in") }, func(ctx context.Context, c remote.Cmd) error {
		for _, p := range h.Files() {
			if f, ok := h.File(p); ok && strings.Contains(c.Command, p) {
				sum := sha256.Sum256(f.Data)
				fmt.Fprintf(c.Stdout, "%s  %s\n", hex.EncodeToString(sum[:]), p)
			}
		}
		for _, p := range h.Files() {
			if f, ok := h.File(p); ok && strings.Contains(c.Command, p) {
				fmt.Fprintf(c.Stdout, "meta %o %d:%d %s\n", f.Mode.Perm(), f.UID, f.GID, p)
			}
		}
		return nil
	})
	h.Handle(func(c string) bool { return strings.Contains(c, "systemctl") }, func(context.Context, remote.Cmd) error { return nil })
	return h
}

// TestPushWritesOnlyWhatDiffersAndKubeletRestartsOnlyForItsInputs: the heart of a quiet
// re-run. Files already right are not uploaded; kubelet restarts only when one of its own
// inputs was written, and otherwise is only started if it is not running.
func TestPushWritesOnlyWhatDiffersAndKubeletRestartsOnlyForItsInputs(t *testing.T) {
	ctx := context.Background()
	h := fakeHost("m1")
	files := newHostFiles()
	want := []templates.File{
		{Path: "/etc/kubernetes/manifests/etcd.yaml", Mode: 0o600, Data: []byte("etcd v2")},
		{Path: "/var/lib/kubelet/config.yaml", Mode: 0o644, Data: []byte("kubelet config")},
	}
	files.set("m1", want)
	h.SetFile("/etc/kubernetes/manifests/etcd.yaml", []byte("etcd v1"), 0o600)
	h.SetFile("/var/lib/kubelet/config.yaml", []byte("kubelet config"), 0o644)

	if err := push(ctx, files, h, nil); err != nil {
		t.Fatal(err)
	}
	if got := h.Uploads(); !slices.Equal(got, []string{"/etc/kubernetes/manifests/etcd.yaml"}) {
		t.Errorf("uploaded %v; only the changed manifest should be", got)
	}
	if f, _ := h.File("/etc/kubernetes/manifests/etcd.yaml"); string(f.Data) != "etcd v2" {
		t.Errorf("manifest on host: %q", f.Data)
	}
	msg, err := startKubelet(ctx, files, h)
	if err != nil {
		t.Fatal(err)
	}
	last := h.Commands()[len(h.Commands())-1]
	if strings.Contains(last, "restart kubelet") || !strings.Contains(last, "systemctl start kubelet") || msg != "kubelet unchanged" {
		t.Errorf("a static-pod change restarted kubelet: %q (%s)", last, msg)
	}

	// Now kubelet's own config changes: it is restarted.
	want[1].Data = []byte("kubelet config v2")
	files.set("m1", want)
	if err := push(ctx, files, h, nil); err != nil {
		t.Fatal(err)
	}
	if msg, _ = startKubelet(ctx, files, h); msg != "kubelet restarted" {
		t.Errorf("kubelet config changed, got %q", msg)
	}
	if !strings.Contains(h.Commands()[len(h.Commands())-1], "systemctl restart kubelet") {
		t.Errorf("last command %q", h.Commands()[len(h.Commands())-1])
	}
	// A unit change also reloads systemd.
	files.add("m1", templates.File{Path: hostpath.KubeletUnitPath, Mode: 0o644, Data: []byte("[Service]")})
	push(ctx, files, h, nil)
	startKubelet(ctx, files, h)
	if !strings.HasPrefix(h.Commands()[len(h.Commands())-1], "systemctl daemon-reload") {
		t.Errorf("unit changed without daemon-reload: %q", h.Commands()[len(h.Commands())-1])
	}

	// The same content with another mode, or another owner, is pushed too (a cluster made
	// before kforge tightened a file's mode, or gave etcd its own user).
	files.set("m1", []templates.File{
		{Path: hostpath.KubeletUnitPath, Mode: 0o600, Data: []byte("[Service]")},
		{Path: "/etc/kubernetes/pki/etcd/server.key", Mode: 0o600, Data: []byte("key"), UID: 998, GID: 997},
	})
	h.SetFile("/etc/kubernetes/pki/etcd/server.key", []byte("key"), 0o600)
	before := len(h.Uploads())
	if err := push(ctx, files, h, nil); err != nil {
		t.Fatal(err)
	}
	if got := h.Uploads()[before:]; !slices.Equal(got, []string{hostpath.KubeletUnitPath, "/etc/kubernetes/pki/etcd/server.key"}) {
		t.Errorf("a mode and an owner that differ: uploaded %v", got)
	}
	if f, _ := h.File("/etc/kubernetes/pki/etcd/server.key"); f.UID != 998 || f.GID != 997 {
		t.Errorf("etcd's key owned by %d:%d", f.UID, f.GID)
	}
	if f, _ := h.File(hostpath.KubeletUnitPath); f.Mode != 0o600 {
		t.Errorf("kubelet's unit mode %o", f.Mode)
	}
}

// TestRenderAddsKforgeFilesPerRole: masters get the manifests marker naming their static pods
// (so a re-run's preflight recognises them), every host gets kforge's sysctl file.
func TestRenderAddsKforgeFilesPerRole(t *testing.T) {
	c := cluster(t, "workers:\n  - {name: w1, address: 10.0.0.2}\n")
	a := NewApply(c, Options{State: state.At(t.TempDir())})
	runSteps(t, a.Steps(), "pki", "render")
	paths := func(host string) []string {
		var ps []string
		for _, f := range a.target.files.get(host, nil) {
			ps = append(ps, f.Path)
		}
		return ps
	}
	for _, host := range []string{"m1", "w1"} {
		if !slices.Contains(paths(host), hostpath.SysctlFile) {
			t.Errorf("%s lacks %s", host, hostpath.SysctlFile)
		}
	}
	if !slices.Contains(paths("m1"), "/etc/kubernetes/manifests/.kforge-manifests") || slices.Contains(paths("w1"), "/etc/kubernetes/manifests/.kforge-manifests") {
		t.Errorf("manifests marker: m1 %v, w1 %v", paths("m1"), paths("w1"))
	}
	for _, f := range a.target.files.get("w1", nil) {
		if f.Path == hostpath.BootstrapKubeletConfig && !strings.Contains(string(f.Data), a.rc.token.Value()) {
			t.Error("the worker's bootstrap kubeconfig does not carry the state dir's token")
		}
	}
	// The token is kept across runs, so a re-run rewrites no bootstrap kubeconfig.
	b := NewApply(c, Options{State: a.rc.o.State})
	runSteps(t, b.Steps(), "pki")
	if b.rc.token.Value() != a.rc.token.Value() {
		t.Errorf("second run token %v, first %v", b.rc.token.ID, a.rc.token.ID)
	}
}

func TestEtcdBootFromManifest(t *testing.T) {
	m := []byte("spec:\n  containers:\n  - command:\n    - etcd\n    - --initial-cluster=m1=https://10.0.0.1:2380,m2=https://10.0.0.2:2380\n    - --initial-cluster-state=existing\n    - --name=m2\n")
	b := etcdBootFromManifest(m)
	if b.State != "existing" || len(b.Members) != 2 || b.Members[1] != "m2=https://10.0.0.2:2380" {
		t.Errorf("got %+v", b)
	}
	if b := etcdBootFromManifest([]byte("    - --initial-cluster=m1=https://10.0.0.1:2380\n")); b.State != "new" || len(b.Members) != 1 {
		t.Errorf("a first member: %+v", b)
	}
}

// TestReplacedManifestsAreStaticPodsOnly: a replaced static-pod manifest is one kubelet will
// restart; kforge's marker beside them is not a pod (a re-run that changes the set of static
// pods rewrites it, and waiting for it as a pod failed).
func TestReplacedManifestsAreStaticPodsOnly(t *testing.T) {
	ctx := context.Background()
	h := fakeHost("m1")
	files := newHostFiles()
	h.SetFile(hostpath.ManifestsDir+"/etcd.yaml", []byte("v1"), 0o600)
	h.SetFile(hostpath.ManifestsMarkerPath, []byte("v1"), 0o600)
	files.set("m1", []templates.File{
		{Path: hostpath.ManifestsDir + "/etcd.yaml", Mode: 0o600, Data: []byte("v2")},
		{Path: hostpath.ManifestsMarkerPath, Mode: 0o600, Data: []byte("v2")},
	})
	if err := push(ctx, files, h, nil); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files.replacedManifests("m1") {
		got = append(got, f.Path)
	}
	if !slices.Equal(got, []string{hostpath.ManifestsDir + "/etcd.yaml"}) || files.countWritten("m1") != 2 {
		t.Errorf("replaced %v (written %d), want only the etcd manifest", got, files.countWritten("m1"))
	}
}

// runSteps runs the steps of a command's list named names, in the list's order, and fails the
// test at the first error.
func runSteps(t *testing.T, steps []Step, names ...string) {
	t.Helper()
	ran := 0
	for _, s := range steps {
		if slices.Contains(names, s.Name) {
			if err := s.Run(context.Background(), progress.Discard); err != nil {
				t.Fatalf("%s: %v", s.Name, err)
			}
			ran++
		}
	}
	if ran != len(names) {
		t.Fatalf("the list has %d of the steps %v", ran, names)
	}
}
