package inventory

import (
	_ "embed"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strings"
	"sync"

	"github.com/invopop/jsonschema"
)

// typesSource is types.go itself: its doc comments are the inventory reference, and embedding
// the file lets the schema carry them without a generator step.
//
//go:embed types.go
var typesSource string

// Schema returns the JSON Schema (draft 2020-12) of the inventory, generated from the Go types,
// with every field's doc comment as its description.
func Schema() ([]byte, error) {
	r := &jsonschema.Reflector{
		FieldNameTag:               "yaml",
		RequiredFromJSONSchemaTags: true,
		ExpandedStruct:             true,
		BaseSchemaID:               "https://kforge.dev/schemas",
		LookupComment: func(t reflect.Type, field string) string {
			key := t.Name()
			if field != "" {
				key += "." + field
			}
			return typeDocs()[key]
		},
	}
	s := r.Reflect(&Cluster{})
	s.ID = jsonschema.ID("https://kforge.dev/schemas/" + strings.ReplaceAll(APIVersion, "/", "-") + ".json")
	s.Title = "kforge inventory (" + APIVersion + ")"
	return json.MarshalIndent(s, "", "  ")
}

// typeDocs maps "Type" and "Type.Field" to their doc comments in types.go.
var typeDocs = sync.OnceValue(func() map[string]string {
	docs := map[string]string{}
	f, err := parser.ParseFile(token.NewFileSet(), "types.go", typesSource, parser.ParseComments)
	if err != nil {
		panic("inventory: embedded types.go does not parse: " + err.Error())
	}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			continue
		}
		for _, spec := range gd.Specs {
			ts := spec.(*ast.TypeSpec)
			docs[ts.Name.Name] = text(gd.Doc)
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				continue
			}
			for _, fld := range st.Fields.List {
				for _, n := range fld.Names {
					docs[ts.Name.Name+"."+n.Name] = text(fld.Doc)
				}
			}
		}
	}
	return docs
})

func text(g *ast.CommentGroup) string {
	if g == nil {
		return ""
	}
	return strings.TrimSpace(strings.ReplaceAll(g.Text(), "\n", " "))
}
