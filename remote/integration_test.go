package remote

import (
	"os"
	"testing"
)

// requireIntegration skips t for a missing prerequisite, or fails it when
// KFORGE_REQUIRE_INTEGRATION=1 (make test, CI).
func requireIntegration(t testing.TB, missing string) {
	t.Helper()
	if os.Getenv("KFORGE_REQUIRE_INTEGRATION") == "1" {
		t.Fatalf("integration prerequisite missing: %s", missing)
	}
	t.Skip("integration prerequisite missing: " + missing)
}
