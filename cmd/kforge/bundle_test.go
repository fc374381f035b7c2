package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kforge/kforge/internal/testenv"
)

func TestBundleVerifyListsProblems(t *testing.T) {
	empty := t.TempDir()
	code, out, errs := kforge(t, "bundle", "verify", empty)
	if code != exitFailed || out != "" || !strings.Contains(errs, "no manifest.json") || !strings.Contains(errs, "kforge bundle build") {
		t.Errorf("verify of an empty dir: code %d, stdout %q, stderr %q", code, out, errs)
	}

	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	os.WriteFile(filepath.Join(dir, "bin", "kubelet"), []byte("not kubelet"), 0o755)
	manifest := `{"schemaVersion": 1, "platform": "linux/amd64", "source": "built",
  "versions": {"kubernetes": "v1.36.3"},
  "files": [
    {"name": "kubelet", "path": "bin/kubelet", "sha256": "` + strings.Repeat("a", 64) + `", "size": 11, "install": "/usr/bin/kubelet", "mode": "0755"},
    {"name": "kubectl", "path": "bin/kubectl", "sha256": "` + strings.Repeat("b", 64) + `", "size": 5, "install": "/usr/bin/kubectl", "mode": "0755"}
  ],
  "images": []}`
	os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(manifest), 0o644)
	code, out, errs = kforge(t, "bundle", "verify", dir)
	if code != exitFailed || out != "" {
		t.Errorf("verify of a damaged bundle: code %d, stdout %q", code, out)
	}
	for _, want := range []string{"2 problem(s)", "file kubelet: bin/kubelet has sha256", "file kubectl:", "no such file"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
}

func TestBundleBuildNeedsAnOutputDirectory(t *testing.T) {
	code, _, errs := kforge(t, "bundle", "build")
	if code != exitInvalid || !strings.Contains(errs, "--out") {
		t.Errorf("bundle build without -o: code %d, stderr %q", code, errs)
	}
	code, _, errs = kforge(t, "bundle", "build", "--kubernetes", "v1.30.0", "-o", t.TempDir())
	if code != exitFailed || !strings.Contains(errs, "1.36") {
		t.Errorf("bundle build of an unsupported version: code %d, stderr %q", code, errs)
	}
}

// TestBundleBuildJSONEvents: with --output json, stdout is one JSON event per line: a started
// and a done event per component, then the result; nothing else. (Builds the default bundle into
// the shared cache when it is cold.)
func TestBundleBuildJSONEvents(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		testenv.Require(t, errors.New("the go command is not on PATH (it builds the bundle)"))
	}
	testenv.Require(t, nil)
	code, out, errs := kforge(t, "--output", "json", "bundle", "build", "-o", filepath.Join(t.TempDir(), "b"))
	if code != 0 {
		t.Fatalf("code %d: %s", code, errs)
	}
	done := map[string]bool{}
	var last map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev["event"] == nil {
			t.Fatalf("stdout line is not a JSON event: %q (%v)", line, err)
		}
		if ev["event"] == "task-done" {
			done[ev["task"].(string)] = true
		}
		last = ev
	}
	for _, c := range []string{"kubernetes", "etcd", "coredns", "cni-plugins", "flannel", "pause", "images"} {
		if !done[c] {
			t.Errorf("no task-done event for %s", c)
		}
	}
	if last["event"] != "built" {
		t.Errorf("last event %v, want the built bundle", last)
	}
}
