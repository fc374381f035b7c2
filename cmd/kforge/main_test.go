package main

import (
	"bytes"
	"strings"
	"testing"
)

func kforge(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestVersion(t *testing.T) {
	code, out, errs := kforge(t, "version")
	if code != 0 || !strings.Contains(out, "v1.36.3") || errs != "" {
		t.Fatalf("version: code %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, _ = kforge(t, "--output", "json", "version")
	if code != 0 || !strings.Contains(out, `"kubernetes":"v1.36.3"`) {
		t.Fatalf("version json: code %d, stdout %q", code, out)
	}
}

func TestUnknownCommandIsUsageError(t *testing.T) {
	code, out, errs := kforge(t, "frobnicate")
	if code != exitInvalid || out != "" || !strings.Contains(errs, "frobnicate") {
		t.Fatalf("code %d, stdout %q, stderr %q", code, out, errs)
	}
}
