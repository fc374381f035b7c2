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
	if s.Passed != 1 || s.Failed != 2 || s.Skipped != 1 {
		t.Errorf("passed %d, failed %d, skipped %d; want 1, 2, 1", s.Passed, s.Failed, s.Skipped)
	}
	// The ImageVolume spec cannot pass offline; the webhook's failure is unexpected.
	if u := s.Unexpected(); len(u) != 1 || !strings.Contains(u[0].Spec, "AdmissionWebhook") {
		t.Errorf("unexpected failures: %+v", u)
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
	if len(s.Failures) != 2 || !strings.Contains(s.Failures[0].Message, "network is unreachable") || strings.Contains(s.Failures[0].Message, "and more") {
		t.Errorf("failures: %+v", s.Failures)
	}
	out := s.String()
	for _, want := range []string{"1 passed, 2 failed, 1 skipped", "api-machinery", "FAIL [It] [sig-api-machinery] AdmissionWebhook", "cannot pass offline: it asserts that kitten's image is Alpine Linux"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if _, err := ReadJUnit("testdata/missing.xml", Focus, Skip); err == nil {
		t.Error("a missing report gave no error")
	}
}
