package tasks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kforge/kforge/etcd/snapshotfile"
	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/scripts"
	"github.com/kforge/kforge/state"
)

// Scheduled etcd snapshots (etcdSnapshots): every master runs kforge-etcd-snapshot (built into
// the bundle from bundle/internal/etcdsnap) from a systemd timer; it snapshots the master's own
// member into hostpath.EtcdSnapshotDir, verified, and keeps the newest. The step
// etcd-snapshots starts the timer once the program has shipped; retire removes it when the
// inventory turns the snapshots off (the snapshots stay); `etcd snapshot --fetch` copies the
// newest to the workstation and `etcd status` says how old each master's last one is.

// startSnapshots enables and starts the timer on every master, restarting it (after systemd
// reloads) when its unit or timer was written.
func startSnapshots(ctx context.Context, t *hop, st *staging, r progress.Reporter) error {
	if err := st.waitShipments(ctx); err != nil { // the program ships after the control plane
		return err
	}
	return t.rc.fleet.Each(ctx, t.inv.EtcdRole(), func(ctx context.Context, n inventory.Node, h remote.Host) error {
		restart := snapshotTimerRestarts(func(pred func(string) bool) bool { return t.files.wrote(n.Name, pred) })
		if _, err := remote.Output(ctx, h, startUnitScript(hostpath.EtcdSnapshotTimer, restart)); err != nil {
			return err
		}
		what := "timer running"
		if restart {
			what = "timer (re)started"
		}
		r(progress.Event{Kind: progress.HostDone, Host: n.Name, Message: fmt.Sprintf("%s: the first snapshot a minute after it started, then every %s", what, t.inv.EtcdSnapshots.Every)})
		return nil
	})
}

// snapshotTimerRestarts says whether the scheduled snapshots' timer restarts on a master: when
// its timer or unit was written. (The program reads its configuration at each run.)
func snapshotTimerRestarts(wrote func(pred func(string) bool) bool) bool {
	return wrote(func(p string) bool { return p == hostpath.EtcdSnapshotTimerPath || p == hostpath.EtcdSnapshotUnitPath })
}

// hostSnapshots is what a master says of its scheduled snapshots (scripts/etcd-snapshots.sh).
type hostSnapshots struct {
	Master      string
	Now         time.Time // the master's clock: ages are measured by it
	TimerActive bool
	TimerStart  time.Time // when the timer last started; zero when never
	LastResult  string    // the snapshot unit's last run: "success", "exit-code", …; "" before the first
	// Records are the snapshots in hostpath.EtcdSnapshotDir, oldest first, each File the path
	// on the master.
	Records []state.Snapshot
}

var hostSnapshotsScript = scripts.Command("etcd-snapshots", "dir", hostpath.EtcdSnapshotDir,
	"timer", hostpath.EtcdSnapshotTimer, "unit", hostpath.EtcdSnapshotUnit)

// readHostSnapshots runs the script on master n.
func readHostSnapshots(ctx context.Context, n string, h remote.Host) (hostSnapshots, error) {
	out, err := remote.Output(ctx, h, hostSnapshotsScript)
	if err != nil {
		return hostSnapshots{}, err
	}
	s, err := parseHostSnapshots(out)
	s.Master = n
	return s, err
}

