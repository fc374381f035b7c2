package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// oneJSONDocument fails unless out is exactly one JSON value, as a program reading a query
// command's stdout expects (kubectl's -o json): the first Decode succeeds, the next finds io.EOF.
func oneJSONDocument(t *testing.T, what, out string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("%s: stdout is not a JSON document: %v\n%s", what, err, out)
	}
	var more json.RawMessage
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		t.Fatalf("%s: stdout holds more than one JSON value (next: %s, %v):\n%s", what, more, err, out)
	}
	return doc
}

// unknownHost is an SSH server on 127.0.0.1 whose host key is in no known_hosts: kforge's
// connection to it fails at once (a host key failure is not retried), so a command sees its
// hosts as unreachable without waiting out the retries of a refused connection.
func unknownHost(t *testing.T) int {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(signer)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if conn, _, _, err := ssh.NewServerConn(c, cfg); err == nil {
					conn.Close()
				}
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// TestQueryCommandsPrintOneJSONDocument: plan, certs check and etcd status answer --output json
// with one JSON document on stdout, their progress on stderr; certs check and etcd status used
// to print their progress events on stdout as JSON lines, the answer as the last one. Their
// exit codes stay: 1 here, where no host answers.
func TestQueryCommandsPrintOneJSONDocument(t *testing.T) {
	dir := t.TempDir()
	inv, st := filepath.Join(dir, "kforge.yaml"), filepath.Join(dir, "state")
	writeFile(t, filepath.Join(dir, "known_hosts"), "")
	writeFile(t, inv, fmt.Sprintf(`apiVersion: kforge.dev/v1alpha1
kind: Cluster
name: q
ssh: {port: %d, agent: false, knownHostsFile: %s}
masters:
  - {name: m1, address: 127.0.0.1}
`, unknownHost(t), filepath.Join(dir, "known_hosts")))
	// The cluster's PKI in the state dir, as apply would leave it, without a host.
	if code, _, errs := kforge(t, "-i", inv, "--state-dir", st, "render", "-o", filepath.Join(dir, "out")); code != 0 {
		t.Fatalf("render: code %d, %s", code, errs)
	}
	for _, c := range []struct {
		args []string
		code int
		key  string // a key of the answer
	}{
		{[]string{"plan", "--offline"}, 0, "tasks"},
		{[]string{"plan"}, 0, "diff"},
		{[]string{"certs", "check"}, exitFailed, "certificates"},
		{[]string{"etcd", "status"}, exitFailed, "members"},
	} {
		what := strings.Join(c.args, " ")
		code, out, errs := kforge(t, append([]string{"-i", inv, "--state-dir", st, "--output", "json"}, c.args...)...)
		if code != c.code {
			t.Errorf("%s: code %d, want %d; stderr:\n%s", what, code, c.code, errs)
		}
		if doc := oneJSONDocument(t, what, out); doc[c.key] == nil {
			t.Errorf("%s: the answer has no %q: %s", what, c.key, out)
		}
		if what != "plan --offline" && !strings.Contains(errs, `"event":"task-done"`) {
			t.Errorf("%s: no progress events on stderr:\n%s", what, errs)
		}
	}
}
