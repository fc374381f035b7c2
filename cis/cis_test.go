package cis

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// benchmarkIDs are the ids of the automated checks of the CIS Kubernetes Benchmark v1.12 (as
// kube-bench's cfg/cis-1.12 lists them: every check whose audit is a command), in its order.
const benchmarkIDs = "1.1.1 1.1.2 1.1.3 1.1.4 1.1.5 1.1.6 1.1.7 1.1.8 1.1.9 1.1.10 1.1.11 1.1.12 1.1.13 1.1.14 1.1.15 1.1.16 1.1.17 1.1.18 1.1.19 1.1.20 1.1.21 " +
	"1.2.1 1.2.2 1.2.3 1.2.4 1.2.5 1.2.6 1.2.7 1.2.8 1.2.9 1.2.10 1.2.11 1.2.12 1.2.13 1.2.14 1.2.15 1.2.16 1.2.17 1.2.18 1.2.19 1.2.21 1.2.22 1.2.23 1.2.24 1.2.25 1.2.26 1.2.27 1.2.28 1.2.29 1.2.30 " +
	"1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.4.1 1.4.2 2.1 2.2 2.3 2.4 2.5 2.6 2.7 3.2.1 " +
	"4.1.1 4.1.2 4.1.3 4.1.4 4.1.5 4.1.6 4.1.7 4.1.8 4.1.9 4.1.10 4.2.1 4.2.2 4.2.3 4.2.4 4.2.5 4.2.6 4.2.7 4.2.8 4.2.9 4.2.10 4.2.11 4.2.12 4.2.13 4.2.14 4.3.1"

// TestEveryAutomatedCheck: the table holds each automated check of the benchmark once, in its
// order, and as many of them scored as the benchmark scores.
func TestEveryAutomatedCheck(t *testing.T) {
	var ids []string
	scored := 0
	for _, c := range Checks() {
		ids = append(ids, c.ID)
		if c.Scored {
			scored++
		}
	}
	if got := strings.Join(ids, " "); got != benchmarkIDs {
		t.Errorf("checks\n%s\nwant\n%s", got, benchmarkIDs)
	}
	if scored != 65 {
		t.Errorf("%d scored checks, want 65", scored)
	}
}

// TestAcceptedAreDocumented: the checks kforge cis accepts as failed on purpose are exactly the
// rows of docs/security.md's table of them.
func TestAcceptedAreDocumented(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	in := false
	for _, l := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(l, "| Check | Why kforge fails it |"):
			in = true
		case !strings.HasPrefix(l, "|"):
			in = false
		case in && !strings.HasPrefix(l, "|---"):
			documented = append(documented, strings.TrimSpace(strings.Split(l, "|")[1]))
		}
	}
	var accepted []string
	for id := range Accepted {
		accepted = append(accepted, id)
	}
	slices.Sort(accepted)
	slices.Sort(documented)
	if !slices.Equal(accepted, documented) {
		t.Errorf("kforge cis accepts %v; docs/security.md documents %v", accepted, documented)
	}
}
