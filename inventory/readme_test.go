package inventory

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestReadmeDocumentsEveryField keeps README.md's inventory reference complete: every field
// of the inventory types must appear there in backticks.
func TestReadmeDocumentsEveryField(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] {
			return
		}
		seen[typ] = true
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !strings.Contains(readme, "`"+name+"`") && !strings.Contains(readme, "."+name+"`") {
				t.Errorf("README.md's inventory reference does not mention %s.%s (`%s`)", typ.Name(), f.Name, name)
			}
			walk(f.Type)
		}
	}
	walk(reflect.TypeOf(Cluster{}))
}
