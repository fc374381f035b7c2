package bundle

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/release"
)

// testBundle builds (or takes from the cache) the v1.36.3 bundle once per test binary.
var testBundle struct {
	once sync.Once
	dir  string
	m    *Manifest
	err  error
}

func builtBundle(t *testing.T) (string, *Manifest) {
	t.Helper()
	needGo(t)
	testBundle.once.Do(func() {
		dir, err := os.MkdirTemp("", "kforge-bundle-test-")
		if err != nil {
			testBundle.err = err
			return
		}
		testBundle.dir = filepath.Join(dir, "bundle")
		start := time.Now()
		testBundle.m, testBundle.err = Build(context.Background(), Options{
			BuildOptions: BuildOptions{Version: "v1.36.3", Report: testenv.Report(t)},
			Out:          testBundle.dir,
		})
		t.Logf("bundle build: %s", time.Since(start).Round(time.Millisecond))
	})
	if testBundle.err != nil {
		t.Fatal(testBundle.err)
	}
	return testBundle.dir, testBundle.m
}

func TestMain(m *testing.M) {
	code := m.Run()
	if testBundle.dir != "" {
		os.RemoveAll(filepath.Dir(testBundle.dir))
	}
	os.Exit(code)
}

func TestBuiltBundleVerifiesAndReportsVersions(t *testing.T) {
	dir, m := builtBundle(t)
	ctx := context.Background()
	start := time.Now()
	if _, err := Verify(ctx, dir); err != nil {
		var ve *VerifyError
		if errors.As(err, &ve) {
			t.Fatalf("%v\n%s", err, strings.Join(ve.Details(), "\n"))
		}
		t.Fatal(err)
	}
	var size int64
	for _, f := range m.Files {
		size += f.Size
	}
	for _, im := range m.Images {
		size += im.Size
	}
	t.Logf("verify: %s; bundle: %d files, %d images, %d MB", time.Since(start).Round(time.Millisecond), len(m.Files), len(m.Images), size>>20)

	for bin, args := range map[string][]string{"kubelet": {"--version"}, "kubeadm": {"version", "-o", "short"}, "kubectl": {"version", "--client"}} {
		out, err := exec.CommandContext(ctx, filepath.Join(dir, "bin", bin), args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "v1.36.3") {
			t.Errorf("bundle's %s %v: %v, output %q; want v1.36.3", bin, args, err, out)
		}
	}
	for name := range CNIPlugins {
		cmd := exec.CommandContext(ctx, filepath.Join(dir, "cni", name))
		cmd.Env = []string{"CNI_COMMAND=VERSION"}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "supportedVersions") {
			t.Errorf("bundle's CNI plugin %s VERSION: %v, output %q", name, err, out)
		}
	}

	r, err := release.For(m.Releases[0].Kubernetes)
	if err != nil {
		t.Fatal(err)
	}
	names := r.Images("").ByComponent()
	for _, c := range ImageComponents {
		im, ok := m.Image(c)
		if !ok {
			t.Errorf("no %s image in the manifest", c)
			continue
		}
		if im.Name != names[c] {
			t.Errorf("image %s named %s, want %s", c, im.Name, names[c])
		}
		if im.ControlPlaneOnly != controlPlaneOnly[c] {
			t.Errorf("image %s controlPlaneOnly %v", c, im.ControlPlaneOnly)
		}
	}
	if im, _ := m.Image("etcd"); im.Name != "registry.k8s.io/etcd:3.6.8-0" {
		t.Errorf("etcd image %s, want registry.k8s.io/etcd:3.6.8-0 (kubeadm v1.36.3)", im.Name)
	}
}

