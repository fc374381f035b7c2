package conformance

import (
	"strings"
	"testing"
)

// TestReadJUnit: only the selected specs count (a [Serial] spec and one outside the focus are
// left out), by SIG, with each failure's first lines.
func TestReadJUnit(t *testing.T) {
	s, err := ReadJUnit("testdata/junit.xml", Focus, Skip)
	if err != nil {
		t.Fatal(err)
	}
	if s.Passed != 1 || s.Failed != 1 || s.Skipped != 1 {
		t.Errorf("passed %d, failed %d, skipped %d; want 1, 1, 1", s.Passed, s.Failed, s.Skipped)
	}
	if c := s.BySIG["network"]; c == nil || c.Passed != 1 {
		t.Errorf("sig-network: %+v", c)
	}
	if c := s.BySIG["api-machinery"]; c == nil || c.Failed != 1 {
		t.Errorf("sig-api-machinery: %+v", c)
	}
	if _, ok := s.BySIG["apps"]; ok {
		t.Errorf("a [Serial] spec was counted: %+v", s.BySIG["apps"])
	}
	if len(s.Failures) != 1 || !strings.Contains(s.Failures[0].Message, "network is unreachable") || strings.Contains(s.Failures[0].Message, "and more") {
		t.Errorf("failures: %+v", s.Failures)
	}
	out := s.String()
	for _, want := range []string{"1 passed, 1 failed, 1 skipped", "api-machinery", "FAIL [It] [sig-api-machinery] AdmissionWebhook"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if _, err := ReadJUnit("testdata/missing.xml", Focus, Skip); err == nil {
		t.Error("a missing report gave no error")
	}
}
