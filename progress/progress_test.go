package progress

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func TestRedactionSafetyNet(t *testing.T) {
	in := "token abcdef.0123456789abcdef and -----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY----- done"
	out := Redact(in)
	if strings.Contains(out, "0123456789abcdef") || strings.Contains(out, "MHc") || !strings.Contains(out, "done") {
		t.Fatalf("Redact: %q", out)
	}
}

// TestPrinterTextAndJSON: the same events make a line per step and per host for a person, and
// one JSON object each for a machine; neither shows a token.
func TestPrinterTextAndJSON(t *testing.T) {
	events := []Event{
		{Kind: Started, Task: "stage", Message: "push files"},
		{Kind: HostDone, Task: "stage", Host: "w1", Message: "token abcdef.0123456789abcdef written", Duration: 1500 * time.Millisecond},
		{Kind: Done, Task: "stage", Duration: 12 * time.Second},
	}
	var out, errw bytes.Buffer
	p := NewPrinter(&out, &errw, false, nil)
	for _, e := range events {
		p.Report(e)
	}
	want := "• stage           push files\n    w1            token [redacted-token] written (1.5s)\n✓ stage           12s\n"
	if errw.String() != want || out.Len() != 0 {
		t.Fatalf("text:\n%q\nwant\n%q (stdout %q)", errw.String(), want, out.String())
	}
	out.Reset()
	errw.Reset()
	p = NewPrinter(&out, &errw, true, nil)
	for _, e := range events {
		p.Report(e)
	}
	dec := json.NewDecoder(&out)
	var kinds []string
	for dec.More() {
		var e Event
		if err := dec.Decode(&e); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(e.Message, "0123456789abcdef") {
			t.Errorf("token in JSON: %q", e.Message)
		}
		kinds = append(kinds, string(e.Kind))
	}
	if strings.Join(kinds, ",") != "task-started,host-done,task-done" || errw.Len() != 0 {
		t.Fatalf("json kinds %v, stderr %q", kinds, errw.String())
	}
}

// TestEveryBeatsUntilStopped: the heartbeat reports at its interval with the time elapsed so far,
// whether or not anything else happens, and nothing after stop returns.
func TestEveryBeatsUntilStopped(t *testing.T) {
	const interval = 10 * time.Millisecond
	beats := make(chan Event, 1000)
	stop := Every(func(e Event) { beats <- e }, interval, func(el time.Duration) Event {
		return Event{Kind: Info, Message: "still working", Duration: el}
	})
	var got []Event
	timeout := time.After(10 * time.Second)
	for len(got) < 3 {
		select {
		case e := <-beats:
			got = append(got, e)
		case <-timeout:
			t.Fatalf("%d heartbeats in 10s at an interval of %s", len(got), interval)
		}
	}
	stop()
	for i, e := range got {
		if e.Kind != Info || e.Message != "still working" {
			t.Errorf("beat %d: %+v", i, e)
		}
		if e.Duration < time.Duration(i+1)*interval || (i > 0 && e.Duration <= got[i-1].Duration) {
			t.Errorf("beat %d says %s so far (beats: %+v)", i, e.Duration, got)
		}
	}
	n := len(beats) // beats sent between the third and stop's return
	time.Sleep(5 * interval)
	if len(beats) != n {
		t.Errorf("%d beats after stop returned", len(beats)-n)
	}
	stop() // a second stop is harmless
}

// TestTaskReportsStartAndEnd: a Task is started, named on the events run reports, and done with
// its duration, or failed with its error; Timings collects each task's time.
func TestTaskReportsStartAndEnd(t *testing.T) {
	var events []Event
	var tm Timings
	r := tm.Report(func(e Event) { events = append(events, e) })
	err := Task(r, "pause", "3.10.2 from the cache", func(r Reporter) error {
		r(Event{Kind: Info, Message: "compiling"})
		r(Event{Kind: HostDone, Task: "other", Message: "kept"})
		time.Sleep(2 * time.Millisecond)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("exit status 1")
	if err := Task(r, "etcd", "v3.6.8", func(Reporter) error { return boom }); err != boom {
		t.Fatalf("Task returned %v, want the step's error", err)
	}
	var got []string
	for _, e := range events {
		got = append(got, string(e.Kind)+" "+e.Task+" "+e.Message+e.Err)
	}
	want := []string{"task-started pause 3.10.2 from the cache", "progress pause compiling", "host-done other kept", "task-done pause ",
		"task-started etcd v3.6.8", "task-failed etcd exit status 1"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if d := events[3].Duration; d < 2*time.Millisecond {
		t.Errorf("done after %s, want the step's duration", d)
	}
	if l := tm.List(); len(l) != 2 || l[0].Task != "pause" || l[0].Duration != events[3].Duration || l[1].Task != "etcd" {
		t.Errorf("timings %+v", l)
	}
}

// TestSummaryText: the closing line lists each step's time, separated by commas, with none
// after the last (it used to end "…, kubeconfig 0s,").
func TestSummaryText(t *testing.T) {
	var errOut bytes.Buffer
	p := NewPrinter(io.Discard, &errOut, false, nil)
	p.Summary("cluster demo is ready", 12*time.Second, []Timing{{Task: "connect", Duration: 300 * time.Millisecond}, {Task: "kubeconfig", Duration: 0}})
	if want := "\ncluster demo is ready\ntotal 12s: connect 300ms, kubeconfig 0s\n"; errOut.String() != want {
		t.Errorf("summary %q, want %q", errOut.String(), want)
	}
}
