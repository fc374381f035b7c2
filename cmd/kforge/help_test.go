package main

import (
	"strings"
	"testing"
)

// TestHelpSaysWhatKforgeDoes: kforge --help describes kforge and plan as README.md's "What
// works today" does; it said kforge "creates and grows" clusters and plan shows "the ordered
// steps apply will take", though kforge also upgrades, backs up, restores, resets and renews
// certificates, and plan is a diff.
func TestHelpSaysWhatKforgeDoes(t *testing.T) {
	code, out, errs := kforge(t, "--help")
	if code != 0 || errs != "" {
		t.Fatalf("code %d, stderr %q", code, errs)
	}
	flat := strings.Join(strings.Fields(out), " ") // kong wraps the help to the terminal's width
	for _, want := range []string{
		"Usage: kforge <command> [flags] Create, grow, upgrade, back up, restore and reset Kubernetes clusters, and renew their certificates, from a workstation over SSH. Flags:",
		" plan Show what apply would change (files with a diff, uploads, restarts, nodes, API objects), read from the hosts and the API without changing anything; --offline prints apply's steps instead. apply ",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("kforge --help lacks %q:\n%s", want, out)
		}
	}
	for _, stale := range []string{"creates and grows", "Create and grow", "steps apply will take"} {
		if strings.Contains(flat, stale) {
			t.Errorf("kforge --help still says %q", stale)
		}
	}
}
