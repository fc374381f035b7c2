package bundle

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/internal/testenv"
)

// TestDaemonBuildsFromItsScratchModule: kforge-apiproxy is built the way the bundle builds it,
// from a scratch module of its own that gets bundle/daemon's source as the module
// github.com/kforge/kforge (goModule.Kforge); the binary it makes refuses a configuration with
// an unknown field, naming the file (daemon.ReadJSON).
func TestDaemonBuildsFromItsScratchModule(t *testing.T) {
	_, err := exec.LookPath("go")
	testenv.Require(t, err)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := &goRunner{}
	m := apiproxyModule()
	src, out := filepath.Join(dir, "src"), filepath.Join(dir, "out")
	if err := r.prepareModule(ctx, src, m); err != nil {
		t.Fatal(err)
	}
	if err := r.build(ctx, src, out, m); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "apiproxy.json")
	if err := os.WriteFile(config, []byte(`{"listen": "127.0.0.1:0", "backends": ["127.0.0.1:1"], "extra": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := exec.CommandContext(ctx, filepath.Join(out, APIProxyFile), "-config", config, "-state", filepath.Join(dir, "state.json")).CombinedOutput()
	if err == nil || !strings.Contains(string(got), config+`: json: unknown field "extra"`) {
		t.Errorf("kforge-apiproxy with an unknown field: %v, %q; want it refused naming %s", err, got, config)
	}
}
