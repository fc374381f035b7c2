package bundle

import (
	"errors"
	"os/exec"
	"testing"

	"github.com/kforge/kforge/internal/testenv"
)

// needIntegration skips the test in -short mode, or when why is not empty (a prerequisite is
// missing) — unless KFORGE_REQUIRE_INTEGRATION=1, in which case a missing prerequisite fails it.
func needIntegration(t *testing.T, why string) {
	t.Helper()
	testenv.Integration(t)
	if why != "" {
		testenv.Need(t, errors.New(why))
	}
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
