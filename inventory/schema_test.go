package inventory

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"
)

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	b, err := Schema()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("inventory.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("inventory.json")
	if err != nil {
		t.Fatalf("schema does not compile: %v", err)
	}
	return s
}

// yamlToJSONValue turns a YAML document into the generic value a JSON Schema validator takes.
func yamlToJSONValue(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSchemaValidatesExamples(t *testing.T) {
	s := compileSchema(t)
	files, _ := filepath.Glob("../examples/*.yaml")
	if len(files) == 0 {
		t.Fatal("no examples")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(yamlToJSONValue(t, b)); err != nil {
			t.Errorf("%s does not validate against the schema: %v", f, err)
		}
	}
}

func TestSchemaRejectsWhatTheLoaderRejects(t *testing.T) {
	s := compileSchema(t)
	for name, doc := range map[string]string{
		"unknown field":     head + "mastres: []\n" + m1,
		"bad enum":          head + "pki: {keyAlgorithm: dsa}\n" + m1,
		"missing masters":   head,
		"port out of range": head + "ssh: {port: 70000}\n" + m1,
		"bad duration":      head + "pki: {certValidity: 1y}\n" + m1,
	} {
		if err := s.Validate(yamlToJSONValue(t, []byte(doc))); err == nil {
			t.Errorf("%s: schema accepted it", name)
		}
	}
}

func TestSchemaCarriesDocComments(t *testing.T) {
	b, err := Schema()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"description": "Stable address of the API server as host:port`,
		`"description": "Environment variable holding the sudo password`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("schema lacks %s", want)
		}
	}
}
