package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"golang.org/x/term"

	"github.com/kforge/kforge/inventory"
)

func resetInventory(t *testing.T) *inventory.Cluster {
	t.Helper()
	c, err := inventory.Load("../../examples/single-master.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestResetRefusesWithoutTerminalOrYes: the real command line, stdin not a terminal, no --yes:
// exit code 2, a message that says to pass --yes, and no host is contacted (the example
// inventory's hosts do not exist).
func TestResetRefusesWithoutTerminalOrYes(t *testing.T) {
	if term.IsTerminal(int(os.Stdin.Fd())) {
		t.Skip("stdin is a terminal: reset would ask")
	}
	code, out, errs := kforge(t, "-i", "../../examples/single-master.yaml", "reset")
	if code != exitInvalid || out != "" || !strings.Contains(errs, "pass --yes") || strings.Contains(errs, "connect") {
		t.Fatalf("code %d, stdout %q, stderr %q", code, out, errs)
	}
}

// TestConfirmReset: on a terminal, the cluster's name goes on; anything else cancels with
// exit code 2; the prompt names the cluster and its hosts.
func TestConfirmReset(t *testing.T) {
	c := resetInventory(t)
	var w bytes.Buffer
	gone := []inventory.Node{{Host: inventory.Host{Name: "retired-worker"}, Role: inventory.RoleWorker}}
	if err := confirmReset(strings.NewReader(c.Name+"\n"), true, &w, c, gone); err != nil {
		t.Fatalf("right name: %v", err)
	}
	if !strings.Contains(w.String(), c.Name) || !strings.Contains(w.String(), c.Nodes()[0].Name) || !strings.Contains(w.String(), "retired-worker") {
		t.Errorf("prompt %q does not name the cluster and its hosts (with the one that left the inventory)", w.String())
	}
	for _, in := range []string{"yes\n", "", "\n"} {
		err := confirmReset(strings.NewReader(in), true, &bytes.Buffer{}, c, nil)
		if err == nil || exitCode(err) != exitInvalid || !strings.Contains(err.Error(), "nothing was changed") {
			t.Errorf("answer %q: %v (exit %d)", in, err, exitCode(err))
		}
	}
	if err := confirmReset(strings.NewReader(c.Name+"\n"), false, &bytes.Buffer{}, c, nil); err == nil || !strings.Contains(err.Error(), "--yes") {
		t.Errorf("no terminal: %v", err)
	}
}
