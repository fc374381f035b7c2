// Package progress is the one path by which a long command tells people and machines what it
// is doing: apply, reset, prune, lab and bundle build all report Events to a Reporter, and one
// Printer turns them into the same status lines on stderr, the same `--output json` event stream
// on stdout, and the same records in the debug log.
package progress

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Event is one thing a run reports.
type Event struct {
	Time     time.Time     `json:"time"`
	Kind     Kind          `json:"event"`
	Task     string        `json:"task,omitempty"`
	Host     string        `json:"host,omitempty"`
	Message  string        `json:"message,omitempty"`
	Duration time.Duration `json:"duration,omitempty"` // on done, failed and host events; the time so far on a heartbeat
	Err      string        `json:"error,omitempty"`
}

// Kind says what an Event is about.
type Kind string

const (
	Started  Kind = "task-started"
	Done     Kind = "task-done"
	Failed   Kind = "task-failed"
	HostDone Kind = "host-done" // a step's work on one host finished
	Info     Kind = "progress"  // something worth a line while a step runs
)

// Reporter receives events as they happen; it must be safe for concurrent use (hosts report in
// parallel).
type Reporter func(Event)

// Discard is a Reporter that drops every event.
func Discard(Event) {}

// Timing is how long one step took.
type Timing struct {
	Task     string        `json:"task"`
	Duration time.Duration `json:"duration"`
}

// Printer writes events for a person (a line per step and per host on Err) or for a machine
// (one JSON object per event on Out), and records each in the debug log.
type Printer struct {
	mu  sync.Mutex
	err io.Writer
	enc *json.Encoder // nil: text
	log *slog.Logger
}

// NewPrinter returns a Printer; asJSON selects the event stream on out instead of text on err.
func NewPrinter(out, err io.Writer, asJSON bool, log *slog.Logger) *Printer {
	p := &Printer{err: err, log: log}
	if asJSON {
		p.enc = json.NewEncoder(out)
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	return p
}

// Report is the Printer's Reporter.
func (p *Printer) Report(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.Message, e.Err = Redact(e.Message), Redact(e.Err)
	p.log.Debug("event", "kind", string(e.Kind), "task", e.Task, "host", e.Host, "message", e.Message, "duration", e.Duration, "error", e.Err)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.enc != nil {
		_ = p.enc.Encode(e)
		return
	}
	w := p.err
	switch e.Kind {
	case Started:
		fmt.Fprintf(w, "• %-15s %s\n", e.Task, e.Message)
	case Done:
		fmt.Fprintf(w, "✓ %-15s %s\n", e.Task, Round(e.Duration))
	case Failed:
		fmt.Fprintf(w, "✗ %-15s failed after %s\n", e.Task, Round(e.Duration))
	case HostDone:
		d := ""
		if e.Duration > 0 {
			d = " (" + Round(e.Duration) + ")"
		}
		fmt.Fprintf(w, "    %-13s %s%s\n", e.Host, e.Message, d)
	default:
		if e.Host != "" {
			fmt.Fprintf(w, "    %-13s %s\n", e.Host, e.Message)
		} else {
			fmt.Fprintf(w, "    %s\n", e.Message)
		}
	}
}

// Summary ends a run: a closing line and the time of each step.
func (p *Printer) Summary(msg string, total time.Duration, timings []Timing) {
	p.log.Debug("summary", "message", msg, "duration", total)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.enc != nil {
		_ = p.enc.Encode(map[string]any{"event": "summary", "message": msg, "duration": total, "timings": timings})
		return
	}
	parts := make([]string, len(timings))
	for i, t := range timings {
		parts[i] = t.Task + " " + Round(t.Duration)
	}
	fmt.Fprintf(p.err, "\n%s\ntotal %s: %s\n", msg, Round(total), strings.Join(parts, ", "))
}

// Round shortens a duration for a person: whole seconds from 10 s, tenths from 1 s.
func Round(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Millisecond).String()
	}
}
