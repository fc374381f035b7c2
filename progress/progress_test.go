package progress

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
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

// TestEveryBeatsUntilStopped: the heartbeat reports at its interval with the time elapsed, and
// nothing after stop returns.
func TestEveryBeatsUntilStopped(t *testing.T) {
	var mu sync.Mutex
	var got []time.Duration
	stop := Every(func(e Event) { mu.Lock(); got = append(got, e.Duration); mu.Unlock() }, 20*time.Millisecond, func(el time.Duration) Event {
		return Event{Kind: Info, Duration: el}
	})
	time.Sleep(110 * time.Millisecond)
	stop()
	mu.Lock()
	n := len(got)
	mu.Unlock()
	if n < 3 || n > 6 {
		t.Fatalf("%d beats in 110ms at 20ms", n)
	}
	for i := 1; i < n; i++ {
		if got[i] <= got[i-1] {
			t.Errorf("elapsed not increasing: %v", got)
		}
	}
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != n {
		t.Errorf("beats after stop: %d, then %d", n, len(got))
	}
	stop() // a second stop is harmless
}

// TestLogHandlerTurnsInfoIntoEvents: a package's Info records become progress events (task from
// the "task" attribute, other attributes after the message); debug records go to the log only.
func TestLogHandlerTurnsInfoIntoEvents(t *testing.T) {
	var events []Event
	var debug bytes.Buffer
	log := slog.New(LogHandler(func(e Event) { events = append(events, e) }, slog.NewTextHandler(&debug, &slog.HandlerOptions{Level: slog.LevelDebug})))
	log.With("task", "lab demo").Info("hosts started", "hosts", 3)
	log.Debug("a command", "cmd", "ip link")
	if len(events) != 1 || events[0].Task != "lab demo" || events[0].Message != "lab demo: hosts started (hosts 3)" || events[0].Kind != Info {
		t.Errorf("events %+v", events)
	}
	if !strings.Contains(debug.String(), "ip link") || strings.Contains(debug.String(), "hosts started") {
		t.Errorf("debug log %q", debug.String())
	}
}
