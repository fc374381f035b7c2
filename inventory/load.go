package inventory

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Load reads, decodes, defaults and validates the inventory at path. Environment variables are
// substituted from the process environment; relative file paths in the inventory are resolved
// against the file's directory. Every problem found is returned at once as Errors.
func Load(path string) (*Cluster, error) { return LoadEnv(path, os.LookupEnv) }

// LoadEnv is Load with environment variables from lookupEnv (kforge controller: its cluster's
// Secrets).
func LoadEnv(path string, lookupEnv func(string) (string, bool)) (*Cluster, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("inventory %s not found: pass -i FILE or create it (see examples/)", path)
		}
		return nil, fmt.Errorf("reading inventory: %w", err)
	}
	c, err := Parse(path, data, lookupEnv)
	if err != nil {
		return nil, err
	}
	var errs Errors
	c.resolvePaths(filepath.Dir(path), func(field, p string) {
		if _, err := os.Stat(p); err != nil {
			errs = append(errs, c.errorAt(field, fmt.Sprintf("file %s: %v", p, unwrapPathError(err)), "check the path (relative paths are relative to the inventory file)"))
		}
	})
	if len(errs) > 0 {
		return nil, errs
	}
	return c, nil
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Parse decodes, defaults and validates an inventory held in memory; file names it in errors.
// lookupEnv resolves ${VAR} references (os.LookupEnv in production). Paths are left as written.
func Parse(file string, data []byte, lookupEnv func(string) (string, bool)) (*Cluster, error) {
	root, err := parseDocument(file, data)
	if err != nil {
		return nil, err
	}
	d := &decoder{src: &source{file: file, pos: map[string]Pos{}}, lookupEnv: lookupEnv}
	var c Cluster
	d.decode(root, reflect.ValueOf(&c).Elem(), "", 0)
	c.src = d.src
	if len(d.errs) > 0 {
		d.errs.sort()
		return nil, d.errs
	}
	c.setDefaults()
	if errs := c.validate(lookupEnv); len(errs) > 0 {
		errs.sort()
		return nil, errs
	}
	return &c, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseDocument returns the single YAML document's root node.
func parseDocument(file string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, Errors{{File: file, Line: 1, Column: 1, Msg: "the file is empty", Hint: "start with apiVersion: " + APIVersion + " and kind: " + Kind + " (see examples/)"}}
		}
		return nil, syntaxError(file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, Errors{{File: file, Line: extra.Line, Column: extra.Column, Msg: "a second YAML document", Hint: "an inventory is one document: remove the '---' and what follows, or merge it into the first"}}
	} else if !errors.Is(err, io.EOF) {
		return nil, syntaxError(file, err)
	}
	if len(doc.Content) == 0 {
		return nil, Errors{{File: file, Line: 1, Column: 1, Msg: "the file is empty", Hint: "start with apiVersion: " + APIVersion}}
	}
	return doc.Content[0], nil
}

func syntaxError(file string, err error) error {
	msg := err.Error()
	line := 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	return Errors{{File: file, Line: line, Msg: "YAML syntax: " + msg, Hint: "check indentation and quoting on this line and the one before it"}}
}

// decoder walks a yaml.Node tree into Go values by reflection. Unlike yaml.v3's own decoding it
// reports every problem (not just the first), with line, column and the field's path, rejects
// unknown and duplicate keys, substitutes ${VAR} in scalars, and records where each field was
// written.
type decoder struct {
	src       *source
	lookupEnv func(string) (string, bool)
	errs      Errors
	aliases   int
	expanded  map[*yaml.Node]bool // scalars already substituted (an alias may reach one twice)
}

const (
	maxDepth   = 64
	maxAliases = 1000
)

func (d *decoder) errorf(n *yaml.Node, path, hint, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.src.file, Line: n.Line, Column: n.Column, Field: path, Msg: fmt.Sprintf(format, args...), Hint: hint})
}

var unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string, depth int) {
	if depth > maxDepth {
		d.errorf(n, path, "flatten the structure", "nested too deeply")
		return
	}
	if n.Kind == yaml.AliasNode {
		if d.aliases++; d.aliases > maxAliases || n.Alias == nil {
			d.errorf(n, path, "use fewer YAML aliases", "too many alias expansions")
			return
		}
		n = n.Alias
	}
	if _, seen := d.src.pos[path]; !seen || path == "" {
		d.src.pos[path] = Pos{n.Line, n.Column}
	}
	if isNull(n) {
		return // leave the zero value; defaults and validation take over
	}
	if n.Kind == yaml.ScalarNode {
		if !d.substitute(n, path) {
			return
		}
	}
	if v.CanAddr() && v.Addr().Type().Implements(unmarshalerType) {
		if err := v.Addr().Interface().(yaml.Unmarshaler).UnmarshalYAML(n); err != nil {
			d.errorf(n, path, "", "%v", err)
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		elem := reflect.New(v.Type().Elem())
		d.decode(n, elem.Elem(), path, depth+1)
		v.Set(elem)
	case reflect.Struct:
		d.decodeStruct(n, v, path, depth)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.errorf(n, path, "write a list, one '- ' item per line", "want a list, got %s", describe(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.decode(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i), depth+1)
		}
		v.Set(s)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.errorf(n, path, "write key: value pairs, one per line", "want a mapping, got %s", describe(n))
			return
		}
		m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				d.errorf(k, path, "use a plain string key", "a key must be a string, got %s", describe(k))
				continue
			}
			kp := path + "." + k.Value
			if first, dup := seen[k.Value]; dup {
				d.errorf(k, kp, "remove one of them", "%q is set twice (first on line %d)", k.Value, first)
				continue
			}
			seen[k.Value] = k.Line
			ev := reflect.New(v.Type().Elem()).Elem()
			d.decode(val, ev, kp, depth+1)
			m.SetMapIndex(reflect.ValueOf(k.Value), ev)
		}
		v.Set(m)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.errorf(n, path, "write a single value", "want a string, got %s", describe(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Int:
		if n.Kind != yaml.ScalarNode {
			d.errorf(n, path, "write a whole number", "want a number, got %s", describe(n))
			return
		}
		i, err := strconv.ParseInt(n.Value, 10, 32)
		if err != nil {
			d.errorf(n, path, "write a whole number", "want a number, got %q", n.Value)
			return
		}
		v.SetInt(i)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode {
			d.errorf(n, path, "write true or false", "want true or false, got %s", describe(n))
			return
		}
		b, err := strconv.ParseBool(n.Value)
		if err != nil || (n.Value != "true" && n.Value != "false") {
			d.errorf(n, path, "write true or false", "want true or false, got %q", n.Value)
			return
		}
		v.SetBool(b)
	default:
		panic(fmt.Sprintf("inventory: decoder cannot handle %s at %s", v.Type(), path))
	}
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string, depth int) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "write key: value pairs under it, indented", "want a mapping, got %s", describe(n))
		return
	}
	fields := yamlFields(v.Type())
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		kp := joinPath(path, k.Value)
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "use a plain field name", "a key must be a field name, got %s", describe(k))
			continue
		}
		idx, ok := fields[k.Value]
		if !ok {
			hint := "remove it"
			if s := suggest(k.Value, fields); s != "" {
				hint = fmt.Sprintf("did you mean %q?", s)
			}
			d.errorf(k, kp, hint+" (kforge inventory schema lists every field)", "unknown field %q", k.Value)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errorf(k, kp, "remove one of them", "%q is set twice (first on line %d)", k.Value, first)
			continue
		}
		seen[k.Value] = k.Line
		if val.Kind == yaml.MappingNode || val.Kind == yaml.SequenceNode {
			// A block is best pointed at by its key: "masters:" rather than its first item.
			d.src.pos[kp] = Pos{k.Line, k.Column}
		}
		d.decode(val, v.Field(idx), kp, depth+1)
	}
}

// substitute expands ${VAR} in a scalar in place; it reports false after an error.
func (d *decoder) substitute(n *yaml.Node, path string) bool {
	if !strings.Contains(n.Value, "$") || d.expanded[n] {
		return true
	}
	if d.expanded == nil {
		d.expanded = map[*yaml.Node]bool{}
	}
	d.expanded[n] = true
	out, err := expandEnv(n.Value, d.lookupEnv)
	if err != nil {
		d.errorf(n, path, "", "%v", err)
		return false
	}
	n.Value = out
	if n.Style == 0 || n.Style == yaml.FlowStyle {
		n.Tag = "" // a plain scalar: let its type be resolved from the substituted text
	}
	return true
}

func joinPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "something else"
}

// yamlFields maps each yaml field name of struct type t to its field index.
func yamlFields(t reflect.Type) map[string]int {
	m := map[string]int{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		m[name] = i
	}
	return m
}

// suggest returns the field name closest to a misspelt key, if any is close.
func suggest(key string, fields map[string]int) string {
	best, bestD := "", 3
	for name := range fields {
		if dist := levenshtein(strings.ToLower(key), strings.ToLower(name)); dist < bestD || (dist == bestD && name < best && best != "") {
			best, bestD = name, dist
		}
	}
	if bestD > len(key)/2 {
		return ""
	}
	return best
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// bundleManifest is the file every bundle directory holds (bundle.ManifestFile).
const bundleManifest = "manifest.json"

// resolvePaths makes relative file paths absolute against dir and calls check for each file
// that must exist when the inventory is loaded.
func (c *Cluster) resolvePaths(dir string, check func(field, path string)) {
	abs := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) && !strings.HasPrefix(*p, "~") {
			*p = filepath.Join(dir, *p)
		}
	}
	abs(&c.Bundle)
	if c.Bundle != "" {
		// The bundle is read on the workstation: a wrong path is this file's error, found now.
		check("bundle", filepath.Join(c.Bundle, bundleManifest))
	}
	for i := range c.Addons {
		abs(&c.Addons[i].Path)
		check(fmt.Sprintf("addons[%d].path", i), c.Addons[i].Path)
	}
	if ca := c.PKI.ExternalCA; ca != nil {
		abs(&ca.Cert)
		abs(&ca.Key)
		check("pki.externalCA.cert", ca.Cert)
		check("pki.externalCA.key", ca.Key)
	}
	sshPaths := func(s *SSH) {
		abs(&s.IdentityFile)
		abs(&s.KnownHostsFile)
		for i := range s.Bastions {
			abs(&s.Bastions[i].IdentityFile)
		}
	}
	sshPaths(&c.SSH)
	for _, hosts := range [][]Host{c.Masters, c.Workers} {
		for i := range hosts {
			if hosts[i].SSH != nil {
				sshPaths(hosts[i].SSH)
			}
		}
	}
}

func (c *Cluster) errorAt(field, msg, hint string) *Error {
	p := c.src.lookup(field)
	return &Error{File: c.src.file, Line: p.Line, Column: p.Column, Field: field, Msg: msg, Hint: hint}
}
