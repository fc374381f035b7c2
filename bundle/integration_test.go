package bundle

import (
	"os/exec"
	"testing"

	"github.com/kforge/kforge/internal/testenv"
)

// needGo requires the go command, which builds every artifact.
func needGo(t *testing.T) {
	t.Helper()
	why := ""
	if _, err := exec.LookPath("go"); err != nil {
		why = "the go command is not on PATH"
	}
	testenv.Require(t, testenv.Missing(why))
}