// parseHostSnapshots reads the script's output.
func parseHostSnapshots(out []byte) (hostSnapshots, error) {
	var s hostSnapshots
	unix := func(v string) (time.Time, error) {
		if v == "" {
			return time.Time{}, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		return time.Unix(n, 0), err
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		key, v, _ := strings.Cut(lines[i], " ")
		var err error
		switch key {
		case "now":
			s.Now, err = unix(v)
		case "state":
			s.TimerActive = v == "active"
		case "timer":
			s.TimerStart, err = unix(v)
		case "result":
			s.LastResult = v
		case "record":
			if i+1 == len(lines) {
				return s, fmt.Errorf("snapshot record %s: no JSON after it", v)
			}
			i++
			var rec state.Snapshot
			if err := json.Unmarshal([]byte(lines[i]), &rec); err != nil {
				return s, fmt.Errorf("snapshot record %s: %w", v, err)
			}
			rec.File = path.Join(hostpath.EtcdSnapshotDir, v+".db")
			s.Records = append(s.Records, rec)
		default:
			return s, fmt.Errorf("unexpected line %q", lines[i])
		}
		if err != nil {
			return s, fmt.Errorf("%q: %w", lines[i], err)
		}
	}
	if s.Now.IsZero() {
		return s, errors.New("no clock reading in the output")
	}
	return s, nil
}

// snapshotGrace is how late a scheduled snapshot may be before etcd status calls it late: the
// run itself and the timer's accuracy, at most a quarter of an hour.
func snapshotGrace(every time.Duration) time.Duration { return min(every, 15*time.Minute) }

// health says how a master's scheduled snapshots keep to their schedule, by the master's
// clock. late says why they are behind it: the newest is older than every and its grace, or
// none came that long after the timer started (with the cause, when one shows). trouble says
// what will make them late while the newest is still recent: a stopped timer, a failed last
// run.
func (s hostSnapshots) health(every time.Duration) (late, trouble string) {
	switch {
	case !s.TimerActive:
		trouble = "its snapshot timer is not running (kforge apply starts it; systemctl status " + hostpath.EtcdSnapshotTimer + " says why it stopped)"
	case s.LastResult != "" && s.LastResult != "success":
		trouble = "its last scheduled snapshot failed (" + s.LastResult + "): journalctl -u " + hostpath.EtcdSnapshotUnit + " says why"
	}
	cause := trouble
	if cause == "" {
		cause = "journalctl -u " + hostpath.EtcdSnapshotUnit + " says what each run did"
	}
	allowed := every + snapshotGrace(every)
	if n := len(s.Records); n > 0 {
		if age := s.Now.Sub(s.Records[n-1].Time); age > allowed {
			return fmt.Sprintf("its newest snapshot is %s old; every %s allows %s: %s", inventory.Duration(age.Round(time.Second)), inventory.Duration(every), inventory.Duration(allowed), cause), ""
		}
		return "", trouble
	}
	first := time.Minute + snapshotGrace(every) // the timer's first run comes a minute after it starts
	if !s.TimerStart.IsZero() && s.Now.Sub(s.TimerStart) > first {
		return fmt.Sprintf("no snapshot yet, %s after its timer started: %s", inventory.Duration(s.Now.Sub(s.TimerStart).Round(time.Second)), cause), ""
	}
	return "", trouble
}

// newest is the newest record of all masters' scheduled snapshots, or name's when name is set.
func newestHostSnapshot(all []hostSnapshots, name string) (state.Snapshot, string, bool) {
	var best state.Snapshot
	var on string
	for _, s := range all {
		for _, r := range s.Records {
			base := strings.TrimSuffix(path.Base(r.File), ".db")
			if name != "" && base != name {
				continue
			}
			if on == "" || r.Time.After(best.Time) {
				best, on = r, s.Master
			}
		}
	}
	return best, on, on != ""
}

// readAllHostSnapshots reads the scheduled snapshots on the hosts of role (etcd's members') that
// answered: one that cannot be asked is reported, not fatal.
func readAllHostSnapshots(ctx context.Context, f *fleet.Fleet, role inventory.Role, r progress.Reporter) []hostSnapshots {
	var mu sync.Mutex
	var all []hostSnapshots
	_ = f.Each(ctx, role, func(ctx context.Context, n inventory.Node, h remote.Host) error {
		if h == nil { // unreachable: reach said so
			return nil
		}
		s, err := readHostSnapshots(ctx, n.Name, h)
		if err != nil {
			r(progress.Event{Kind: progress.HostDone, Host: n.Name, Message: "its scheduled snapshots could not be read: " + oneLine(err.Error())})
			return nil
		}
		mu.Lock()
		all = append(all, s)
		mu.Unlock()
		return nil
	})
	slices.SortFunc(all, func(a, b hostSnapshots) int { return indexOf(f, a.Master) - indexOf(f, b.Master) })
	return all
}

func (x *EtcdSnapshot) find(ctx context.Context, r progress.Reporter) error {
	all := readAllHostSnapshots(ctx, x.fleet, x.role, r)
	for _, s := range all {
		msg := "no scheduled snapshot"
		if n := len(s.Records); n > 0 {
			newest := s.Records[n-1]
			msg = fmt.Sprintf("%d scheduled snapshots, the newest %s old (revision %d)", n, progress.Round(s.Now.Sub(newest.Time)), newest.Revision)
		}
		r(progress.Event{Kind: progress.HostDone, Host: s.Master, Message: msg})
	}
	rec, on, ok := newestHostSnapshot(all, x.so.Name)
	if !ok {
		what := "no master that answered has a scheduled snapshot"
		if x.so.Name != "" {
			what = "no master that answered has the scheduled snapshot " + x.so.Name
		}
		return &NoScheduledSnapshotError{What: what, Every: x.inv.EtcdSnapshots.Every, On: x.inv.ScheduledSnapshots()}
	}
	x.member, x.fetchFrom = on, rec
	return nil
}

// NoScheduledSnapshotError is an etcd snapshot --fetch that found nothing to fetch.
type NoScheduledSnapshotError struct {
	What  string
	Every inventory.Duration
	On    bool // the inventory takes scheduled snapshots
}

func (e *NoScheduledSnapshotError) Error() string { return "etcd snapshot --fetch: " + e.What }

// Details are the message and the way out, for kforge's error printer.
func (e *NoScheduledSnapshotError) Details() []string {
	hint := fmt.Sprintf("the masters take one a minute after their timer starts, then every %s (kforge etcd status says how old each master's newest is); kforge etcd snapshot without --fetch takes one now", e.Every)
	if !e.On {
		hint = "the inventory takes no scheduled snapshots (etcdSnapshots.enabled, and a bundle); kforge etcd snapshot without --fetch takes one now"
	}
	return []string{e.Error(), "  hint: " + hint}
}

// fetch streams the chosen snapshot from its master into the state dir, checks its sha256
// against its record while it comes, verifies it, and records it as a snapshot taken here.
func (x *EtcdSnapshot) fetch(ctx context.Context, r progress.Reporter) error {
	rec := x.fetchFrom
	name := strings.TrimSuffix(path.Base(rec.File), ".db")
	f, err := x.o.State.NewSnapshotFile(name)
	if err != nil {
		return err
	}
	defer f.Abort()
	start := x.o.Now()
	h := sha256.New()
	var written atomic.Int64
	stop := progress.Every(r, 8*time.Second, func(elapsed time.Duration) progress.Event {
		return progress.Event{Kind: progress.Info, Host: x.member, Message: fmt.Sprintf("%s of %s received in %s", mib(written.Load()), mib(rec.Size), progress.Round(elapsed))}
	})
	err = x.fleet.Host(x.member).Run(ctx, remote.Cmd{Command: "cat -- " + remote.Quote(rec.File), Stdout: &countWriter{w: io.MultiWriter(f, h), n: &written}})
	stop()
	if err != nil {
		return remote.WithHost(x.member, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != rec.SHA256 || written.Load() != rec.Size {
		return &snapshotfile.Error{Path: x.member + ":" + rec.File, Seen: fmt.Sprintf("%d bytes with sha256 %s came, but its record says %d bytes with sha256 %s: the file changed or was damaged after it was taken", written.Load(), got, rec.Size, rec.SHA256)}
	}
	info, err := snapshotfile.Verify(f.Name())
	if err != nil {
		return err
	}
	if err := f.Commit(); err != nil {
		return err
	}
	rec.File = filepath.Join(x.o.State.Snapshots(), name+".db")
	rec.Revision, rec.TotalKeys = info.Revision, info.TotalKeys
	x.Saved = rec
	if err := x.o.State.RecordSnapshot(rec); err != nil {
		return err
	}
	r(progress.Event{Kind: progress.HostDone, Host: x.member, Duration: x.o.Now().Sub(start),
		Message: fmt.Sprintf("%s taken %s ago fetched and verified: revision %d, %d keys, sha256 %s", mib(info.Size), progress.Round(x.o.Now().Sub(rec.Time)), info.Revision, info.TotalKeys, info.SHA256)})
	return nil
}
