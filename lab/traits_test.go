package lab

import (
	"path/filepath"
	"testing"

	"github.com/kforge/kforge/internal/testenv"
)

// TestTraitScriptsShellcheck lints the traits' scripts; they run on lab hosts in the e2e tests
// (TestHostsAsUsersHaveThem gives its hosts every trait).
func TestTraitScriptsShellcheck(t *testing.T) {
	paths, err := filepath.Glob("traits/*.sh")
	if err != nil || len(paths) < 7 {
		t.Fatalf("trait scripts %v: %v", paths, err)
	}
	testenv.Shellcheck(t, paths...)
}
