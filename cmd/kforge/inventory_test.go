package main

import (
	"path/filepath"
	"testing"
)

// TestInventoryValidateWarnsOfEvenMasters: two masters are valid (exit 0) with a warning on
// stderr at the masters list's line, and in the JSON result.
func TestInventoryValidateWarnsOfEvenMasters(t *testing.T) {
	inv := filepath.Join(t.TempDir(), "two.yaml")
	writeFile(t, inv, "apiVersion: kforge.dev/v1alpha1\nkind: Cluster\nname: t\nmasters:\n  - {name: m1, address: 10.0.0.1}\n  - {name: m2, address: 10.0.0.2}\n")
	want := inv + ":4:1: masters: 2 masters run 2 stacked etcd members, and N members tolerate (N-1)/2 failures, rounded down: 2 tolerate none, as 1 does, and lose quorum when either master fails; use an odd number: 1, 3 or 5 masters"
	code, out, errs := kforge(t, "inventory", "validate", inv)
	if code != 0 || out != inv+": valid (cluster t: 2 masters, 0 workers)\n" || errs != "warning: "+want+"\n" {
		t.Errorf("text: code %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = kforge(t, "--output", "json", "inventory", "validate", inv)
	ws, _ := oneJSONDocument(t, "inventory validate", out)["warnings"].([]any)
	if code != 0 || errs != "" || len(ws) != 1 || ws[0] != want {
		t.Errorf("json: code %d, stdout %q, stderr %q", code, out, errs)
	}
}
