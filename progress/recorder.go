package progress

import "sync"

// Recorder keeps every event reported to it, in order; safe for concurrent use. The zero value
// is ready. Run records and tests use it.
type Recorder struct {
	mu     sync.Mutex
	events []Event
}

// Report is the Recorder's Reporter.
func (r *Recorder) Report(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// Events are the events reported so far.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Of are the events of task reported so far.
func (r *Recorder) Of(task string) []Event {
	var out []Event
	for _, e := range r.Events() {
		if e.Task == task {
			out = append(out, e)
		}
	}
	return out
}
