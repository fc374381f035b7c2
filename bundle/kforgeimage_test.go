package bundle

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestKforgeImageHoldsTheBinaryThatWroteIt: a statically linked program becomes an image whose
// entrypoint it is; a program linked against the C library is refused, naming CGO_ENABLED=0.
func TestKforgeImageHoldsTheBinaryThatWroteIt(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\nfunc main() { println(\"kforge\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "kforge")
	cmd := exec.Command("go", "build", "-o", bin, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "kforge.tar")
	a, err := WriteKforgeImage(bin, KforgeImageName("v9.9.9"), out)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := img.ConfigName(); id.String() != a.ID || strings.Join(cf.Config.Entrypoint, " ") != KforgeBinary {
		t.Errorf("image ID %s (archive says %s), entrypoint %q", id, a.ID, cf.Config.Entrypoint)
	}
	root := filepath.Join(dir, "root")
	unpackImage(t, out, root)
	want, _ := os.ReadFile(bin)
	got, err := os.ReadFile(filepath.Join(root, KforgeBinary))
	if fi, serr := os.Stat(filepath.Join(root, KforgeBinary)); err != nil || serr != nil || string(got) != string(want) || fi.Mode().Perm() != 0o755 {
		t.Errorf("the image's layer does not hold the binary at %s, mode 0755: %v %v", KforgeBinary, err, serr)
	}

	// A binary that needs the C library (here: the shell) has nothing to run on in the image.
	sh, _ := exec.LookPath("sh")
	if sh, err = filepath.EvalSymlinks(sh); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteKforgeImage(sh, KforgeImageName("v9.9.9"), filepath.Join(dir, "sh.tar")); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("an image of %s: %v; want refused, naming CGO_ENABLED=0", sh, err)
	}
}
