package bundle

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// tinyBundle writes a bundle directory with one file and one small image and returns it.
func tinyBundle(t *testing.T) (string, *Manifest) {
	t.Helper()
	src := t.TempDir()
	bin := filepath.Join(src, "hello")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := imageSpec{
		Component:  "pause",
		Name:       "registry.k8s.io/pause:3.10.2",
		Entrypoint: []string{"/pause"},
		Files: []imageFile{
			{Path: "/pause", Src: bin},
			{Path: "/usr/sbin/iptables", Link: "xtables-nft-multi"},
		},
	}
	a, err := writeImageArchive(spec, filepath.Join(dir, "images", "pause.tar"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sum, size, err := sha256File(filepath.Join(dir, "images", "pause.tar"))
	if err != nil {
		t.Fatal(err)
	}
	if err := copyFile(bin, filepath.Join(dir, "bin", "hello")); err != nil {
		t.Fatal(err)
	}
	fsum, fsize, err := sha256File(bin)
	if err != nil {
		t.Fatal(err)
	}
	m := &Manifest{
		SchemaVersion: SchemaVersion, Platform: "linux/amd64", Source: "built", Releases: []Versions{{Kubernetes: "v1.36.3"}},
		Files:  []File{{Name: "hello", Path: "bin/hello", SHA256: fsum, Size: fsize, Install: "/usr/bin/hello", Mode: "0755"}},
		Images: []Image{{Component: "pause", Name: spec.Name, Path: "images/pause.tar", SHA256: sum, Size: size, Digest: a.Digest, ID: a.ID}},
	}
	if err := writeManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	return dir, m
}

func TestImageArchiveIsReproducibleAndVerifies(t *testing.T) {
	dir, m := tinyBundle(t)
	dir2, m2 := tinyBundle(t)
	if m.Images[0].Digest != m2.Images[0].Digest || m.Images[0].SHA256 != m2.Images[0].SHA256 {
		t.Errorf("same inputs, different archives: %+v vs %+v", m.Images[0], m2.Images[0])
	}
	_ = dir2
	if _, err := Verify(context.Background(), dir); err != nil {
		t.Fatalf("verify a good bundle: %v", err)
	}

	// The docker-archive view names the image and holds the files with root ownership.
	img, err := tarball.ImageFromPath(filepath.Join(dir, "images", "pause.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || strings.Join(cf.Config.Entrypoint, " ") != "/pause" {
		t.Errorf("config: os %q arch %q entrypoint %q", cf.OS, cf.Architecture, cf.Config.Entrypoint)
	}
	layers, _ := img.Layers()
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h
	}
	if h := got["pause"]; h == nil || h.Mode&0o111 == 0 || h.Uid != 0 || h.Size == 0 {
		t.Errorf("pause in layer: %+v", h)
	}
	if h := got["usr/sbin/iptables"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "xtables-nft-multi" {
		t.Errorf("iptables symlink in layer: %+v", h)
	}
	if h := got["tmp/"]; h == nil || h.Mode != 0o1777 {
		t.Errorf("tmp in layer: %+v", h)
	}
	if h := got["usr/sbin/"]; h == nil || h.Typeflag != tar.TypeDir {
		t.Errorf("parent directory usr/sbin missing: %+v", h)
	}
}

func TestVerifyFindsEveryDamagedArtifact(t *testing.T) {
	dir, _ := tinyBundle(t)
	// A changed binary and a truncated image archive.
	if err := os.Remove(filepath.Join(dir, "bin", "hello")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "hello"), []byte("#!/bin/sh\necho HELLO\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, "images", "pause.tar"), 1000); err != nil {
		t.Fatal(err)
	}
	_, err := Verify(context.Background(), dir)
	var ve *VerifyError
	if !errors.As(err, &ve) {
		t.Fatalf("Verify of a damaged bundle: %v, want a *VerifyError", err)
	}
	text := strings.Join(ve.Details(), "\n")
	for _, want := range []string{"file hello: bin/hello has sha256", "image registry.k8s.io/pause:3.10.2: images/pause.tar has 1000 bytes"} {
		if !strings.Contains(text, want) {
			t.Errorf("details lack %q:\n%s", want, text)
		}
	}
}

func TestVerifyChecksTheImageInsideTheArchive(t *testing.T) {
	dir, m := tinyBundle(t)
	// The archive is intact but the manifest claims another image digest.
	m.Images[0].Digest = "sha256:" + strings.Repeat("0", 64)
	if err := writeManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	_, err := Verify(context.Background(), dir)
	if err == nil || !strings.Contains(strings.Join(err.(*VerifyError).Problems, "\n"), "no blob for manifest") {
		t.Fatalf("Verify with a wrong image digest: %v", err)
	}
}

func TestLayerIsGzipAndDeterministic(t *testing.T) {
	f := filepath.Join(t.TempDir(), "x")
	os.WriteFile(f, []byte("x"), 0o600)
	var a, b strings.Builder
	if err := writeLayer(&a, []imageFile{{Path: "/a/b/x", Src: f}}); err != nil {
		t.Fatal(err)
	}
	if err := writeLayer(&b, []imageFile{{Path: "/a/b/x", Src: f}}); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Error("two layers from the same files differ")
	}
	if _, err := gzip.NewReader(strings.NewReader(a.String())); err != nil {
		t.Errorf("layer is not gzip: %v", err)
	}
	if err := writeLayer(io.Discard, []imageFile{{Path: "/x", Src: f}, {Path: "x", Src: f}}); err == nil {
		t.Error("a path given twice was accepted")
	}
}

func TestManifestRejectsPathsOutsideTheBundle(t *testing.T) {
	dir, m := tinyBundle(t)
	m.Files[0].Path = "../../etc/passwd"
	if err := writeManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadManifest(dir); err == nil || !strings.Contains(err.Error(), "inside the bundle") {
		t.Fatalf("LoadManifest: %v", err)
	}
	if _, err := LoadManifest(t.TempDir()); err == nil || !strings.Contains(err.Error(), "kforge bundle build") {
		t.Fatalf("LoadManifest of an empty dir: %v", err)
	}
}