func TestRebuildFromCacheIsIdentical(t *testing.T) {
	dir, m := builtBundle(t)
	out := filepath.Join(t.TempDir(), "again")
	start := time.Now()
	m2, err := Build(context.Background(), Options{BuildOptions: BuildOptions{Version: "v1.36.3"}, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("warm rebuild: %s", time.Since(start).Round(time.Millisecond))
	for i := range m.Images {
		if !reflect.DeepEqual(m.Images[i], m2.Images[i]) {
			t.Errorf("image %s differs on rebuild: %+v vs %+v", m.Images[i].Name, m.Images[i], m2.Images[i])
		}
	}
	for i := range m.Files {
		if !reflect.DeepEqual(m.Files[i], m2.Files[i]) {
			t.Errorf("file %s differs on rebuild", m.Files[i].Name)
		}
	}
	// Writing into a bundle file in place leaves the cache alone: rebuilding over the damaged
	// bundle gives the original artifacts back.
	if err := os.WriteFile(filepath.Join(out, "bin", "kubectl"), []byte("overwritten"), 0o755); err != nil {
		t.Fatal(err)
	}
	m3, err := Build(context.Background(), Options{BuildOptions: BuildOptions{Version: "v1.36.3"}, Out: out})
	if err != nil {
		t.Fatalf("rebuild over a bundle: %v", err)
	}
	if f, _ := m3.File("kubectl"); !reflect.DeepEqual(f, m.Files[2]) || f.Name != "kubectl" {
		t.Errorf("after overwriting the bundle's kubectl, a rebuild gives %+v, want %+v", f, m.Files[2])
	}
	if _, err := Verify(context.Background(), out); err != nil {
		t.Errorf("verify the rebuilt bundle: %v", err)
	}
	// A foreign directory is refused.
	foreign := t.TempDir()
	os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("mine"), 0o644)
	if _, err := Build(context.Background(), Options{BuildOptions: BuildOptions{Version: "v1.36.3"}, Out: foreign}); err == nil || !strings.Contains(err.Error(), "holds no bundle") {
		t.Errorf("build into a foreign directory: %v", err)
	}
	_ = dir
}

// TestNetfilterImagesWork unpacks the kube-proxy and flannel images and runs their iptables
// inside them (chroot): every match and target kube-proxy and flannel use must load with its
// shared libraries, and the binaries must start.
func TestNetfilterImagesWork(t *testing.T) {
	dir, m := builtBundle(t)
	why := ""
	if os.Geteuid() != 0 {
		why = "chroot needs root"
	}
	testenv.Require(t, testenv.Missing(why))
	for _, c := range []string{"kube-proxy", "flannel"} {
		im, _ := m.Image(c)
		root := t.TempDir()
		unpackImage(t, filepath.Join(dir, im.Path), root)
		run := func(args ...string) string {
			out, err := exec.Command("chroot", append([]string{root}, args...)...).CombinedOutput()
			if err != nil {
				t.Errorf("%s image: %s: %v\n%s", c, strings.Join(args, " "), err, out)
			}
			return string(out)
		}
		for _, ipt := range []string{"iptables", "iptables-legacy", "ip6tables", "iptables-nft"} {
			for _, ext := range [][]string{
				{"-m", "statistic", "-h"}, {"-m", "conntrack", "-h"}, {"-m", "comment", "-h"},
				{"-m", "addrtype", "-h"}, {"-m", "mark", "-h"}, {"-m", "multiport", "-h"},
				{"-j", "MASQUERADE", "-h"}, {"-j", "DNAT", "-h"}, {"-j", "MARK", "-h"}, {"-j", "REJECT", "-h"},
			} {
				if ipt == "ip6tables" && ext[1] == "DNAT" {
					continue
				}
				run(append([]string{"/usr/sbin/" + ipt}, ext...)...)
			}
		}
		run("/usr/sbin/iptables-save", "--version")
		run("/usr/sbin/nft", "--version")
		switch c {
		case "kube-proxy":
			if out := run("/usr/local/bin/kube-proxy", "--version"); !strings.Contains(out, "v1.36.3") {
				t.Errorf("kube-proxy in its image reports %q", out)
			}
		case "flannel":
			if out := run("/opt/bin/flanneld", "--version"); !strings.Contains(out, m.Releases[0].Flannel) {
				t.Errorf("flanneld in its image reports %q", out)
			}
		}
	}
}

// TestLocalPathImagesRun unpacks the local volumes' images and runs their entrypoints: the
// provisioner reports the catalogue's version (stamped as its scripts/build does), and the helper
// makes and removes a volume's directory as the provisioner asks it to.
func TestLocalPathImagesRun(t *testing.T) {
	dir, m := builtBundle(t)
	entry := func(c string) string {
		t.Helper()
		im, ok := m.Image(c)
		if !ok {
			t.Fatalf("no %s image in the manifest", c)
		}
		root := t.TempDir()
		unpackImage(t, filepath.Join(dir, im.Path), root)
		img, err := tarball.ImageFromPath(filepath.Join(dir, im.Path), nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil || len(cfg.Config.Entrypoint) != 1 {
			t.Fatalf("%s image's config: %+v, %v; want one entrypoint", c, cfg, err)
		}
		return filepath.Join(root, cfg.Config.Entrypoint[0])
	}
	out, err := exec.Command(entry("local-path-provisioner"), "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "version "+m.Releases[0].LocalPath) {
		t.Errorf("local-path-provisioner --version: %v, %q; want version %s", err, out, m.Releases[0].LocalPath)
	}
	helper := entry("local-path-helper")
	vol := filepath.Join(t.TempDir(), "pvc-1_default_data")
	for _, a := range []string{"create", "delete"} {
		out, err := exec.Command(helper, "-p", vol, "-s", "1024", "-m", "Filesystem", "-a", a).CombinedOutput()
		_, statErr := os.Stat(vol)
		if err != nil || (statErr == nil) != (a == "create") {
			t.Errorf("local-path-helper -a %s: %v, %q; the directory after it: %v", a, err, out, statErr)
		}
	}
}

// unpackImage extracts the layers of the image archive p into root.
func unpackImage(t *testing.T, p, root string) {
	t.Helper()
	img, err := tarball.ImageFromPath(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(root, filepath.Clean("/"+h.Name))
			switch h.Typeflag {
			case tar.TypeDir:
				os.MkdirAll(dst, os.FileMode(h.Mode).Perm())
			case tar.TypeSymlink:
				os.MkdirAll(filepath.Dir(dst), 0o755)
				if err := os.Symlink(h.Linkname, dst); err != nil {
					t.Fatal(err)
				}
			case tar.TypeReg:
				os.MkdirAll(filepath.Dir(dst), 0o755)
				f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode).Perm())
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.Copy(f, tr); err != nil {
					t.Fatal(err)
				}
				f.Close()
			}
		}
		rc.Close()
	}
}

