// Package scripts holds every shell script of more than a line or two that kforge runs on a
// host (the facts table's longer commands, reset's steps, the units kforge stops and retires),
// as plain POSIX sh files (name.sh) embedded here, so that each is read, linted by shellcheck and
// run under a real sh in a unit test like any other source file.
//
// A script takes its inputs as shell variables that Command sets before it, and declares them
// on its first lines with `: "${name:?}"` (`: "${name?}"` for one that may be empty), so a
// missing input fails before anything is done. A list is one item a line (Lines), read with
// `while IFS= read -r`. Paths of kforge's come from package hostpath as inputs; no script spells
// one. A line whose first non-blank character is # is a comment that stays on the workstation
// (shellcheck directives aside), so no quoted string or here-document holds such a line.
package scripts

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/kforge/kforge/remote"
)

//go:embed *.sh
var files embed.FS

// Command returns script name (name.sh, as Body gives it) with its inputs set before it, one
// line each, in the order given: vars are pairs of a variable's name and its value, quoted with
// remote.Quote. An unknown name or an odd vars is a programming error: it panics.
func Command(name string, vars ...string) string {
	if len(vars)%2 != 0 {
		panic(fmt.Sprintf("scripts.Command(%q): vars are name, value pairs; got %d strings", name, len(vars)))
	}
	var b strings.Builder
	for i := 0; i < len(vars); i += 2 {
		b.WriteString(vars[i] + "=" + remote.Quote(vars[i+1]) + "\n")
	}
	b.WriteString(Body(name))
	return b.String()
}

// Body is script name as it runs on a host: its text without the shebang, blank lines and the
// comments only a reader needs (shellcheck's directives stay, so that what runs is what was
// linted), and without the last newline.
func Body(name string) string {
	var keep []string
	for _, l := range strings.Split(string(Source(name)), "\n") {
		if t := strings.TrimSpace(l); t == "" || strings.HasPrefix(t, "#") && !strings.HasPrefix(t, "# shellcheck ") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n")
}

// Source is script name's file as it is, comments included.
func Source(name string) []byte {
	data, err := files.ReadFile(name + ".sh")
	if err != nil {
		panic(fmt.Sprintf("scripts: no script %s.sh (%v)", name, err))
	}
	return data
}

// Lines is a list input: one item a line, as the scripts read lists (while IFS= read -r).
func Lines(items []string) string { return strings.Join(items, "\n") }

// Names lists the scripts, sorted: each name.sh without its extension.
func Names() []string {
	ents, err := fs.Glob(files, "*.sh")
	if err != nil {
		panic(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e, ".sh"))
	}
	sort.Strings(out)
	return out
}
