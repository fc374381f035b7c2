package facts

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kforge/kforge/internal/testenv"
)

// everything asks every fact the options can ask for.
var everything = Options{Hash: []string{"/etc/hostname"}, Dirs: []string{"/etc"}, ServiceAddress: "127.0.0.1", VIP: "127.0.0.1"}

// TestScriptShellcheck lints the whole script as it runs on a host, the table's inline commands
// included. It runs in make test-quick: without shellcheck it fails, it does not skip.
func TestScriptShellcheck(t *testing.T) {
	p := filepath.Join(t.TempDir(), "facts.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+Script(everything)), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Shellcheck(t, p)
}

// TestEveryLineHasARow: each line the script prints on this machine is read by a row of the
// table, and each row printed at least one line, but for what only a node has (swap, listening
// sockets, manifests, etcd data and its user, kforge's kubelet drop-in): commands and parsers agree.
func TestEveryLineHasARow(t *testing.T) {
	o := everything
	o.CacheDir = t.TempDir()
	out, err := exec.Command("sh", "-c", Script(o), "kforge-facts").Output()
	if err != nil {
		t.Fatalf("script: %v", err)
	}
	printed := map[*fact]bool{}
	for _, l := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		if l == header || l == trailer {
			continue
		}
		key, _, sep := split(l)
		r, ok := byKey[key+sep]
		if !ok {
			t.Errorf("no row reads %q", l)
			continue
		}
		printed[r] = true
	}
	for i := range table {
		r := &table[i]
		if silent := []string{"swap ", "tcp ", "manifests ", "etcd ", "kubeletdropin=", "etcduser="}; !printed[r] && !slices.Contains(silent, r.keys[0]) {
			t.Errorf("the row of %q printed nothing", r.keys)
		}
	}
	mustParse(t, out)
}
