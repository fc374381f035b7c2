package bundle

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNetpolPatchesFit: both patches fit the agent's release in the catalogue, where the module
// cache has it (they fail the build when they no longer do), and say why when a text is missing.
func TestNetpolPatchesFit(t *testing.T) {
	if _, err := patchNetpolController([]byte("package networkpolicy\n")); err == nil || !strings.Contains(err.Error(), "0 times, want 2") {
		t.Errorf("a controller.go without the queue rule: %v", err)
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Skipf("go env GOMODCACHE: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "sigs.k8s.io", "kube-network-policies@v0.8.0")
	if _, err := os.Stat(dir); err != nil {
		t.Skip("kube-network-policies v0.8.0 is not in the module cache")
	}
	for file, patch := range map[string]func([]byte) ([]byte, error){"pkg/networkpolicy/controller.go": patchNetpolController, "pkg/networkpolicy/dnsagent.go": patchNetpolDNS, "cmd/main.go": patchNetpolMain} {
		src, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(file)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := patch(src)
		if err != nil || string(got) == string(src) {
			t.Errorf("%s: %v (changed: %v)", file, err, string(got) != string(src))
		}
	}
}
