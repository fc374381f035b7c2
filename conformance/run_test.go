package conformance

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunReportsItsOwnRun: a ginkgo that fails before writing a report is an error, even with a
// report of an earlier run in the directory; one that writes a report with failed specs is a
// summary, not an error.
func TestRunReportsItsOwnRun(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "report")
	if err := os.MkdirAll(report, 0o755); err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile("testdata/junit.xml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(report, "junit.xml"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	fake := func(script string) Kit {
		p := filepath.Join(dir, "ginkgo")
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
			t.Fatal(err)
		}
		return Kit{Ginkgo: p, E2ETest: "/nonexistent/e2e.test", Kubectl: "kubectl"}
	}
	if _, err := Run(context.Background(), fake("echo broken; exit 1\n"), RunOptions{ReportDir: report}); err == nil || !strings.Contains(err.Error(), "junit.xml") {
		t.Errorf("a ginkgo that wrote no report: %v; want an error about its missing report", err)
	}
	abs, _ := filepath.Abs("testdata/junit.xml")
	s, err := Run(context.Background(), fake(`for a; do case "$a" in --output-dir=*) cp `+abs+` "${a#--output-dir=}/junit.xml";; esac; done; exit 1
`), RunOptions{ReportDir: report})
	if err != nil || s.Failed != 2 || s.Passed != 1 {
		t.Errorf("a run with failed specs: %+v, %v; want its summary (1 passed, 2 failed) and no error", s, err)
	}
	if b, err := os.ReadFile(filepath.Join(report, "summary.txt")); err != nil || !strings.Contains(string(b), "1 passed, 2 failed") {
		t.Errorf("summary.txt: %q %v", b, err)
	}
}
