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

// A StateHolder keeps a run's state away from the workstation (kube.StateStore, in a management
// cluster): its Context ends when the hold is lost (another holder took the lock), and
// SyncAfterSteps writes the state back after each step, calling stop when that fails.
type StateHolder interface {
	Context() context.Context
	SyncAfterSteps(ctx context.Context, report progress.Reporter, stop context.CancelCauseFunc) progress.Reporter
}

// RunHeld is Run under held: the state is written back after every step, and the run stops
// before its next step when the hold is lost or a write back fails, its error saying which.
// With held nil it is Run.
func RunHeld(ctx context.Context, steps []Step, report progress.Reporter, now func() time.Time, held StateHolder) ([]progress.Timing, error) {
	if held == nil {
		return Run(ctx, steps, report, now)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(held.Context(), func() { cancel(context.Cause(held.Context())) })()
	timings, err := Run(ctx, steps, held.SyncAfterSteps(ctx, report, cancel), now)
	if cause := context.Cause(ctx); err != nil && cause != nil && cause != ctx.Err() {
		err = fmt.Errorf("%w (%w)", err, cause)
	}
	return timings, err
}

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
