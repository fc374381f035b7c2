package state

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/kforge/kforge/progress"
)

// Run records what one run did: every event its steps reported (each host's "3 files
// written; kubelet restarted", each certificate issued, each object created) and how it ended.
// Written to <dir>/runs/<start>-<command>.json when the run ends, whatever the outcome.
type Run struct {
	Command string           `json:"command"`
	Start   time.Time        `json:"start"`
	End     time.Time        `json:"end"`
	Outcome string           `json:"outcome"` // "ok", or the error
	Events  []progress.Event `json:"events"`

	mu sync.Mutex
}

// NewRun starts the record of command.
func NewRun(command string, start time.Time) *Run { return &Run{Command: command, Start: start} }

// Report wraps r so that every event is also recorded.
func (run *Run) Report(r progress.Reporter) progress.Reporter {
	return func(e progress.Event) {
		run.mu.Lock()
		rec := e
		rec.Message, rec.Err = progress.Redact(e.Message), progress.Redact(e.Err)
		run.Events = append(run.Events, rec)
		run.mu.Unlock()
		r(e)
	}
}

// Save ends the record with err (nil: ok) and writes it into d's runs/.
func (d Dir) Save(run *Run, end time.Time, err error) error {
	run.mu.Lock()
	defer run.mu.Unlock()
	run.End, run.Outcome = end, "ok"
	if err != nil {
		run.Outcome = progress.Redact(err.Error())
	}
	data, jerr := json.MarshalIndent(run, "", "  ")
	if jerr != nil {
		return jerr
	}
	name := fmt.Sprintf("%s-%s.json", run.Start.UTC().Format("20060102-150405.000"), run.Command)
	return d.Write(filepath.Join(d.Runs(), name), data, 0o600)
}
