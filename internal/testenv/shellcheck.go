package testenv

import (
	"os/exec"
	"testing"
)

// Shellcheck lints the POSIX sh scripts at paths with shellcheck, failing t with its findings.
// It runs in make test-quick too: without shellcheck it fails, it does not skip.
func Shellcheck(t testing.TB, paths ...string) {
	t.Helper()
	if _, err := exec.LookPath("shellcheck"); err != nil {
		t.Fatal("shellcheck is not installed: `make deps` installs it (Debian package shellcheck, listed in hack/apt-packages.txt)")
	}
	if out, err := exec.Command("shellcheck", append([]string{"-s", "sh", "-f", "gcc"}, paths...)...).CombinedOutput(); err != nil {
		t.Errorf("shellcheck: %v\n%s", err, out)
	}
}
