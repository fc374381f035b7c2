package progress

import (
	"bytes"
	"encoding/json"
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
