package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestLabDownOfMissingLabSaysSo: lab down of a lab that does not exist changes nothing and says
// so on the one progress path: a line on stderr, or a JSON event on stdout.
func TestLabDownOfMissingLabSaysSo(t *testing.T) {
	const name = "kforge-no-such" // a valid lab name no test creates
	code, out, errs := kforge(t, "lab", "down", "--name", name)
	if code != 0 || out != "" || errs != "    lab "+name+": not found (nothing to do)\n" {
		t.Errorf("text: code %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = kforge(t, "--output", "json", "lab", "down", "--name", name)
	var ev map[string]any
	if code != 0 || errs != "" || strings.Count(out, "\n") != 1 || json.Unmarshal([]byte(out), &ev) != nil ||
		ev["event"] != "progress" || ev["task"] != "down" || !strings.Contains(ev["message"].(string), "not found") {
		t.Errorf("json: code %d, stdout %q, stderr %q", code, out, errs)
	}
}
