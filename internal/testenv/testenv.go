// Package testenv decides, in one place, whether an integration test runs: it is skipped in
// -short mode (make test-quick), and a missing prerequisite (not root, a tool absent) skips it —
// unless KFORGE_REQUIRE_INTEGRATION=1 (make test, CI), where it fails, so what CI lacks is a
// red build and never a silent skip.
package testenv

import (
	"errors"
	"os"
	"testing"

	"github.com/kforge/kforge/progress"
)

// RequireEnv is the variable make test sets.
const RequireEnv = "KFORGE_REQUIRE_INTEGRATION"

// Integration skips t in -short mode.
func Integration(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: skipped in -short mode")
	}
}

// Need skips t (or fails it under KFORGE_REQUIRE_INTEGRATION=1) when missing is not nil.
func Need(t testing.TB, missing error) {
	t.Helper()
	if missing == nil {
		return
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("prerequisite missing (%s=1): %v", RequireEnv, missing)
	}
	t.Skipf("prerequisite missing: %v", missing)
}

// Require is the one gate of an integration test: skipped in -short mode, and skipped (or, under
// KFORGE_REQUIRE_INTEGRATION=1, failed) when missing is not nil.
func Require(t testing.TB, missing error) {
	t.Helper()
	Integration(t)
	Need(t, missing)
}

// Missing is why as an error for Require; nil when why is empty.
func Missing(why string) error {
	if why == "" {
		return nil
	}
	return errors.New(why)
}

// Report is a progress.Reporter that logs each event to t, for builds and runs inside tests.
func Report(t testing.TB) progress.Reporter {
	return func(e progress.Event) {
		t.Logf("%s %s %s %s%s", e.Kind, e.Task, e.Host, e.Message, e.Err)
	}
}
