package inventory

import (
	"fmt"
	"sort"
	"strings"
)

// Error is one problem in an inventory file: where it is, which field, what is wrong and what
// to do about it.
type Error struct {
	File   string
	Line   int // 1-based; 0 when unknown
	Column int // 1-based; 0 when unknown
	Field  string
	Msg    string
	Hint   string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Hint != "" {
		b.WriteString("; ")
		b.WriteString(e.Hint)
	}
	return b.String()
}

// Errors is every problem found in one inventory file, in file order. Load reports them all
// at once so a user fixes the file in one pass.
type Errors []*Error

func (es Errors) Error() string {
	return strings.Join(es.Details(), "\n")
}

// Details returns one line per problem.
func (es Errors) Details() []string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return lines
}

func (es Errors) sort() {
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].Line != es[j].Line {
			return es[i].Line < es[j].Line
		}
		return es[i].Column < es[j].Column
	})
}

// Pos is a place in the inventory file.
type Pos struct{ Line, Column int }

// source remembers where each field of a loaded inventory came from, for error messages made
// after loading (validation, preflight).
type source struct {
	file string
	pos  map[string]Pos // field path ("masters[1].address") → position of its value
}

// lookup finds the position of path or, when the field was not written (a default or a missing
// required field), of its nearest written parent.
func (s *source) lookup(path string) Pos {
	if s == nil {
		return Pos{}
	}
	for p := path; ; p = parentPath(p) {
		if pos, ok := s.pos[p]; ok {
			return pos
		}
		if p == "" {
			return Pos{}
		}
	}
}

func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

// Where returns "file:line:column" of the field at path (e.g. "workers[2].address"), for
// messages that point back into the inventory after it was loaded.
func (c *Cluster) Where(path string) string {
	if c.src == nil {
		return ""
	}
	p := c.src.lookup(path)
	if p.Line == 0 {
		return c.src.file
	}
	return fmt.Sprintf("%s:%d:%d", c.src.file, p.Line, p.Column)
}

// File is the path the inventory was loaded from.
func (c *Cluster) File() string {
	if c.src == nil {
		return ""
	}
	return c.src.file
}
