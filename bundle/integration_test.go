package bundle

import (
	"os"
	"os/exec"
	"testing"
)

// needIntegration skips the test in -short mode, or when why is not empty (a prerequisite is
// missing) — unless KFORGE_REQUIRE_INTEGRATION=1, in which case a missing prerequisite fails it.
func needIntegration(t *testing.T, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test; skipped in -short mode")
	}
	if why == "" {
		return
	}
	if os.Getenv("KFORGE_REQUIRE_INTEGRATION") == "1" {
		t.Fatalf("prerequisite missing (KFORGE_REQUIRE_INTEGRATION=1): %s", why)
	}
	t.Skip(why)
}

// needGo requires the go command, which builds every artifact.
func needGo(t *testing.T) {
	t.Helper()
	why := ""
	if _, err := exec.LookPath("go"); err != nil {
		why = "the go command is not on PATH"
	}
	needIntegration(t, why)
}
