package lab

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWeighCPU: the weight lands in cgroup v1's cpu.shares or, on the unified hierarchy, in
// cpu.weight scaled to its default of 100; a hierarchy without the cpu controller is left alone.
func TestWeighCPU(t *testing.T) {
	root := t.TempDir()
	v1, v2, other := filepath.Join(root, "cpu"), filepath.Join(root, "unified"), filepath.Join(root, "pids")
	for d, f := range map[string]string{v1: "cpu.shares", v2: "cpu.weight", other: "pids.max"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := weighCPU([]string{v1, v2, other}, emulatedVMShares); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]string{filepath.Join(v1, "cpu.shares"): "256", filepath.Join(v2, "cpu.weight"): "25", filepath.Join(other, "pids.max"): "x"} {
		if b, _ := os.ReadFile(f); string(b) != want {
			t.Errorf("%s = %q, want %q", f, b, want)
		}
	}
	if _, err := os.Stat(filepath.Join(other, "cpu.shares")); err == nil {
		t.Errorf("weighCPU wrote cpu.shares into a hierarchy without the cpu controller")
	}
}
