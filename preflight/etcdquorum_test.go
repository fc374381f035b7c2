package preflight

import (
	"testing"

	"github.com/kforge/kforge/facts"
	"github.com/kforge/kforge/inventory"
)

// TestEvenMastersWarnAtTheInventoryLine: apply's preflight warns about two masters with the
// inventory's own message, at the masters list's file:line, why and what to do in the one line
// apply prints.
func TestEvenMastersWarnAtTheInventoryLine(t *testing.T) {
	c, err := inventory.Parse("kforge.yaml", []byte(`apiVersion: kforge.dev/v1alpha1
kind: Cluster
name: demo
masters:
  - {name: m1, address: 198.51.100.10}
  - {name: m2, address: 198.51.100.11}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range Check(c, map[string]*facts.Facts{"m1": healthy("m1"), "m2": healthy("m2")}, Options{}) {
		if f.Check == CheckEtcdQuorum {
			got = append(got, f.String())
		}
	}
	want := "[WARNING EtcdQuorum] m1: kforge.yaml:4:1: masters: 2 masters run 2 stacked etcd members, and N members tolerate (N-1)/2 failures, rounded down: 2 tolerate none, as 1 does, and lose quorum when either master fails; use an odd number: 1, 3 or 5 masters"
	if len(got) != 1 || got[0] != want {
		t.Errorf("EtcdQuorum findings %q, want one: %q", got, want)
	}
}
