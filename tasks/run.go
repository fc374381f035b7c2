package tasks

import (
	"context"
	"fmt"
	"time"

	"github.com/kforge/kforge/progress"
)

// Step is a Task with the function that does it.
type Step struct {
	Task
	Run func(ctx context.Context, r progress.Reporter) error
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
func Run(ctx context.Context, steps []Step, report progress.Reporter, now func() time.Time) ([]progress.Timing, error) {
	var timings []progress.Timing
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return timings, &TaskError{Task: s.Name, Err: err}
		}
		start := now()
		report(progress.Event{Time: start, Kind: progress.Started, Task: s.Name, Message: s.Description})
		r := func(e progress.Event) {
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
		timings = append(timings, progress.Timing{Task: s.Name, Duration: end.Sub(start)})
		if err != nil {
			report(progress.Event{Time: end, Kind: progress.Failed, Task: s.Name, Duration: end.Sub(start), Err: err.Error()})
			return timings, &TaskError{Task: s.Name, Err: err}
		}
		report(progress.Event{Time: end, Kind: progress.Done, Task: s.Name, Duration: end.Sub(start)})
	}
	return timings, nil
}