func TestBundleImportsIntoContainerd(t *testing.T) {
	dir, m := builtBundle(t)
	c := startContainerd(t)
	ctx := context.Background()
	for _, im := range m.Images {
		if _, err := c.ctr(ctx, "-n", "k8s.io", "images", "import", filepath.Join(dir, im.Path)); err != nil {
			t.Fatal(err)
		}
	}
	got := c.images(t)
	for _, im := range m.Images {
		if got[im.Name] != im.Digest {
			t.Errorf("containerd has %s at %q, want %s", im.Name, got[im.Name], im.Digest)
		}
	}
}

// BenchmarkWarmBundleBuild measures a bundle build when every artifact is cached: the cost a
// warm CI run or a user's second `kforge bundle build` pays.
func BenchmarkWarmBundleBuild(b *testing.B) {
	if _, err := exec.LookPath("go"); err != nil {
		b.Skip("the go command is not on PATH")
	}
	ctx := context.Background()
	out := filepath.Join(b.TempDir(), "bundle")
	m, err := Build(ctx, Options{BuildOptions: BuildOptions{Version: "v1.36.3"}, Out: out})
	if err != nil {
		b.Fatal(err)
	}
	var size int64
	for _, f := range m.Files {
		size += f.Size
	}
	for _, im := range m.Images {
		size += im.Size
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := Build(ctx, Options{BuildOptions: BuildOptions{Version: "v1.36.3"}, Out: out}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(size)/(1<<20), "bundle-MB")
}
