package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kforge/kforge/tasks"
)

// EtcdCmd groups the commands on the cluster's etcd.
type EtcdCmd struct {
	Snapshot EtcdSnapshotCmd `cmd:"" help:"Stream a snapshot of etcd from a healthy member into the state dir, verify it and record it (or, with --fetch, copy the newest scheduled snapshot the masters took); keeps the newest --keep."`
	Status   EtcdStatusCmd   `cmd:"" help:"Each master's etcd member (health, leader, version, database size, revision, raft index), members outside the inventory, alarms and quorum. Exits 1 unless all is healthy."`
}

// EtcdSnapshotCmd is kforge etcd snapshot.
type EtcdSnapshotCmd struct {
	Out               string `short:"o" placeholder:"FILE" help:"Also write the verified snapshot to FILE (it is kept in the state dir's snapshots/ either way)."`
	Keep              int    `default:"5" help:"How many snapshots the state dir keeps (the newest)."`
	Fetch             bool   `help:"Take no snapshot: copy the newest scheduled snapshot of all masters' (etcdSnapshots) into the state dir, checked against its record's sha256 and verified."`
	Name              string `placeholder:"NAME" help:"With --fetch: the scheduled snapshot named NAME (etcd-YYYYMMDD-HHMMSS.mmm, as etcd status and the masters' snapshot directory show it) rather than the newest."`
	AcceptNewHostKeys bool   `help:"Trust hosts whose SSH key is not yet in known_hosts, and record their keys (trust on first use)."`
}

func (c *EtcdSnapshotCmd) Run(ctx context.Context, s *streams, g *Globals, log *slog.Logger, dl *debugLog) (err error) {
	if c.Keep < 1 {
		return usageError{fmt.Errorf("--keep %d: keep at least 1 snapshot", c.Keep)}
	}
	if c.Name != "" && !c.Fetch {
		return usageError{fmt.Errorf("--name %s: names a scheduled snapshot to fetch; give --fetch too", c.Name)}
	}
	run, err := startClusterRun(ctx, "etcd-snapshot", s, g, log, dl)
	if err != nil {
		return err
	}
	defer run.close(ctx, &err)
	o := run.options(g, log)
	o.AcceptNewHostKeys = c.AcceptNewHostKeys
	x := tasks.NewEtcdSnapshot(run.inv, o, tasks.SnapshotOptions{Keep: c.Keep, Out: c.Out, Fetch: c.Fetch, Name: c.Name})
	defer x.Close()
	timings, err := run.run(ctx, x.Steps())
	if err != nil {
		return err
	}
	snap := x.Saved
	if g.Output == "json" {
		// snapshot changes the state dir: its events are its output on stdout, as apply's are,
		// and the snapshot's record is the last of them.
		return json.NewEncoder(s.Out).Encode(map[string]any{"event": "etcd-snapshot", "snapshot": snap})
	}
	where := snap.File
	if c.Out != "" {
		where += " and " + c.Out
	}
	how := "etcd snapshot"
	if c.Fetch {
		how = "scheduled etcd snapshot taken " + snap.Time.Local().Format(time.DateTime) + ","
	}
	run.printer.Summary(fmt.Sprintf("%s of cluster %s from %s (etcd %s): revision %d, %d keys, %s, sha256 %s\nsaved as %s",
		how, run.inv.Name, snap.Member, snap.Etcd, snap.Revision, snap.TotalKeys, bytesString(snap.Size), snap.SHA256, where), time.Since(run.start), timings)
	return nil
}

// EtcdStatusCmd is kforge etcd status.
type EtcdStatusCmd struct {
	AcceptNewHostKeys bool `help:"Trust hosts whose SSH key is not yet in known_hosts, and record their keys (trust on first use)."`
}

