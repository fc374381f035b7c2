package bundle

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPauseAnswersVersionAndSignals: the pause image's program prints its version and exits 0
// for -v, as upstream's pause.c does (kubeadm upgrade apply's health check runs it so as a Job,
// and the job never completed: the upgrade was refused), and otherwise runs until SIGTERM.
func TestPauseAnswersVersionAndSignals(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pause")
	m := pauseModule("3.10.2")
	if out, err := exec.Command("go", "build", "-ldflags", m.Ldflags, "-o", bin, "./internal/pause").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-v").Output()
	if err != nil || strings.TrimSpace(string(out)) != "pause v3.10.2" {
		t.Errorf("pause -v: %q, %v; want \"pause v3.10.2\" and exit 0", out, err)
	}
	cmd := exec.Command(bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("pause without arguments ended by itself: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("pause after SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		t.Fatal("pause did not end within 5s of SIGTERM")
	}
}
