// Command testreport reads `go test -json` on stdin and prints what plain `go test` prints (each
// package's result line, and the output of the tests that failed), then a table of the
// duration of every top-level test of the e2e package, longest first, and their total, so the
// growth of the suite is seen at the end of every `make test`. A lab test that waited for its
// turn in its lane (e2e/lanes_test.go) and logged "ran D after its turn came" is listed with D,
// its own time, and the wait beside it; under each test, its steps (direct subtests) of
// stepMin or more, in the order they ran, so it is seen where the time goes. Last of all, for each test that failed, the last lines it
// printed from its test files (`x_test.go:N: ...`, a message's first line each), after the
// earlier ones that say "want" (the house's error messages do): the output above
// can be long, and CI keeps only its tail, so why a test failed is said at the very end too. It
// exits 1 when a test or a package failed (or the input ended without a package result), 0
// otherwise.
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
)

// event is one line of test2json's output.
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// report is what the stream said: the packages' results and each test's output and outcome.
type report struct {
	out      io.Writer
	failed   bool
	pending  map[string]bool               // packages started without a result yet
	output   map[string][]string           // by package and test: output lines, kept until it ends
	duration map[string]map[string]float64 // by package: top-level tests' seconds
	waited   map[string]map[string]float64 // by package: seconds a top-level test waited for its lane
	steps    map[string]map[string][]step  // by package and top-level test: its direct subtests, in order
	why      []failure                     // the tests that failed, in the order they ended
}

// step is a direct subtest of a top-level test (an e2e lab's phase) and its seconds.
type step struct {
	name    string
	seconds float64
}

// stepMin is the shortest step the table lists.
const stepMin = 20.0

// failure is a test that failed and the last lines it printed from its test files.
type failure struct {
	test  string
	lines []string
}

// testLine is a line a test printed through t.Log or t.Error: its message's first line.
var testLine = regexp.MustCompile(`^\s+\S+_test\.go:\d+: `)

// Of each failed test, the digest keeps this many lines, each cut to lineMax bytes.
// Before them, it keeps up to wantLines earlier lines that say "want".
const (
	whyLines  = 8
	wantLines = 6
	lineMax   = 240
)

// failedWith records why test failed: the last lines of out (its own output, not its
// subtests') that it printed from its test files, and before them the earlier such lines that
// say "want" (the house's error messages do; t.Errorf and t.Logf look alike in the output, and
// an error said early in a long test is otherwise cut off).
func (r *report) failedWith(test string, out []string) {
	var lines []string
	for _, l := range out {
		if testLine.MatchString(l) {
			l = strings.TrimSpace(l)
			if len(l) > lineMax {
				l = l[:lineMax] + "…"
			}
			lines = append(lines, l)
		}
	}
	if len(lines) > whyLines {
		var wants []string
		for _, l := range lines[:len(lines)-whyLines] {
			if strings.Contains(l, "want") {
				wants = append(wants, l)
			}
		}
		if len(wants) > wantLines {
			wants = wants[len(wants)-wantLines:]
		}
		lines = append(wants, lines[len(lines)-whyLines:]...)
	}
	r.why = append(r.why, failure{test: test, lines: lines})
}

// ranAfterTurn is the line of an e2e test that waited for its lane: its own time.
var ranAfterTurn = regexp.MustCompile(`\bran (\S+) after its turn came\n$`)

func newReport(out io.Writer) *report {
	return &report{out: out, pending: map[string]bool{}, output: map[string][]string{}, duration: map[string]map[string]float64{}, waited: map[string]map[string]float64{}, steps: map[string]map[string][]step{}}
}

func (r *report) add(e event) {
	key := e.Package + "\x00" + e.Test
	switch e.Action {
	case "start":
		r.pending[e.Package] = true
	case "output":
		if e.Test == "" {
			// Package-level lines: the result line ("ok", "FAIL", "?"), build errors, panics.
			if isNoise(e.Output) {
				return
			}
			fmt.Fprint(r.out, e.Output)
			return
		}
		r.output[key] = append(r.output[key], e.Output)
	case "pass", "skip":
		if e.Test == "" {
			delete(r.pending, e.Package)
			return
		}
		r.ended(e)
		delete(r.output, key)
	case "fail":
		r.failed = true
		if e.Test == "" {
			// A package that failed with tests still running (a timeout, a panic): their
			// output holds the why.
			for _, k := range slices.Sorted(maps.Keys(r.output)) {
				if strings.HasPrefix(k, e.Package+"\x00") {
					for _, l := range r.output[k] {
						fmt.Fprint(r.out, l)
					}
					delete(r.output, k)
				}
			}
			delete(r.pending, e.Package)
			return
		}
		r.ended(e)
		for _, l := range r.output[key] {
			fmt.Fprint(r.out, l)
		}
		r.failedWith(e.Test, r.output[key])
		delete(r.output, key)
	}
}

