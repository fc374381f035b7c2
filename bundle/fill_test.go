package bundle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kforge/kforge/internal/testenv"
)

// TestFillCommandWithTheRegistry runs FillCommand's script against the CNCF distribution
// registry the bundle carries, in a directory of its own: a fill, the same fill again (nothing
// done), a fill added beside it (both kept), then a fill that replaces (the earlier content and
// the added one removed, so a registry holds one release and does not grow with upgrades).
func TestFillCommandWithTheRegistry(t *testing.T) {
	needGo(t)
	why := ""
	if _, err := exec.LookPath("curl"); err != nil {
		why = "curl is not installed"
	}
	testenv.Require(t, testenv.Missing(why))
	bin, err := RegistryBinaries(context.Background(), BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	reg := registryPaths{Dir: filepath.Join(dir, "registry"), Binary: filepath.Join(bin, "registry"),
		FillConfig: filepath.Join(dir, "fill.yml"), FillAddr: addr, FillLog: filepath.Join(dir, "fill.log")}
	config := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %q\n", reg.Dir, addr)
	if err := os.WriteFile(reg.FillConfig, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	file := func(name string) File {
		p := filepath.Join(dir, name)
		data := []byte(name + "'s bytes")
		if err := os.WriteFile(p, data, 0o755); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		return File{Name: name, SHA256: hex.EncodeToString(sum[:]), Install: p}
	}
	kubelet, flannel, kubelet2 := file("kubelet"), file("flannel"), file("kubelet-next")
	fill := func(mode FillMode, files ...File) []string {
		t.Helper()
		out, err := exec.Command("sh", "-c", reg.fillCommand(files, nil, mode)).CombinedOutput()
		if err != nil {
			log, _ := os.ReadFile(reg.FillLog)
			t.Fatalf("fill: %v\n%s\nthe registry's log:\n%s", err, out, log)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	holds := func(f File) bool {
		_, err := os.Stat(filepath.Join(reg.Dir, "docker/registry/v2/blobs/sha256", f.SHA256[:2], f.SHA256, "data"))
		return err == nil
	}
	check := func(what string, out []string, want string, in, out2 []File) {
		t.Helper()
		if got := strings.Join(out, "; "); got != want {
			t.Errorf("%s said %q, want %q", what, got, want)
		}
		for _, f := range in {
			if !holds(f) {
				t.Errorf("after %s the registry lacks %s", what, f.Name)
			}
		}
		for _, f := range out2 {
			if holds(f) {
				t.Errorf("after %s the registry still holds %s", what, f.Name)
			}
		}
	}

	check("the first fill", fill(FillReplace, kubelet, flannel), Filled, []File{kubelet, flannel}, []File{kubelet2})
	check("the same fill again", fill(FillReplace, kubelet, flannel), FillUpToDate, []File{kubelet, flannel}, nil)
	check("a fill added", fill(FillAdd, kubelet2), Filled, []File{kubelet, flannel, kubelet2}, nil)
	check("the same addition again", fill(FillAdd, kubelet2), FillUpToDate, nil, nil)
	check("the next release's fill", fill(FillReplace, kubelet2, flannel), FillReplaced+"; "+Filled, []File{kubelet2, flannel}, []File{kubelet})
	if _, err := os.Stat(filepath.Join(reg.Dir, "kforge-filled-added")); !os.IsNotExist(err) {
		t.Errorf("the added fill's record outlived the replacing fill: %v", err)
	}
	check("an addition after it", fill(FillAdd, kubelet2), Filled, []File{kubelet2, flannel}, nil)
}
