package progress

import (
	"sync"
	"time"
)

// Task runs one step of a command that is not a tasks.Step (a component of a bundle build, a
// stage of lab up) as a task of its own: a Started event saying what it does, then Done or
// Failed with how long it took. run reports through the Reporter it is given, which puts the
// task's name on events that name none.
func Task(r Reporter, name, what string, run func(r Reporter) error) error {
	start := time.Now()
	r(Event{Time: start, Kind: Started, Task: name, Message: what})
	err := run(func(e Event) {
		if e.Task == "" {
			e.Task = name
		}
		r(e)
	})
	end := time.Now()
	if err != nil {
		r(Event{Time: end, Kind: Failed, Task: name, Duration: end.Sub(start), Err: err.Error()})
		return err
	}
	r(Event{Time: end, Kind: Done, Task: name, Duration: end.Sub(start)})
	return nil
}

// Timings collects how long each task took, from its Done or Failed event, for a Summary.
type Timings struct {
	mu   sync.Mutex
	list []Timing
}

// Report returns a Reporter that records each task's time and passes every event on to next.
func (t *Timings) Report(next Reporter) Reporter {
	return func(e Event) {
		if e.Kind == Done || e.Kind == Failed {
			t.mu.Lock()
			t.list = append(t.list, Timing{Task: e.Task, Duration: e.Duration})
			t.mu.Unlock()
		}
		next(e)
	}
}

// List returns the timings in the order the tasks ended.
func (t *Timings) List() []Timing {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Timing(nil), t.list...)
}
