package etcd

import (
	"context"
	"fmt"
	"io"
)

// Status is what the member reached says of itself.
type Status struct {
	Version   string // etcd's version, e.g. "3.6.8"
	DBSize    int64  // size of its backend database file, in bytes
	DBInUse   int64  // bytes of the database in use (the rest is free pages a defrag returns)
	Leader    uint64 // the leader's member ID; 0 when there is none
	MemberID  uint64 // its own member ID
	RaftIndex uint64 // its raft index (it grows as the member applies entries)
	RaftTerm  uint64
	Revision  int64    // the key-value store's revision
	IsLearner bool     // a learner does not vote
	Errors    []string // what the member says is wrong with itself (e.g. no leader)
}

// Status asks the member reached for its status, once (no retries: a health check decides
// itself whether to ask again).
func (c *Client) Status(ctx context.Context) (Status, error) {
	resp, err := c.maint.Status(ctx, c.endpoint)
	if err != nil {
		return Status{}, c.fail("status", err)
	}
	s := Status{Version: resp.Version, DBSize: resp.DbSize, DBInUse: resp.DbSizeInUse, Leader: resp.Leader,
		RaftIndex: resp.RaftIndex, RaftTerm: resp.RaftTerm, IsLearner: resp.IsLearner, Errors: resp.Errors}
	if resp.Header != nil {
		s.MemberID, s.Revision = resp.Header.MemberId, resp.Header.Revision
	}
	return s, nil
}

// Alarms lists the cluster's raised alarms, as "NOSPACE on member 8e9e05c52164694d".
func (c *Client) Alarms(ctx context.Context) ([]string, error) {
	resp, err := c.maint.AlarmList(ctx)
	if err != nil {
		return nil, c.fail("alarm list", err)
	}
	var out []string
	for _, a := range resp.Alarms {
		out = append(out, fmt.Sprintf("%s on member %x", a.Alarm, a.MemberID))
	}
	return out, nil
}

// Snapshot streams the member's snapshot to w and returns the number of bytes written: its
// backend database followed by the database's sha256 (32 bytes), which `etcdutl snapshot
// restore` checks. A snapshot cut short is an error; w then holds a truncated copy.
func (c *Client) Snapshot(ctx context.Context, w io.Writer) (int64, error) {
	ctx, cancel := context.WithCancel(ctx) // ends the stream when the copy stops early
	defer cancel()
	rc, err := c.maint.Snapshot(ctx)
	if err != nil {
		return 0, c.fail("snapshot", err)
	}
	defer rc.Close()
	cw := &countingWriter{w: w}
	_, err = io.Copy(cw, rc)
	switch {
	case cw.err != nil:
		return cw.n, &Error{Host: c.host, Op: "snapshot", Seen: fmt.Sprintf("writing the snapshot failed after %d bytes", cw.n), Err: cw.err,
			Hint: "check where the snapshot is written (free space, permissions)"}
	case err != nil:
		e := newError(c.host, c.endpoint, "snapshot", err)
		e.Seen = join(fmt.Sprintf("the stream ended after %d bytes", cw.n), e.Seen)
		return cw.n, e
	}
	return cw.n, nil
}

// countingWriter counts what reaches w and keeps w's error apart from the stream's (it hides
// w's ReadFrom, so io.Copy cannot mix the two).
type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
	return n, err
}

// join joins the non-empty parts with "; ".
func join(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
