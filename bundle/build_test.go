package bundle

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kforge/kforge/progress"
)

// TestStepReportsWhileItRuns: a build step is a task of its own that says, every heartbeat
// while it runs, how long it has run and what is left; a failure is reported as such.
func TestStepReportsWhileItRuns(t *testing.T) {
	var mu sync.Mutex
	var events []progress.Event
	o := BuildOptions{Heartbeat: 20 * time.Millisecond, Report: func(e progress.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }}
	d, err := o.step("kubernetes", "build kubernetes", "etcd, the images", func() (string, error) {
		time.Sleep(110 * time.Millisecond)
		return "/cache/k8s", nil
	})
	if err != nil || d != "/cache/k8s" {
		t.Fatalf("step = %q, %v", d, err)
	}
	mu.Lock()
	var kinds []string
	beats := 0
	for _, e := range events {
		if e.Task != "kubernetes" {
			t.Errorf("event of task %q", e.Task)
		}
		if e.Kind == progress.Info {
			beats++
			if !strings.HasPrefix(e.Message, "kubernetes: ") || !strings.HasSuffix(e.Message, "so far; left after it: etcd, the images") {
				t.Errorf("heartbeat %q", e.Message)
			}
			continue
		}
		kinds = append(kinds, string(e.Kind))
	}
	mu.Unlock()
	if beats < 3 || strings.Join(kinds, ",") != "task-started,task-done" {
		t.Errorf("%d heartbeats, events %v", beats, kinds)
	}

	events = nil
	boom := errors.New("go build: exit status 1")
	if _, err := o.step("etcd", "build etcd", "the images", func() (string, error) { return "", boom }); !errors.Is(err, boom) {
		t.Fatalf("err %v", err)
	}
	if last := events[len(events)-1]; last.Kind != progress.Failed || last.Err != boom.Error() {
		t.Errorf("last event %+v", last)
	}
}
