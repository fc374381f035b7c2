package bundle

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/remote/remotetest"
	"github.com/kforge/kforge/scripts"
)

func TestPlanHost(t *testing.T) {
	m := &Manifest{
		Files: []File{
			{Name: "kubelet", Install: "/usr/bin/kubelet", SHA256: "aa"},
			{Name: "kubectl", Install: "/usr/bin/kubectl", SHA256: "bb"},
		},
		Images: []Image{
			{Component: "kube-apiserver", Name: "registry.k8s.io/kube-apiserver:v1.36.3", Digest: "sha256:1", ControlPlaneOnly: true},
			{Component: "pause", Name: "registry.k8s.io/pause:3.10.2", Digest: "sha256:2"},
			{Component: "kube-proxy", Name: "registry.k8s.io/kube-proxy:v1.36.3", Digest: "sha256:3"},
			{Component: "local-path-provisioner", Name: "docker.io/rancher/local-path-provisioner:v0.0.30", Digest: "sha256:4"},
			{Component: "local-path-helper", Name: "kforge.dev/local-path-helper:v0.0.30", Digest: "sha256:5"},
		},
	}
	names := func(p HostPlan) string {
		var s []string
		for _, f := range p.Install {
			s = append(s, f.Name)
		}
		for _, im := range p.Import {
			s = append(s, im.Component)
		}
		return strings.Join(s, ",")
	}
	for _, tc := range []struct {
		name string
		have HostState
		need Need
		want string
	}{
		{"empty worker: no tools", HostState{}, Need{}, "kubelet,pause,kube-proxy"},
		{"empty worker of a cluster with local volumes", HostState{}, Need{LocalVolumes: true}, "kubelet,pause,kube-proxy,local-path-provisioner,local-path-helper"},
		{"a master's first shipment", HostState{}, Need{ControlPlane: true, Only: func(n string) bool { return n == "kubelet" || n == "kube-apiserver" }}, "kubelet,kube-apiserver"},
		{"empty master", HostState{}, Need{ControlPlane: true}, "kubelet,kubectl,kube-apiserver,pause,kube-proxy"},
		{"complete master", HostState{
			Files:  map[string]string{"/usr/bin/kubelet": "aa", "/usr/bin/kubectl": "bb"},
			Images: map[string]string{"registry.k8s.io/kube-apiserver:v1.36.3": "sha256:1", "registry.k8s.io/pause:3.10.2": "sha256:2", "registry.k8s.io/kube-proxy:v1.36.3": "sha256:3"},
		}, Need{ControlPlane: true}, ""},
		{"other kubelet, other pause, extra images", HostState{
			Files:  map[string]string{"/usr/bin/kubelet": "zz", "/usr/bin/kubectl": "bb"},
			Images: map[string]string{"registry.k8s.io/pause:3.10.2": "sha256:9", "registry.k8s.io/kube-proxy:v1.36.3": "sha256:3", "docker.io/library/nginx:1": "sha256:7"},
		}, Need{}, "kubelet,pause"},
	} {
		if got := names(PlanHost(m, tc.have, tc.need)); got != tc.want {
			t.Errorf("%s: plan %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestParseState(t *testing.T) {
	out := "arch=x86_64\n0123  /usr/bin/kubelet\n4567  /opt/cni/bin/bridge\n" + imagesMarker + "\n" +
		"REF                          TYPE                                       DIGEST        SIZE     PLATFORMS   LABELS \n" +
		"registry.k8s.io/pause:3.10.2 application/vnd.oci.image.manifest.v1+json sha256:abcd 1.1 MiB linux/amd64 io.cri-containerd.image=managed,io.cri-containerd.pinned=pinned \n" +
		"registry.k8s.io/etcd:3.6.8-0 application/vnd.oci.image.manifest.v1+json sha256:ef01 20.3 MiB linux/amd64 io.cri-containerd.image=managed \n"
	s, err := ParseState([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if s.Arch != "x86_64" {
		t.Errorf("arch %q", s.Arch)
	}
	if s.Files["/usr/bin/kubelet"] != "0123" || s.Files["/opt/cni/bin/bridge"] != "4567" || len(s.Files) != 2 {
		t.Errorf("files %v", s.Files)
	}
	if s.Images["registry.k8s.io/pause:3.10.2"] != "sha256:abcd" || s.Images["registry.k8s.io/etcd:3.6.8-0"] != "sha256:ef01" || len(s.Images) != 2 {
		t.Errorf("images %v", s.Images)
	}
	if !s.Pinned["registry.k8s.io/pause:3.10.2"] || s.Pinned["registry.k8s.io/etcd:3.6.8-0"] {
		t.Errorf("pinned %v, want pause only", s.Pinned)
	}
	if _, err := ParseState([]byte("ctr: failed to dial\n")); err == nil {
		t.Error("output without the marker accepted")
	}
	if _, err := ParseImageList("something else\n"); err == nil {
		t.Error("image list with a foreign header accepted")
	}
}

// fakeNode makes a remotetest.Host answer StateCommand from its files and an image store that
// its `ctr images import` fills by reading the uploaded archive's index.json.
type fakeNode struct {
	*remotetest.Host
	mu      sync.Mutex
	images  map[string]string
	pinned  map[string]bool // images labelled PinLabel
	imports []string
	arch    string
	// recorded are the commands that recorded installed files (InstalledRecord).
	recorded []string
}

func newFakeNode(t *testing.T, name string, m *Manifest) *fakeNode {
	n := &fakeNode{Host: remotetest.New(name), images: map[string]string{}, pinned: map[string]bool{}, arch: "x86_64"}
	n.Handle(func(c string) bool {
		return strings.HasSuffix(c, scripts.Body("bundle-state")) && strings.Contains(c, "list_images=1\n")
	}, func(_ context.Context, c remote.Cmd) error {
		fmt.Fprintf(c.Stdout, "arch=%s\n", n.arch)
		for _, f := range m.Files {
			if ff, ok := n.File(f.Install); ok {
				sum := sha256.Sum256(ff.Data)
				fmt.Fprintf(c.Stdout, "%s  %s\n", hex.EncodeToString(sum[:]), f.Install)
			}
		}
		fmt.Fprintf(c.Stdout, "%s\nREF TYPE DIGEST SIZE PLATFORMS LABELS\n", imagesMarker)
		n.mu.Lock()
		defer n.mu.Unlock()
		for name, d := range n.images {
			labels := "io.cri-containerd.image=managed"
			if n.pinned[name] {
				labels += "," + PinLabel
			}
			fmt.Fprintf(c.Stdout, "%s application/vnd.oci.image.manifest.v1+json %s 1.0 MiB linux/amd64 %s\n", name, d, labels)
		}
		return nil
	})
	// ctr -n k8s.io images label NAME LABEL >/dev/null && ...: pins images containerd has.
	n.Handle(func(c string) bool { return strings.HasPrefix(c, "ctr -n k8s.io images label ") }, func(_ context.Context, c remote.Cmd) error {
		n.mu.Lock()
		defer n.mu.Unlock()
		for _, one := range strings.Split(c.Command, " && ") {
			f := strings.Fields(one) // ctr -n k8s.io images label NAME LABEL >/dev/null
			if len(f) != 8 || f[6] != PinLabel {
				return n.Exit(c.Command, 1, "unexpected label command "+one)
			}
			if _, ok := n.images[f[5]]; !ok {
				return n.Exit(c.Command, 1, "ctr: image \""+f[5]+"\": not found")
			}
			n.pinned[f[5]] = true
		}
		return nil
	})
	n.Handle(func(c string) bool {
		return strings.HasPrefix(c, "record="+InstalledRecord+"\n") && strings.HasSuffix(c, scripts.Body("bundle-record"))
	}, func(_ context.Context, c remote.Cmd) error {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.recorded = append(n.recorded, c.Command)
		return nil
	})
	n.Handle(func(c string) bool { return strings.HasPrefix(c, "ctr -n k8s.io images import ") }, func(_ context.Context, c remote.Cmd) error {
		p := strings.Fields(c.Command)[6] // ctr -n k8s.io images import --no-unpack FILE
		f, ok := n.File(p)
		if !ok {
			return n.Exit(c.Command, 1, "ctr: open "+p+": no such file or directory")
		}
		if !strings.Contains(c.Command, "&& rm -f -- "+p) {
			t.Errorf("import of %s does not delete the archive: %s", p, c.Command)
		}
		tr := tar.NewReader(bytes.NewReader(f.Data))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return n.Exit(c.Command, 1, "ctr: unrecognized image format")
			}
			if err != nil {
				return err
			}
			if h.Name == "index.json" {
				idx, err := v1.ParseIndexManifest(tr)
				if err != nil {
					return err
				}
				n.mu.Lock()
				for _, d := range idx.Manifests {
					n.images[d.Annotations["io.containerd.image.name"]] = d.Digest.String()
				}
				n.imports = append(n.imports, p)
				n.mu.Unlock()
				return nil
			}
		}
	})
	return n
}

func TestShipAllUploadsOnlyWhatDiffers(t *testing.T) {
	dir, m := tinyBundle(t)
	ctx := context.Background()
	a, b := newFakeNode(t, "master-1", m), newFakeNode(t, "worker-1", m)
	targets := []Target{{Host: a, Need: Need{ControlPlane: true}}, {Host: b}}
	var mu sync.Mutex
	sent := map[string]int64{}
	progress := func(host, artifact string, n, total int64) {
		mu.Lock()
		defer mu.Unlock()
		if n > total {
			t.Errorf("%s %s: progress %d of %d", host, artifact, n, total)
		}
		sent[host+" "+artifact] = n
	}

	plans, err := ShipAll(ctx, dir, m, targets, remote.Limits{Hosts: 2, LargeUploads: 1}, progress)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []*fakeNode{a, b} {
		if p := plans[n.Name()]; len(p.Install) != 1 || len(p.Import) != 1 {
			t.Errorf("%s: first run plan %+v, want one file and one image", n.Name(), p)
		}
		f, ok := n.File("/usr/bin/hello")
		if !ok || f.Mode != 0o755 {
			t.Errorf("%s: /usr/bin/hello not installed with mode 0755: %+v", n.Name(), f)
		}
		if n.images[m.Images[0].Name] != m.Images[0].Digest || len(n.imports) != 1 || !n.pinned[m.Images[0].Name] {
			t.Errorf("%s: images %v (pinned %v) after %v imports; want the bundle's image imported and pinned", n.Name(), n.images, n.pinned, n.imports)
		}
		if got := sent[n.Name()+" images/pause.tar"]; got != m.Images[0].Size {
			t.Errorf("%s: progress for the image ended at %d of %d", n.Name(), got, m.Images[0].Size)
		}
	}

	// The second run finds everything in place: no upload, no import.
	uploadsBefore := len(a.Uploads()) + len(b.Uploads())
	plans, err = ShipAll(ctx, dir, m, targets, remote.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range plans {
		if !p.Empty() {
			t.Errorf("%s: second run plan %+v, want nothing", name, p)
		}
	}
	if n := len(a.Uploads()) + len(b.Uploads()); n != uploadsBefore {
		t.Errorf("second run uploaded %d files", n-uploadsBefore)
	}
	if len(a.imports)+len(b.imports) != 2 {
		t.Errorf("second run imported again: %v %v", a.imports, b.imports)
	}

	// A host whose binary was changed gets only that binary again.
	b.SetFile("/usr/bin/hello", []byte("tampered"), 0o755)
	plans, err = ShipAll(ctx, dir, m, targets, remote.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := plans["worker-1"]; len(p.Install) != 1 || len(p.Import) != 0 || !plans["master-1"].Empty() {
		t.Errorf("after tampering: plans %+v", plans)
	}

	// An image imported before kforge pinned them (or unpinned by hand) is pinned, not uploaded.
	b.pinned = map[string]bool{}
	uploadsBefore = len(b.Uploads())
	plans, err = ShipAll(ctx, dir, m, targets, remote.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := plans["worker-1"]; len(p.Pin) != 1 || len(p.Import)+len(p.Install) != 0 || len(b.Uploads()) != uploadsBefore || !b.pinned[m.Images[0].Name] {
		t.Errorf("unpinned image: plan %+v, %d uploads, pinned %v; want it pinned and nothing uploaded", p, len(b.Uploads())-uploadsBefore, b.pinned)
	}
}

func TestShipReportsAFailedImport(t *testing.T) {
	dir, m := tinyBundle(t)
	n := newFakeNode(t, "node-1", m)
	n.OnPrefix("ctr -n k8s.io images import ", remotetest.Result{Exit: 1, Stderr: "ctr: failed to extract layer: no space left on device"})
	err := remote.Each(context.Background(), []remote.Host{n}, remote.Limits{}, func(ctx context.Context, h remote.Host) error {
		_, err := Ship(ctx, h, dir, m, Need{}, nil)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "node-1") || !strings.Contains(err.Error(), "import image registry.k8s.io/pause:3.10.2") {
		t.Fatalf("error %v; want the host and the image named", err)
	}
	var ce *remote.CommandError
	if !errors.As(err, &ce) {
		t.Errorf("the *remote.CommandError is not reachable through %v", err)
	}
}

// TestStateCommandRunsInAShell runs StateCommand through sh with a stand-in ctr on PATH, so
// the command line's shell syntax is checked (the fake host above does not use a shell).
func TestStateCommandRunsInAShell(t *testing.T) {
	if _, err := exec.LookPath("sha256sum"); err != nil {
		t.Skip("sha256sum not installed")
	}
	tmp := t.TempDir()
	present := filepath.Join(tmp, "it's here")
	os.WriteFile(present, []byte("x"), 0o644)
	bin := filepath.Join(tmp, "bin")
	os.Mkdir(bin, 0o755)
	os.WriteFile(filepath.Join(bin, "ctr"), []byte("#!/bin/sh\necho 'REF TYPE DIGEST SIZE PLATFORMS LABELS'\necho \"registry.k8s.io/pause:3.10.2 application/vnd.oci.image.manifest.v1+json sha256:ab 1 KiB linux/amd64 -\"\n"), 0o755)
	m := &Manifest{Files: []File{{Name: "a", Install: present}, {Name: "b", Install: filepath.Join(tmp, "absent")}},
		Images: []Image{{Name: "registry.k8s.io/pause:3.10.2"}}}
	cmd := exec.Command("sh", "-c", StateCommand(m))
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s, err := ParseState(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	sum := sha256.Sum256([]byte("x"))
	if s.Files[present] != hex.EncodeToString(sum[:]) || len(s.Files) != 1 {
		t.Errorf("files %v", s.Files)
	}
	if s.Images["registry.k8s.io/pause:3.10.2"] != "sha256:ab" {
		t.Errorf("images %v", s.Images)
	}
	if uname, err := exec.Command("uname", "-m").Output(); err == nil && s.Arch != strings.TrimSpace(string(uname)) {
		t.Errorf("arch %q, uname -m says %q", s.Arch, uname)
	}

	// Asked about no image, the command leaves containerd alone: a host whose runtime was just
	// installed has ctr but no containerd running yet.
	os.WriteFile(filepath.Join(bin, "ctr"), []byte("#!/bin/sh\necho 'ctr: cannot access socket' >&2\nexit 1\n"), 0o755)
	m.Images = nil
	cmd = exec.Command("sh", "-c", StateCommand(m))
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
	if out, err = cmd.CombinedOutput(); err != nil {
		t.Fatalf("without images: %v\n%s", err, out)
	}
	if s, err = ParseState(out); err != nil || len(s.Images) != 0 || len(s.Files) != 1 {
		t.Errorf("without images: %+v %v", s, err)
	}
}

func TestShipRefusesAHostOfAnotherArchitecture(t *testing.T) {
	dir, m := tinyBundle(t)
	n := newFakeNode(t, "pi-1", m)
	n.arch = "aarch64"
	_, err := Ship(context.Background(), n, dir, m, Need{}, nil)
	if err == nil || !strings.Contains(err.Error(), "linux/amd64") || !strings.Contains(err.Error(), "aarch64") {
		t.Fatalf("Ship to an aarch64 host: %v", err)
	}
	if len(n.Uploads()) != 0 {
		t.Errorf("uploaded %v to a host that cannot run the bundle", n.Uploads())
	}
}

// TestInstalledRecordSkipsHashing runs recordCommand and StateCommand through sh: a file as
// kforge installed it (same size, time, inode) is reported with its recorded sha256 without
// being read; a file changed since is hashed; recording again replaces the line.
func TestInstalledRecordSkipsHashing(t *testing.T) {
	if _, err := exec.LookPath("sha256sum"); err != nil {
		t.Skip("sha256sum not installed")
	}
	tmp := t.TempDir()
	record := filepath.Join(tmp, "state", "bundle-files")
	a, b := filepath.Join(tmp, "kubelet"), filepath.Join(tmp, "kubectl")
	os.WriteFile(a, []byte("kubelet"), 0o755)
	os.WriteFile(b, []byte("kubectl"), 0o755)
	sh := func(script string) string {
		t.Helper()
		bin := filepath.Join(tmp, "bin")
		os.MkdirAll(bin, 0o755)
		os.WriteFile(filepath.Join(bin, "ctr"), []byte("#!/bin/sh\necho 'REF TYPE DIGEST SIZE PLATFORMS LABELS'\n"), 0o755)
		cmd := exec.Command("sh", "-c", script)
		cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return string(out)
	}
	// Recorded sums that are not the content's: seeing them proves the files were not read.
	fakeA, fakeB := strings.Repeat("a", 64), strings.Repeat("b", 64)
	files := []File{{Install: a, SHA256: fakeA}, {Install: b, SHA256: fakeB}}
	sh(recordCommand(files, record))
	sh(recordCommand(files[:1], record)) // again: replaced, not added
	if data, _ := os.ReadFile(record); strings.Count(string(data), "\n") != 2 {
		t.Fatalf("record after recording kubelet twice:\n%s", data)
	}
	m := &Manifest{Files: files}
	s, err := ParseState([]byte(sh(stateCommand(m, record))))
	if err != nil {
		t.Fatal(err)
	}
	if s.Files[a] != fakeA || s.Files[b] != fakeB || len(s.Hashed) != 0 {
		t.Errorf("files as installed: %v (hashed %v); want the recorded sums", s.Files, s.Hashed)
	}
	// kubectl replaced (another inode and time): hashed.
	os.Remove(b)
	os.WriteFile(b, []byte("kubectl 2"), 0o755)
	s, err = ParseState([]byte(sh(stateCommand(m, record))))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("kubectl 2"))
	if s.Files[b] != hex.EncodeToString(sum[:]) || s.Files[a] != fakeA || !s.Hashed[b] || s.Hashed[a] {
		t.Errorf("after replacing kubectl: %v (hashed %v)", s.Files, s.Hashed)
	}
}

// TestShipViaChecksWhatTheMastersGave: a node that took a binary and an image from the masters'
// registries gets uploaded only what they did not give right: the binary with the bundle's
// sha256 is kept, the image pulled with another digest than the bundle's (a tampered registry)
// is replaced by the bundle's archive, imported and pinned.
func TestShipViaChecksWhatTheMastersGave(t *testing.T) {
	dir, m := tinyBundle(t)
	n := newFakeNode(t, "worker-1", m)
	hello, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(m.Files[0].Path)))
	if err != nil {
		t.Fatal(err)
	}
	mirrors := []string{"https://198.51.100.2:5000"}
	n.Handle(func(c string) bool {
		return strings.Contains(c, "fetch() {") && strings.Contains(c, mirrors[0])
	}, func(_ context.Context, c remote.Cmd) error {
		n.SetFile(m.Files[0].Install, hello, 0o755)
		n.mu.Lock()
		n.images[m.Images[0].Name] = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
		n.pinned[m.Images[0].Name] = true
		n.mu.Unlock()
		fmt.Fprintf(c.Stdout, "file %s\nimage %s\n", m.Files[0].Install, m.Images[0].Name)
		return nil
	})
	var plan HostPlan
	var got Fetched
	err = remote.Each(context.Background(), []remote.Host{n}, remote.Limits{}, func(ctx context.Context, h remote.Host) error {
		plan, got, err = ShipVia(ctx, h, dir, m, Need{}, nil, mirrors, "/etc/kubernetes/pki/ca.crt")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Files) != 1 || len(got.Images) != 1 {
		t.Errorf("taken from the masters: %+v, want the binary and the image", got)
	}
	if len(plan.Install) != 0 || len(plan.Import) != 1 || plan.Import[0].Name != m.Images[0].Name {
		t.Errorf("uploaded %+v, want only the image whose digest was not the bundle's", plan)
	}
	if len(n.Uploads()) != 1 || n.images[m.Images[0].Name] != m.Images[0].Digest || len(n.imports) != 1 {
		t.Errorf("%d uploads, images %v after imports %v; want the bundle's image imported over the tampered one", len(n.Uploads()), n.images, n.imports)
	}
	if len(n.recorded) == 0 || !strings.Contains(n.recorded[len(n.recorded)-1], m.Files[0].Install) {
		t.Errorf("the binary taken from the masters is not recorded as installed: %v", n.recorded)
	}
}
