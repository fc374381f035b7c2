package state

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/progress"
)

func TestLockIsHeldForTheWholeRun(t *testing.T) {
	d := At(filepath.Join(t.TempDir(), "c"))
	unlock, err := d.Lock()
	if err != nil {
		t.Fatal(err)
	}
	var le *LockedError
	if _, err := d.Lock(); !errors.As(err, &le) || !strings.Contains(err.Error(), "another kforge run") {
		t.Fatalf("second Lock: %v", err)
	}
	unlock()
	again, err := d.Lock()
	if err != nil {
		t.Fatalf("after unlock: %v", err)
	}
	again()
}

func TestHostsRecordRoundTrips(t *testing.T) {
	d := At(t.TempDir())
	if rec, err := d.ReadHosts(); err != nil || len(rec.Hosts) != 0 {
		t.Fatalf("no record: %+v %v", rec, err)
	}
	n := inventory.Node{Host: inventory.Host{Name: "w1", Address: "10.0.0.2"}, Role: inventory.RoleWorker, SSH: inventory.SSH{User: "ops", Port: 2222}}
	if err := d.WriteHosts(HostsRecord{Cluster: "c", Hosts: []RecordedHost{Record(n)}}); err != nil {
		t.Fatal(err)
	}
	rec, err := d.ReadHosts()
	if err != nil || len(rec.Hosts) != 1 {
		t.Fatalf("%+v %v", rec, err)
	}
	if got := rec.Hosts[0].Node(); got.Name != "w1" || got.SSH.User != "ops" || got.SSH.Port != 2222 || got.Role != inventory.RoleWorker {
		t.Errorf("read back %+v", got)
	}
	if fi, _ := os.Stat(d.HostsRecord()); fi.Mode().Perm() != 0o600 {
		t.Errorf("record mode %v", fi.Mode())
	}
	os.WriteFile(d.HostsRecord(), []byte(":\n\t- no"), 0o600)
	if _, err := d.ReadHosts(); err == nil || !strings.Contains(err.Error(), d.HostsRecord()) {
		t.Errorf("a broken record: %v", err)
	}
}

// TestRunRecordKeepsEveryEventRedacted: the record of a run has each event its steps reported
// and its outcome, and no token.
func TestRunRecordKeepsEveryEventRedacted(t *testing.T) {
	d := At(t.TempDir())
	start := time.Date(2026, 11, 23, 21, 0, 0, 0, time.UTC)
	run := NewRun("apply", start)
	var printed int
	r := run.Report(func(progress.Event) { printed++ })
	r(progress.Event{Kind: progress.HostDone, Host: "w1", Message: "3 files written; kubelet restarted"})
	r(progress.Event{Kind: progress.Info, Message: "token abcdef.0123456789abcdef"})
	if err := d.Save(run, start.Add(time.Minute), errors.New("join-workers: w1: boom")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(d.Runs(), "20261123-210000.000-apply.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got Run
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if printed != 2 || len(got.Events) != 2 || got.Events[0].Message != "3 files written; kubelet restarted" || got.Outcome != "join-workers: w1: boom" {
		t.Errorf("record %v %q %q (printed %d)", len(got.Events), got.Events, got.Outcome, printed)
	}
	if strings.Contains(string(b), "0123456789abcdef") {
		t.Error("a token reached the run record")
	}
}