func (c *EtcdStatusCmd) Run(ctx context.Context, s *streams, g *Globals, log *slog.Logger, dl *debugLog) (err error) {
	run, err := startClusterRun(ctx, "etcd-status", s.queryProgress(), g, log, dl)
	if err != nil {
		return err
	}
	defer run.close(ctx, &err)
	o := run.options(g, log)
	o.AcceptNewHostKeys = c.AcceptNewHostKeys
	x := tasks.NewEtcdStatus(run.inv, o)
	defer x.Close()
	if _, err := run.run(ctx, x.Steps()); err != nil {
		return err
	}
	rep := x.Report
	if g.Output == "json" {
		if err := writeDocument(s, rep); err != nil {
			return err
		}
	} else {
		writeEtcdReport(s.Out, rep)
	}
	if !rep.AllHealthy() {
		return etcdUnhealthy{rep}
	}
	return nil
}

// writeEtcdReport prints the report as a table and a few lines.
func writeEtcdReport(w io.Writer, rep tasks.EtcdReport) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MASTER\tMEMBER ID\tHEALTH\tLEADER\tVERSION\tDB SIZE\tIN USE\tREVISION\tRAFT INDEX\tRAFT TERM")
	for _, m := range rep.Members {
		health := "healthy"
		if !m.Healthy {
			health = "UNHEALTHY"
		}
		leader := ""
		if m.Leader {
			leader = "*"
		}
		if m.ID == "" {
			fmt.Fprintf(tw, "%s\t-\t%s\t\t\t\t\t\t\t\n", m.Master, health)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", m.Master, m.ID, health, leader, m.Version,
			bytesString(m.DBSize), bytesString(m.DBInUse), m.Revision, m.RaftIndex, m.RaftTerm)
	}
	tw.Flush()
	for _, m := range rep.Members {
		if m.Problem != "" {
			fmt.Fprintf(w, "%s: %s\n", m.Master, m.Problem)
		}
	}
	quorum := "quorum"
	if !rep.Quorum {
		quorum = "NO QUORUM"
	}
	fmt.Fprintf(w, "%d of %d voting members healthy: %s", rep.Healthy, rep.Voters, quorum)
	if rep.Leader != "" {
		fmt.Fprintf(w, "; leader %s", rep.Leader)
	}
	fmt.Fprintln(w)
	if len(rep.Others) > 0 {
		fmt.Fprintf(w, "members that are no master of the inventory: %s\n", strings.Join(rep.Others, "; "))
	}
	if len(rep.Alarms) > 0 {
		fmt.Fprintf(w, "alarms: %s\n", strings.Join(rep.Alarms, "; "))
	}
	if rep.SnapshotsEvery != "" {
		fmt.Fprintf(w, "scheduled snapshots, every %s:\n", rep.SnapshotsEvery)
		for _, m := range rep.Members {
			switch s := m.Snapshots; {
			case s == nil:
				fmt.Fprintf(w, "  %s: not read\n", m.Master)
			case s.Count == 0:
				fmt.Fprintf(w, "  %s: none yet\n", m.Master)
			default:
				fmt.Fprintf(w, "  %s: %d kept, the newest %s, %s old (revision %d)\n", m.Master, s.Count, s.Newest, time.Duration(s.AgeSeconds)*time.Second, s.Revision)
			}
			if s := m.Snapshots; s != nil && s.Late != "" {
				fmt.Fprintf(w, "  %s: LATE: %s\n", m.Master, s.Late)
			} else if s != nil && s.Trouble != "" {
				fmt.Fprintf(w, "  %s: %s\n", m.Master, s.Trouble)
			}
		}
	}
}

// etcdUnhealthy makes etcd status exit 1 after printing its report.
type etcdUnhealthy struct{ rep tasks.EtcdReport }

func (e etcdUnhealthy) Error() string {
	if e.rep.MembersHealthy() {
		return "etcd is healthy, but its backups are not: " + e.rep.Advice
	}
	return "etcd is not healthy: " + e.rep.Advice
}

// bytesString is n in the largest binary unit that keeps it above 1.
func bytesString(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
