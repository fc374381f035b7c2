package tasks

import (
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/state"
)

const hostSnapshotsOutput = `now 1795840000
state active
timer 1795830000
result success
record etcd-20261128-020000.000
{  "time": "2026-11-28T02:00:00Z",  "member": "m1",  "etcd": "3.6.8",  "kubernetes": "v1.36.3",  "revision": 40,  "totalKeys": 300,  "size": 2101280,  "sha256": "aa"}
record etcd-20261128-030000.000
{  "time": "2026-11-28T03:00:00Z",  "member": "m1",  "etcd": "3.6.8",  "kubernetes": "v1.36.3",  "revision": 90,  "totalKeys": 310,  "size": 2101280,  "sha256": "bb"}
`

func TestParseHostSnapshots(t *testing.T) {
	s, err := parseHostSnapshots([]byte(hostSnapshotsOutput))
	if err != nil {
		t.Fatal(err)
	}
	if !s.TimerActive || s.LastResult != "success" || s.Now.Unix() != 1795840000 || s.TimerStart.Unix() != 1795830000 || len(s.Records) != 2 {
		t.Fatalf("parsed %+v", s)
	}
	if r := s.Records[1]; r.Revision != 90 || r.File != hostpath.EtcdSnapshotDir+"/etcd-20261128-030000.000.db" || !r.Time.Equal(time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)) {
		t.Errorf("newest record %+v", r)
	}
	for _, bad := range []string{"", "now x\n", "now 1\nrecord etcd-1\n", "now 1\nrecord etcd-1\n{not json\n", "now 1\nwhat\n"} {
		if _, err := parseHostSnapshots([]byte(bad)); err == nil {
			t.Errorf("parsed %q without an error", bad)
		}
	}
}

// health follows the schedule by the master's clock: the newest snapshot may be every plus its
// grace old; none at all is late only once the timer's first run is that overdue. A stopped
// timer and a failed last run are trouble, not lateness, while the newest is recent, and the
// cause of lateness when it is not.
func TestScheduledSnapshotsHealth(t *testing.T) {
	now := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	with := func(age time.Duration, edit func(*hostSnapshots)) hostSnapshots {
		s := hostSnapshots{Now: now, TimerActive: true, LastResult: "success", TimerStart: now.Add(-48 * time.Hour)}
		if age >= 0 {
			s.Records = append(s.Records, stateSnapshotAt(now.Add(-age)))
		}
		if edit != nil {
			edit(&s)
		}
		return s
	}
	stopped := func(s *hostSnapshots) { s.TimerActive = false }
	failed := func(s *hostSnapshots) { s.LastResult = "exit-code" }
	for _, c := range []struct {
		name          string
		s             hostSnapshots
		every         time.Duration
		late, trouble string // "" or a part of each
	}{
		{"fresh", with(30*time.Minute, nil), 12 * time.Hour, "", ""},
		{"within the grace", with(12*time.Hour+14*time.Minute, nil), 12 * time.Hour, "", ""},
		{"beyond the grace", with(12*time.Hour+16*time.Minute, nil), 12 * time.Hour, "newest snapshot is 12h16m old; every 12h allows 12h15m: journalctl -u " + hostpath.EtcdSnapshotUnit, ""},
		{"a minute's schedule", with(2*time.Minute+time.Second, nil), time.Minute, "every 1m allows 2m", ""},
		{"none, timer just started", with(-1, func(s *hostSnapshots) { s.TimerStart, s.LastResult = now.Add(-90*time.Second), "" }), time.Hour, "", ""},
		{"none, long after", with(-1, nil), time.Hour, "no snapshot yet, 2d after its timer started", ""},
		{"timer stopped, still recent", with(time.Minute, stopped), time.Hour, "", "timer is not running"},
		{"last run failed, still recent", with(time.Minute, failed), time.Hour, "", "failed (exit-code): journalctl -u " + hostpath.EtcdSnapshotUnit},
		{"timer stopped, now late", with(3*time.Minute, stopped), time.Minute, "newest snapshot is 3m old; every 1m allows 2m: its snapshot timer is not running", ""},
	} {
		late, trouble := c.s.health(c.every)
		for _, g := range []struct{ what, got, want string }{{"late", late, c.late}, {"trouble", trouble, c.trouble}} {
			if g.want == "" && g.got != "" || g.want != "" && !strings.Contains(g.got, g.want) {
				t.Errorf("%s: %s = %q; want %q", c.name, g.what, g.got, g.want)
			}
		}
	}
}

func TestNewestHostSnapshot(t *testing.T) {
	now := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	a, b := stateSnapshotAt(now.Add(-time.Hour)), stateSnapshotAt(now.Add(-time.Minute))
	b.File = hostpath.EtcdSnapshotDir + "/etcd-b.db"
	all := []hostSnapshots{{Master: "m1", Records: []state.Snapshot{a}}, {Master: "m2", Records: []state.Snapshot{b}}}
	if rec, on, ok := newestHostSnapshot(all, ""); !ok || on != "m2" || !rec.Time.Equal(b.Time) {
		t.Errorf("newest: %+v on %s (%v); want m2's", rec, on, ok)
	}
	if rec, on, ok := newestHostSnapshot(all, "etcd-a"); !ok || on != "m1" || !rec.Time.Equal(a.Time) {
		t.Errorf("by name: %+v on %s (%v); want m1's etcd-a", rec, on, ok)
	}
	if _, _, ok := newestHostSnapshot(all, "etcd-c"); ok {
		t.Error("found a snapshot no master has")
	}
}

func stateSnapshotAt(t time.Time) state.Snapshot {
	return state.Snapshot{Time: t, File: hostpath.EtcdSnapshotDir + "/etcd-a.db", Revision: 1}
}
