package conformance

import (
	"encoding/xml"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Summary is a run's outcome: the selected specs by SIG, and every failure.
type Summary struct {
	Passed, Failed, Skipped int
	BySIG                   map[string]*Counts
	Failures                []Failure
	Took                    time.Duration
}

// Counts are one SIG's specs.
type Counts struct{ Passed, Failed, Skipped int }

// Failure is a failed spec and the first lines of why. Offline is set for a spec of
// CannotPassOffline: the reason it cannot pass with images made offline.
type Failure struct{ Spec, Message, Offline string }

// CannotPassOffline are the selected specs that cannot pass with the kit's images, by a part of
// their name, with the reason. Every other failure is a defect, of kforge or of the kit.
var CannotPassOffline = map[string]string{
	"ImageVolume should succeed with pod and pull policy of Always": "it asserts that kitten's image is Alpine Linux (its /etc/os-release); the kit's images are Debian's, and Debian's apt has no Alpine",
}

// Unexpected are the failures not in CannotPassOffline.
func (s Summary) Unexpected() []Failure {
	var u []Failure
	for _, f := range s.Failures {
		if f.Offline == "" {
			u = append(u, f)
		}
	}
	return u
}

type junitReport struct {
	Suites []struct {
		Cases []junitCase `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitCase struct {
	Name    string `xml:"name,attr"`
	Status  string `xml:"status,attr"`
	Failure *struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	} `xml:"failure"`
	Error *struct {
		Message string `xml:"message,attr"`
	} `xml:"error"`
	Skipped *struct{} `xml:"skipped"`
}

var sigRE = regexp.MustCompile(`\[sig-([a-z0-9-]+)\]`)

// ReadJUnit reads ginkgo's JUnit report at p and summarizes the specs that focus and skip select
// (ginkgo lists every spec of the suite; those not selected are not counted). A setup or
// teardown node that failed counts as a failure of SIG "suite".
func ReadJUnit(p, focus, skip string) (Summary, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return Summary{}, err
	}
	var r junitReport
	if err := xml.Unmarshal(b, &r); err != nil {
		return Summary{}, fmt.Errorf("%s: %w", p, err)
	}
	fre, err := regexp.Compile(focus)
	if err != nil {
		return Summary{}, err
	}
	sre, err := regexp.Compile(skip)
	if err != nil {
		return Summary{}, err
	}
	s := Summary{BySIG: map[string]*Counts{}}
	for _, suite := range r.Suites {
		for _, c := range suite.Cases {
			failed := c.Failure != nil || c.Error != nil || (c.Status != "" && c.Status != "passed" && c.Status != "skipped" && c.Status != "pending")
			sig := "suite"
			if m := sigRE.FindStringSubmatch(c.Name); m != nil {
				sig = m[1]
			} else if !failed {
				continue // a setup node that did its job
			}
			if sig != "suite" && (!fre.MatchString(c.Name) || (skip != "" && sre.MatchString(c.Name))) {
				continue
			}
			n := s.BySIG[sig]
			if n == nil {
				n = &Counts{}
				s.BySIG[sig] = n
			}
			switch {
			case failed:
				n.Failed++
				s.Failed++
				msg := ""
				if c.Failure != nil {
					msg = c.Failure.Message
					if msg == "" {
						msg = c.Failure.Text
					}
				} else if c.Error != nil {
					msg = c.Error.Message
				}
				f := Failure{Spec: c.Name, Message: firstLines(msg, 3)}
				for part, why := range CannotPassOffline {
					if strings.Contains(c.Name, part) {
						f.Offline = why
					}
				}
				s.Failures = append(s.Failures, f)
			case c.Skipped != nil || c.Status == "skipped" || c.Status == "pending":
				n.Skipped++
				s.Skipped++
			default:
				n.Passed++
				s.Passed++
			}
		}
	}
	sort.Slice(s.Failures, func(i, j int) bool { return s.Failures[i].Spec < s.Failures[j].Spec })
	return s, nil
}

// String is the summary as a table by SIG, then the failures.
func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d passed, %d failed, %d skipped", s.Passed, s.Failed, s.Skipped)
	if s.Took > 0 {
		fmt.Fprintf(&b, " in %s", s.Took.Round(time.Second))
	}
	b.WriteString("\n")
	sigs := make([]string, 0, len(s.BySIG))
	for sig := range s.BySIG {
		sigs = append(sigs, sig)
	}
	sort.Strings(sigs)
	fmt.Fprintf(&b, "%-18s %7s %7s %8s\n", "SIG", "passed", "failed", "skipped")
	for _, sig := range sigs {
		c := s.BySIG[sig]
		fmt.Fprintf(&b, "%-18s %7d %7d %8d\n", sig, c.Passed, c.Failed, c.Skipped)
	}
	for _, f := range s.Failures {
		if f.Offline != "" {
			fmt.Fprintf(&b, "FAIL %s\n     cannot pass offline: %s\n", f.Spec, f.Offline)
			continue
		}
		fmt.Fprintf(&b, "FAIL %s\n     %s\n", f.Spec, strings.ReplaceAll(f.Message, "\n", "\n     "))
	}
	return b.String()
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
