package state

import (
	"encoding/json"
	"fmt"
	"path/filepath"
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
	Events  []progress.Event `json:"events"`  // filled by Save, redacted

	events progress.Recorder
}

// NewRun starts the record of command.
func NewRun(command string, start time.Time) *Run { return &Run{Command: command, Start: start} }

// Report wraps r so that every event is also recorded.
func (run *Run) Report(r progress.Reporter) progress.Reporter {
	return func(e progress.Event) {
		run.events.Report(e)
		r(e)
	}
}

// Save ends the record with err (nil: ok) and writes it into d's runs/, with every event's
// message and error redacted.
func (d Dir) Save(run *Run, end time.Time, err error) error {
	run.End, run.Outcome, run.Events = end, "ok", run.events.Events()
	if err != nil {
		run.Outcome = progress.Redact(err.Error())
	}
	for i, e := range run.Events {
		run.Events[i].Message, run.Events[i].Err = progress.Redact(e.Message), progress.Redact(e.Err)
	}
	data, jerr := json.MarshalIndent(run, "", "  ")
	if jerr != nil {
		return jerr
	}
	name := fmt.Sprintf("%s-%s.json", run.Start.UTC().Format("20060102-150405.000"), run.Command)
	return d.Write(filepath.Join(d.Runs(), name), data, 0o600)
}
