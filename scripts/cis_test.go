package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/cis"
)

// TestCISGather runs the gather script beside a real process named kubelet (bash under that
// name, with --config and --kubeconfig on its command line): it prints the process's command
// line, the mode and owner of each named file that exists and of everything under each named
// directory, and kubelet's configuration, in lines cis.Parse reads back.
func TestCISGather(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	dir := t.TempDir()
	write := func(p, s string, mode os.FileMode) string {
		t.Helper()
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	config := write("config.yaml", "authentication:\n  anonymous:\n    enabled: false\nreadOnlyPort: 0\n", 0o600)
	kubeconfig := write("kubelet.conf", "apiVersion: v1\n", 0o640)
	unit := write("kubelet.service", "[Service]\n", 0o644)
	ca := write("pki/ca.crt", "cert", 0o644)
	key := write("pki/ca.key", "key", 0o600)
	// bash keeps the name exec -a gives it, and its arguments after the script.
	kubelet := exec.Command("bash", "-c", `exec -a /usr/bin/kubelet bash -c 'sleep 300; :' kubelet "--config=$1" "--kubeconfig=$2"`, "sh", config, kubeconfig)
	if err := kubelet.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kubelet.Process.Kill(); _ = kubelet.Wait() })

	s := newSandbox(t)
	// The machine may run other kubelets (a lab's, in their own mount namespaces): ours is the
	// proc line with our flags.
	ours := func(out string) []string {
		for _, l := range strings.Split(out, "\n") {
			if !strings.HasPrefix(l, "proc kubelet ") {
				continue
			}
			if one, err := cis.Parse("h1", []byte(l)); err == nil && slices.Contains(one.Procs["kubelet"], "--config="+config) {
				return one.Procs["kubelet"]
			}
		}
		return nil
	}
	var out string
	for range 50 { // until the renamed bash runs
		out = s.mustRun(Command("cis-gather", "files", Lines([]string{unit, filepath.Join(dir, "absent")}), "trees", Lines([]string{filepath.Join(dir, "pki")})), "")
		if ours(out) != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	h, err := cis.Parse("h1", []byte(out))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if a := ours(out); !slices.Equal(a, []string{"/usr/bin/kubelet", "-c", "sleep 300; :", "kubelet", "--config=" + config, "--kubeconfig=" + kubeconfig}) {
		t.Fatalf("our kubelet's command line: %q\n%s", a, out)
	}
	want := map[string]cis.File{unit: {Mode: 0o644, Owner: "root:root"}, config: {Mode: 0o600, Owner: "root:root"}, kubeconfig: {Mode: 0o640, Owner: "root:root"},
		ca: {Mode: 0o644, Owner: "root:root"}, key: {Mode: 0o600, Owner: "root:root"}}
	if os.Geteuid() != 0 {
		t.Skip("the owners are root:root only when run as root")
	}
	for p, f := range want {
		if h.Files[p] != f {
			t.Errorf("%s: %+v, want %+v", p, h.Files[p], f)
		}
	}
	if _, ok := h.Files[filepath.Join(dir, "absent")]; ok {
		t.Error("a file that does not exist was listed")
	}
	if v, ok := h.Config("kubelet", "authentication.anonymous.enabled"); !ok || v != "false" {
		t.Errorf("kubelet's configuration: anonymous %q %v\n%s", v, ok, out)
	}
}
