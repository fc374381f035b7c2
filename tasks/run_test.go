package tasks

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kforge/kforge/progress"
)

// fakeClock advances one second per reading, so durations are exact.
func fakeClock() func() time.Time {
	t := time.Unix(0, 0)
	var mu sync.Mutex
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t = t.Add(time.Second)
		return t
	}
}

func TestRunReportsEachStepAndStopsAtTheFirstFailure(t *testing.T) {
	var events []progress.Event
	report := func(e progress.Event) { events = append(events, e) }
	var ran []string
	step := func(name string, err error) Step {
		return Step{Task: Task{Name: name}, Run: func(ctx context.Context, r progress.Reporter) error {
			ran = append(ran, name)
			r(progress.Event{Kind: progress.HostDone, Host: "h1"})
			return err
		}}
	}
	boom := errors.New("boom")
	timings, err := Run(context.Background(), []Step{step("a", nil), step("b", boom), step("c", nil)}, report, fakeClock())

	var te *TaskError
	if !errors.As(err, &te) || te.Task != "b" || !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if !slices.Equal(ran, []string{"a", "b"}) {
		t.Errorf("ran %v; c must not run after b failed", ran)
	}
	var kinds []string
	for _, e := range events {
		kinds = append(kinds, string(e.Kind)+":"+e.Task)
	}
	want := []string{"task-started:a", "host-done:a", "task-done:a", "task-started:b", "host-done:b", "task-failed:b"}
	if !slices.Equal(kinds, want) {
		t.Errorf("events %v\nwant   %v", kinds, want)
	}
	if len(timings) != 2 || timings[0].Duration != 2*time.Second {
		t.Errorf("timings %v", timings)
	}
	if events[5].Err != "boom" || events[2].Duration != 2*time.Second {
		t.Errorf("failed event %+v, done event %+v", events[5], events[2])
	}
}

func TestRunStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	steps := []Step{
		{Task: Task{Name: "a"}, Run: func(context.Context, progress.Reporter) error { cancel(); return nil }},
		{Task: Task{Name: "b"}, Run: func(context.Context, progress.Reporter) error { t.Error("b ran after cancel"); return nil }},
	}
	_, err := Run(ctx, steps, progress.Discard, fakeClock())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}
