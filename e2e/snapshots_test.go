package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/kforge/kforge/etcd/snapshotfile"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/state"
	"github.com/kforge/kforge/tasks"
)

// scheduledEvery and scheduledKeep are the e2e cluster's etcdSnapshots: a minute, so that the
// schedule really runs within the test.
const (
	scheduledEvery = time.Minute
	scheduledKeep  = 2
)

// hostRecords are the records of the scheduled snapshots on a master, oldest first, each File
// its name.
func (c *cluster) hostRecords(ctx context.Context, master string) []state.Snapshot {
	c.t.Helper()
	out := c.exec(ctx, master, "cd "+hostpath.EtcdSnapshotDir+" 2>/dev/null && for f in etcd-*.json; do [ -f \"$f\" ] && echo \"${f%.json}\" && tr -d '\\n' <\"$f\" && echo; done; true")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var recs []state.Snapshot
	for i := 0; i+1 < len(lines); i += 2 {
		var r state.Snapshot
		if err := json.Unmarshal([]byte(lines[i+1]), &r); err != nil {
			c.t.Fatalf("%s: record %s: %v", master, lines[i], err)
		}
		r.File = lines[i]
		recs = append(recs, r)
	}
	return recs
}

// waitScheduledSnapshotAfter waits for a scheduled snapshot on master taken after t (the next
// run: within every and its grace) and returns its record.
func (c *cluster) waitScheduledSnapshotAfter(ctx context.Context, master string, t time.Time) state.Snapshot {
	c.t.Helper()
	deadline := time.Now().Add(scheduledEvery + time.Minute)
	for {
		if recs := c.hostRecords(ctx, master); len(recs) > 0 && recs[len(recs)-1].Time.After(t) {
			return recs[len(recs)-1]
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: no scheduled snapshot taken after %s within %s (every %s)", master, t.Format(time.TimeOnly), scheduledEvery+time.Minute, scheduledEvery)
		}
		time.Sleep(2 * time.Second)
	}
}

// etcdStatus runs kforge --output json etcd status: its report and exit code.
func (c *cluster) etcdStatus() (tasks.EtcdReport, int, string) {
	c.t.Helper()
	out, err := c.runJSON("etcd", "status")
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("kforge etcd status: %v\n%s", err, out)
	}
	var rep tasks.EtcdReport
	if err := json.Unmarshal([]byte(lastLine(out)), &rep); err != nil {
		c.t.Fatalf("etcd status JSON: %v\n%s", err, out)
	}
	return rep, code, out
}

