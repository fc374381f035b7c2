package remote

import (
	"errors"
	"testing"

	"github.com/kforge/kforge/internal/testenv"
)

// requireIntegration skips t for a missing prerequisite, or fails it when
// KFORGE_REQUIRE_INTEGRATION=1 (make test, CI).
func requireIntegration(t testing.TB, missing string) {
	t.Helper()
	testenv.Need(t, errors.New(missing))
}
