package tasks

import (
	"context"
	"fmt"
	"time"
)

// Event is one thing a run reports: the person's status lines and, with --output json, the
// machine's event stream are both made from these.
type Event struct {
	Time     time.Time     `json:"time"`
	Kind     EventKind     `json:"event"`
	Task     string        `json:"task,omitempty"`
	Host     string        `json:"host,omitempty"`
	Message  string        `json:"message,omitempty"`
	Duration time.Duration `json:"duration,omitempty"` // on done, failed and host events
	Err      string        `json:"error,omitempty"`
}

// EventKind says what an Event is about.
type EventKind string

const (
	TaskStarted EventKind = "task-started"
	TaskDone    EventKind = "task-done"
	TaskFailed  EventKind = "task-failed"
	HostDone    EventKind = "host-done" // a task's work on one host finished
	Progress    EventKind = "progress"  // something worth a line while a task runs
)

// Reporter receives events as they happen; it must be safe for concurrent use (hosts report
// in parallel).
type Reporter func(Event)

// Step is a Task with the function that does it.
type Step struct {
	Task
	Run func(ctx context.Context, r Reporter) error
}

// Timing is how long one task took.
type Timing struct {
	Task     string        `json:"task"`
	Duration time.Duration `json:"duration"`
}

// TaskError is a failed task: which one, and why.
type TaskError struct {
	Task string
	Err  error
}

func (e *TaskError) Error() string { return fmt.Sprintf("%s: %v", e.Task, e.Err) }
func (e *TaskError) Unwrap() error { return e.Err }

// Run runs steps in order, reporting each start and end with its duration, and stops at the
// first failure. It returns the timing of every step that ran.
func Run(ctx context.Context, steps []Step, report Reporter, now func() time.Time) ([]Timing, error) {
	var timings []Timing
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return timings, &TaskError{Task: s.Name, Err: err}
		}
		start := now()
		report(Event{Time: start, Kind: TaskStarted, Task: s.Name, Message: s.Description})
		r := func(e Event) {
			if e.Task == "" {
				e.Task = s.Name
			}
			if e.Time.IsZero() {
				e.Time = now()
			}
			report(e)
		}
		err := s.Run(ctx, r)
		end := now()
		timings = append(timings, Timing{Task: s.Name, Duration: end.Sub(start)})
		if err != nil {
			report(Event{Time: end, Kind: TaskFailed, Task: s.Name, Duration: end.Sub(start), Err: err.Error()})
			return timings, &TaskError{Task: s.Name, Err: err}
		}
		report(Event{Time: end, Kind: TaskDone, Task: s.Name, Duration: end.Sub(start)})
	}
	return timings, nil
}
