package inventory

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// FuzzLoad: the loader never panics or hangs, every failure is a positioned inventory error,
// and every inventory it accepts survives a round trip through YAML unchanged.
// Run it with: make fuzz (FUZZTIME=10m by default).
func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob("../examples/*.yaml")
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(minimal))
	f.Add([]byte(head + m1 + "workers:\n  - &w {name: w1, address: 10.0.0.2}\n  - *w\n"))
	f.Add([]byte(head + "ssh:\n  port: ${P:-22}\n" + m1))
	f.Add([]byte("a: &a [*a, *a]\n"))

	lookup := env(map[string]string{"P": "2222"})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data, lookup)
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error is not inventory.Errors: %v", err)
			}
			for _, e := range es {
				if e.File != "fuzz.yaml" || e.Line < 0 || e.Column < 0 || e.Msg == "" {
					t.Fatalf("malformed error %#v", e)
				}
			}
			return
		}
		if bytes.Contains(data, []byte("$")) {
			return // re-parsing would substitute again
		}
		out, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("marshal accepted inventory: %v", err)
		}
		if strings.Contains(string(out), "$") {
			return
		}
		c2, err := Parse("roundtrip.yaml", out, lookup)
		if err != nil {
			t.Fatalf("accepted inventory does not re-parse: %v\n%s", err, out)
		}
		out2, _ := yaml.Marshal(c2)
		if !bytes.Equal(out, out2) {
			t.Fatalf("round trip changed the inventory:\n%s\n---\n%s", out, out2)
		}
	})
}
