package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestReport: plain go test's lines come through (result lines, a failed test's output, not a
// passing test's), the e2e table lists each top-level test longest first with the total, and
// the exit code says whether anything failed or was cut short.
func TestReport(t *testing.T) {
	const e2e = "github.com/kforge/kforge/e2e"
	in := strings.Join([]string{
		`{"Action":"start","Package":"` + e2e + `"}`,
		`{"Action":"run","Package":"` + e2e + `","Test":"TestA"}`,
		`{"Action":"output","Package":"` + e2e + `","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"output","Package":"` + e2e + `","Test":"TestA","Output":"    a_test.go:1: quiet\n"}`,
		`{"Action":"pass","Package":"` + e2e + `","Test":"TestA/long","Elapsed":40}`,
		`{"Action":"pass","Package":"` + e2e + `","Test":"TestA/long/deeper","Elapsed":30}`,
		`{"Action":"pass","Package":"` + e2e + `","Test":"TestA/short","Elapsed":5}`,
		`{"Action":"pass","Package":"` + e2e + `","Test":"TestA/longer","Elapsed":21}`,
		`{"Action":"pass","Package":"` + e2e + `","Test":"TestA","Elapsed":61.4}`,
		`{"Action":"run","Package":"` + e2e + `","Test":"TestB"}`,
		`{"Action":"output","Package":"` + e2e + `","Test":"TestB/sub","Output":"    b_test.go:2: it broke\n"}`,
		`{"Action":"fail","Package":"` + e2e + `","Test":"TestB/sub","Elapsed":100}`,
		`{"Action":"fail","Package":"` + e2e + `","Test":"TestB","Elapsed":120.6}`,
		`{"Action":"output","Package":"` + e2e + `","Output":"FAIL\n"}`,
		`{"Action":"output","Package":"` + e2e + `","Output":"FAIL\t` + e2e + `\t182.1s\n"}`,
		`{"Action":"fail","Package":"` + e2e + `","Elapsed":182.1}`,
	}, "\n")
	var out strings.Builder
	code := run(strings.NewReader(in), &out, []string{e2e})
	got := out.String()
	for _, want := range []string{"    b_test.go:2: it broke\n", "FAIL\t" + e2e + "\t182.1s\n", "  TestB", "2m1s", "  TestA", "1m1s", "  total", "3m2s"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	// TestA's steps of 20 s or more, in order, under it; not its short step nor a deeper subtest.
	if !strings.Contains(got, "  TestA ") || !strings.Contains(got, "1m1s\n      long 40s, longer 21s\n") || strings.Contains(got, "deeper") || strings.Contains(got, "short") {
		t.Errorf("TestA's steps are not listed under it as they should be:\n%s", got)
	}
	if strings.Contains(got, "quiet") || strings.Index(got, "TestB ") > strings.Index(got, "TestA ") {
		t.Errorf("a passing test's output printed, or the table not longest first:\n%s", got)
	}
	if code != 1 {
		t.Errorf("exit %d with a failed test, want 1", code)
	}
	if i := strings.Index(got, "failed (the last lines each printed from its test files):\n  TestB/sub\n      b_test.go:2: it broke\n  TestB\n"); i < 0 || i < strings.Index(got, "  total") {
		t.Errorf("the failures are not said at the end, after the table:\n%s", got)
	}

	out.Reset()
	lane := strings.Join([]string{
		`{"Action":"output","Package":"p","Test":"TestL","Output":"    lanes_test.go:91: ran 5m44s after its turn came\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestL","Elapsed":1130.9}`,
		`{"Action":"pass","Package":"p","Elapsed":1131}`,
	}, "\n")
	if code := run(strings.NewReader(lane), &out, []string{"p"}); code != 0 || !strings.Contains(out.String(), "5m44s  (after 13m7s waiting for its lane)") {
		t.Errorf("a test that waited for its lane: exit %d\n%s", code, out.String())
	}
	out.Reset()
	timeout := `{"Action":"run","Package":"p","Test":"TestSlow"}` + "\n" + `{"Action":"output","Package":"p","Test":"TestSlow","Output":"panic: test timed out after 1m0s\n"}` + "\n" + `{"Action":"fail","Package":"p","Elapsed":60}`
	if code := run(strings.NewReader(timeout), &out, nil); code != 1 || !strings.Contains(out.String(), "panic: test timed out") {
		t.Errorf("a package that timed out: exit %d, the running test's output lost:\n%s", code, out.String())
	}
	out.Reset()
	cut := `{"Action":"start","Package":"p"}` + "\n" + `{"Action":"run","Package":"p","Test":"TestX"}`
	if code := run(strings.NewReader(cut), &out, nil); code != 1 || !strings.Contains(out.String(), "no result for p") {
		t.Errorf("a run cut short: exit %d\n%s", code, out.String())
	}
	out.Reset()
	ok := `{"Action":"start","Package":"p"}` + "\n" + `{"Action":"output","Package":"p","Output":"ok  \tp\t0.1s\n"}` + "\n" + `{"Action":"pass","Package":"p","Elapsed":0.1}`
	if code := run(strings.NewReader(ok), &out, nil); code != 0 || out.String() != "ok  \tp\t0.1s\n" {
		t.Errorf("a passing package: exit %d, printed %q", code, out.String())
	}
}

// TestReportWhy: of a failed test's output, the digest at the end keeps the last eight lines
// printed from test files, without their continuation lines, cut when long, and before them
// the earlier lines that say "want".
func TestReportWhy(t *testing.T) {
	var in []string
	for i := 1; i <= 12; i++ {
		if i == 2 {
			in = append(in, `{"Action":"output","Package":"p","Test":"TestU/step","Output":"    u_test.go:50: got 3, want 0\n"}`)
		}
		in = append(in, fmt.Sprintf(`{"Action":"output","Package":"p","Test":"TestU/step","Output":"    u_test.go:%d: line %d\n"}`, i, i),
			`{"Action":"output","Package":"p","Test":"TestU/step","Output":"        continued\n"}`)
	}
	in = append(in, `{"Action":"output","Package":"p","Test":"TestU/step","Output":"    u_test.go:99: `+strings.Repeat("x", 300)+`\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestU/step","Elapsed":3}`, `{"Action":"fail","Package":"p","Elapsed":3}`)
	var out strings.Builder
	run(strings.NewReader(strings.Join(in, "\n")), &out, nil)
	_, digest, _ := strings.Cut(out.String(), "failed (the last lines each printed from its test files):\n")
	want := "  TestU/step\n      u_test.go:50: got 3, want 0\n"
	for i := 6; i <= 12; i++ {
		want += fmt.Sprintf("      u_test.go:%d: line %d\n", i, i)
	}
	want += "      u_test.go:99: " + strings.Repeat("x", 240-len("u_test.go:99: ")) + "…\n"
	if digest != want {
		t.Errorf("digest\n%s\nwant\n%s", digest, want)
	}
}
