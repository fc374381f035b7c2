package inventory

import (
	"fmt"
	"strings"
	"testing"
)

// TestEvenMastersWarn: an even number of masters loads (it is no error) with a warning at the
// masters list's file:line that says why (N etcd members tolerate (N-1)/2 failures: 2 none, as
// 1) and what to do (an odd number); an odd number gets none.
func TestEvenMastersWarn(t *testing.T) {
	inventory := func(masters int) string {
		var b strings.Builder
		b.WriteString("apiVersion: kforge.dev/v1alpha1\nkind: Cluster\nname: t\nmasters:\n")
		for i := 1; i <= masters; i++ {
			fmt.Fprintf(&b, "  - {name: m%d, address: 10.0.0.%d}\n", i, i)
		}
		return b.String()
	}
	for _, c := range []struct {
		masters int
		want    string
	}{
		{1, ""},
		{2, "t.yaml:4:1: masters: 2 masters run 2 stacked etcd members, and N members tolerate (N-1)/2 failures, rounded down: 2 tolerate none, as 1 does, and lose quorum when either master fails; use an odd number: 1, 3 or 5 masters"},
		{3, ""},
		{4, "t.yaml:4:1: masters: 4 masters run 4 stacked etcd members, and N members tolerate (N-1)/2 failures, rounded down: 4 tolerate 1, as 3 do, and lose quorum when 2 masters fail; use an odd number: 1, 3 or 5 masters"},
		{5, ""},
	} {
		cl, err := Parse("t.yaml", []byte(inventory(c.masters)), env(nil))
		if err != nil {
			t.Fatalf("%d masters: %v", c.masters, err)
		}
		var got []string
		for _, w := range cl.Warnings() {
			got = append(got, w.Error())
		}
		if strings.Join(got, "\n") != c.want {
			t.Errorf("%d masters: warnings\n%q\nwant\n%q", c.masters, got, c.want)
		}
	}
}