// checkScheduledSnapshots: the master's timer has run every minute since the first apply and
// kept the newest two, each verifying; etcd status shows their age and exits 0; etcd snapshot
// --fetch copies the newest into the state dir, its sha256 the record's. Then the timer is
// stopped, and the time the newest snapshot was taken returned: checkLateSnapshots, later, sees
// what status says of it, while the time passes (other steps, that run no apply, in between).
func (c *cluster) checkScheduledSnapshots(ctx context.Context, master string) time.Time {
	t := c.t
	t.Helper()
	c.waitScheduledSnapshotAfter(ctx, master, time.Now().Add(-scheduledEvery)) // the first comes a minute after apply
	recs := c.hostRecords(ctx, master)
	files := strings.Fields(c.exec(ctx, master, "ls -A "+hostpath.EtcdSnapshotDir))
	if len(recs) != scheduledKeep && len(recs) != 1 || len(files) != 2*len(recs) {
		t.Errorf("%s keeps %d records and these files %v; want %d snapshots with their records (etcdSnapshots.keep) and nothing else", master, len(recs), files, scheduledKeep)
	}
	if len(recs) == scheduledKeep {
		if gap := recs[1].Time.Sub(recs[0].Time); gap < scheduledEvery-5*time.Second || gap > scheduledEvery+30*time.Second {
			t.Errorf("%s: snapshots %s and %s are %s apart; want about %s", master, recs[0].File, recs[1].File, gap, scheduledEvery)
		}
	}
	newest := recs[len(recs)-1]
	mode := strings.TrimSpace(c.exec(ctx, master, "stat -c '%a %U' "+path.Join(hostpath.EtcdSnapshotDir, newest.File+".db")))
	if mode != "600 root" || newest.Member != master || newest.Kubernetes != c.version || newest.TotalKeys < 100 {
		t.Errorf("%s: newest scheduled snapshot %+v, file %s; want 600 root, this master, Kubernetes %s, a cluster's worth of keys", master, newest, mode, c.version)
	}

	rep, code, out := c.etcdStatus()
	m := rep.Members[0].Snapshots
	if code != 0 || rep.SnapshotsEvery != "1m" || m == nil || m.Count != len(recs) || m.Late != "" || m.AgeSeconds > (2*scheduledEvery).Seconds() {
		t.Errorf("etcd status with fresh scheduled snapshots: exit %d, %+v; want 0, every 1m, %d kept, not late\n%s", code, m, len(recs), out)
	}

	before, err := state.At(c.state).ListSnapshots()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err = c.run("etcd", "snapshot", "--fetch", "--keep", "5")
	if err != nil {
		t.Fatalf("kforge etcd snapshot --fetch: %v\n%s", err, out)
	}
	t.Logf("kforge etcd snapshot --fetch took %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	after, err := state.At(c.state).ListSnapshots()
	if err != nil || len(after) != len(before)+1 {
		t.Fatalf("snapshots in the state dir after --fetch: %+v, %v; want one more than %d", after, err, len(before))
	}
	got := after[len(after)-1]
	info, err := snapshotfile.Verify(got.File)
	onMaster := c.hostRecords(ctx, master)
	i := slices.IndexFunc(onMaster, func(r state.Snapshot) bool { return r.SHA256 == got.SHA256 })
	if err != nil || got.SHA256 != info.SHA256 || i < 0 || path.Base(got.File) != onMaster[i].File+".db" {
		t.Errorf("fetched %+v (verify: %v); want a master's scheduled snapshot, the same sha256 and name", got, err)
	}

	// The timer stopped: trouble at once; late only later (checkLateSnapshots).
	c.exec(ctx, master, "systemctl stop "+hostpath.EtcdSnapshotTimer)
	last := c.hostRecords(ctx, master)
	newestAt := last[len(last)-1].Time
	rep, code, out = c.etcdStatus()
	if m := rep.Members[0].Snapshots; time.Since(newestAt) < 2*scheduledEvery && (code != 0 || m == nil || !strings.Contains(m.Trouble, "timer is not running")) {
		t.Errorf("etcd status %s after the newest snapshot, the timer just stopped: exit %d, %+v; want 0 (not late yet), and the stopped timer named\n%s", time.Since(newestAt).Round(time.Second), code, m, out)
	}
	return newestAt
}

// checkLateSnapshots: with the master's snapshot timer stopped (checkScheduledSnapshots) and no
// apply since, status names the stopped timer and still exits 0 while the newest snapshot (taken
// at newestAt) is recent, and exits 1 once it is older than the schedule allows (a minute and a
// minute's grace): the time really passes. The timer is started again at the end.
func (c *cluster) checkLateSnapshots(ctx context.Context, master string, newestAt time.Time) {
	t := c.t
	t.Helper()
	allowed := 2 * scheduledEvery // every and its grace (min(every, 15m))
	for {
		rep, code, out := c.etcdStatus()
		age := time.Since(newestAt)
		m := rep.Members[0].Snapshots
		if m == nil {
			t.Fatalf("etcd status shows no scheduled snapshots:\n%s", out)
		}
		if code == 0 {
			if age > allowed+15*time.Second || !strings.Contains(m.Trouble, "timer is not running") {
				t.Fatalf("etcd status %s after the newest snapshot, the timer stopped: exit 0, %+v; want it late beyond %s, and the stopped timer named", age.Round(time.Second), m, allowed)
			}
			time.Sleep(10 * time.Second)
			continue
		}
		if code != 1 || age < allowed || !strings.Contains(m.Late, "every 1m allows 2m: its snapshot timer is not running") || !slices.Equal(rep.LateSnapshots, []string{master}) {
			t.Errorf("etcd status %s after the newest snapshot: exit %d, %+v; want 1 past %s, late, the stopped timer the cause\n%s", age.Round(time.Second), code, m, allowed, out)
		}
		t.Logf("etcd status exits %d %s after the newest scheduled snapshot (every 1m allows 2m): %s", code, age.Round(time.Second), m.Late)
		break
	}
	c.exec(ctx, master, "systemctl start "+hostpath.EtcdSnapshotTimer)
}