// ended records a top-level test's duration, or a direct subtest's as its step.
func (r *report) ended(e event) {
	if test, sub, ok := strings.Cut(e.Test, "/"); ok {
		if !strings.Contains(sub, "/") {
			if r.steps[e.Package] == nil {
				r.steps[e.Package] = map[string][]step{}
			}
			r.steps[e.Package][test] = append(r.steps[e.Package][test], step{sub, e.Elapsed})
		}
		return
	}
	if r.duration[e.Package] == nil {
		r.duration[e.Package] = map[string]float64{}
		r.waited[e.Package] = map[string]float64{}
	}
	r.duration[e.Package][e.Test] = e.Elapsed
	for _, l := range r.output[e.Package+"\x00"+e.Test] {
		if m := ranAfterTurn.FindStringSubmatch(l); m != nil {
			if d, err := time.ParseDuration(m[1]); err == nil && d.Seconds() <= e.Elapsed {
				r.duration[e.Package][e.Test] = d.Seconds()
				r.waited[e.Package][e.Test] = e.Elapsed - d.Seconds()
			}
		}
	}
}

// isNoise says whether a package-level line is what -json adds to plain go test's output.
func isNoise(line string) bool {
	return strings.HasPrefix(line, "=== ") || strings.HasPrefix(line, "PASS\n") || line == "PASS\n" || strings.HasPrefix(line, "--- ")
}

// table prints the durations of pkg's top-level tests, longest first, and their total.
func (r *report) table(pkg string) {
	tests := r.duration[pkg]
	if len(tests) == 0 {
		return
	}
	names := make([]string, 0, len(tests))
	var total float64
	for n, d := range tests {
		names = append(names, n)
		total += d
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(tests[b], tests[a]), strings.Compare(a, b)) })
	fmt.Fprintf(r.out, "\n%s: duration of each test\n", pkg)
	for _, n := range names {
		if w := r.waited[pkg][n]; w >= 1 {
			fmt.Fprintf(r.out, "  %-60s %8s  (after %s waiting for its lane)\n", n, seconds(tests[n]), seconds(w))
		} else {
			fmt.Fprintf(r.out, "  %-60s %8s\n", n, seconds(tests[n]))
		}
		var long []string
		for _, st := range r.steps[pkg][n] {
			if st.seconds >= stepMin {
				long = append(long, st.name+" "+seconds(st.seconds))
			}
		}
		if len(long) > 0 {
			fmt.Fprintf(r.out, "      %s\n", strings.Join(long, ", "))
		}
	}
	fmt.Fprintf(r.out, "  %-60s %8s\n", "total", seconds(total))
}

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
}

func run(in io.Reader, out io.Writer, tablePkgs []string) int {
	r := newReport(out)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintln(out, sc.Text()) // not test2json's: a build error of go test itself
			r.failed = true
			continue
		}
		r.add(e)
	}
	for _, p := range tablePkgs {
		r.table(p)
	}
	if len(r.why) > 0 {
		fmt.Fprintf(out, "\nfailed (the last lines each printed from its test files):\n")
		for _, f := range r.why {
			fmt.Fprintf(out, "  %s\n", f.test)
			for _, l := range f.lines {
				fmt.Fprintf(out, "      %s\n", l)
			}
		}
	}
	if len(r.pending) > 0 {
		fmt.Fprintf(out, "testreport: no result for %s (the run was cut short)\n", strings.Join(slices.Sorted(maps.Keys(r.pending)), ", "))
		return 1
	}
	if r.failed {
		return 1
	}
	return 0
}

func main() {
	pkgs := os.Args[1:]
	if len(pkgs) == 0 {
		pkgs = []string{"github.com/kforge/kforge/e2e"}
	}
	os.Exit(run(os.Stdin, os.Stdout, pkgs))
}
