package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// retryEvery is how often a membership change etcd refused as "unhealthy cluster" is tried
// again, and how often WaitStarted looks.
const retryEvery = time.Second

// Member is one member of the cluster as etcd lists it.
type Member struct {
	ID         uint64
	Name       string // empty until the member has started: etcd learns the name from it
	PeerURLs   []string
	ClientURLs []string
	Learner    bool
}

// String is the member as errors show it: name (or "unstarted"), ID in hex as etcdctl prints
// it, peer URLs.
func (m Member) String() string {
	name := m.Name
	if name == "" {
		name = "unstarted"
	}
	return fmt.Sprintf("%s (%x, %s)", name, m.ID, strings.Join(m.PeerURLs, ","))
}

// find returns the first member named name or with peerURL among its peer URLs; an empty name
// or peerURL matches nothing (an unstarted member has no name).
func find(members []Member, name, peerURL string) (Member, bool) {
	for _, m := range members {
		if (name != "" && m.Name == name) || (peerURL != "" && slices.Contains(m.PeerURLs, peerURL)) {
			return m, true
		}
	}
	return Member{}, false
}

// Members lists the cluster's members as the member reached sees them (a serializable read): it
// answers even when the cluster has no leader, as after a member was added to a one-member
// cluster and before that member started, so an interrupted join can be seen and finished.
func (c *Client) Members(ctx context.Context) ([]Member, error) {
	return c.members(ctx, "list members")
}

func (c *Client) members(ctx context.Context, op string) ([]Member, error) {
	members, err := c.list(ctx)
	if err != nil {
		return nil, c.fail(op, err)
	}
	return members, nil
}

// list is Members with etcd's error as it is.
func (c *Client) list(ctx context.Context) ([]Member, error) {
	resp, err := c.cli.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		return nil, err
	}
	out := make([]Member, 0, len(resp.Members))
	for _, m := range resp.Members {
		out = append(out, Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, Learner: m.IsLearner})
	}
	return out, nil
}

// Add adds a voting member with peerURL (e.g. "https://198.51.100.12:2380"), to be started
// right after with the current members and --initial-cluster-state=existing. A member with that
// peer URL already there is success, so an interrupted run is finished by running it again.
//
// etcd refuses a new member ("unhealthy cluster") until every member has been connected for
// five seconds, as right after another member joined: that refusal is tried again every second
// until ctx ends, then reported.
func (c *Client) Add(ctx context.Context, peerURL string) error {
	op := "add member " + peerURL
	if peerURL == "" {
		return &Error{Host: c.host, Op: "add member", Seen: "no peer URL given"}
	}
	members, err := c.members(ctx, op)
	if err != nil {
		return err
	}
	if _, ok := find(members, "", peerURL); ok {
		return nil
	}
	return c.retryUnhealthy(ctx, op, func() error {
		_, err := c.cli.MemberAdd(ctx, []string{peerURL})
		if errors.Is(err, rpctypes.ErrPeerURLExist) {
			return nil // added meanwhile (by an earlier attempt whose answer was lost)
		}
		return err
	})
}

// Remove removes the member named name or with peerURL (either may be empty) and reports
// whether there was one. Like Add, it waits out etcd's "unhealthy cluster" refusal until ctx
// ends.
func (c *Client) Remove(ctx context.Context, name, peerURL string) (removed bool, err error) {
	op := "remove member " + describe(name, peerURL)
	members, err := c.members(ctx, op)
	if err != nil {
		return false, err
	}
	m, ok := find(members, name, peerURL)
	if !ok {
		return false, nil
	}
	gone := false
	err = c.retryUnhealthy(ctx, fmt.Sprintf("remove member %s", m), func() error {
		_, err := c.cli.MemberRemove(ctx, m.ID)
		if errors.Is(err, rpctypes.ErrMemberNotFound) {
			gone = true // removed meanwhile
			return nil
		}
		return err
	})
	return err == nil && !gone, err
}

// retryUnhealthy calls change until it does not fail with etcd's "unhealthy cluster", every
// retryEvery until ctx ends.
func (c *Client) retryUnhealthy(ctx context.Context, op string, change func() error) error {
	start := time.Now()
	var refused error
	for attempt := 1; ; attempt++ {
		err := change()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, rpctypes.ErrUnhealthy):
			refused = err
		case refused != nil && ctx.Err() != nil:
			// the deadline fell during an attempt: the refusal is the news
		default:
			return c.fail(op, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(retryEvery):
			continue
		}
		e := newError(c.host, c.endpoint, op, rpctypes.Error(refused))
		e.Seen += fmt.Sprintf("; still refused after %d attempts in %s", attempt, time.Since(start).Round(100*time.Millisecond))
		return e
	}
}

// describe names a member by name and peer URL, either of which may be empty.
func describe(name, peerURL string) string {
	switch {
	case name == "":
		return peerURL
	case peerURL == "":
		return name
	}
	return name + " (" + peerURL + ")"
}

// WaitStarted waits until the member with peerURL reports name, which it does once it has
// started and joined. It looks every second until ctx ends; the error then says what was last
// seen. A member with peerURL that is absent, or started under another name, is an error at
// once: waiting would not change it.
func (c *Client) WaitStarted(ctx context.Context, name, peerURL string) error {
	op := "wait for member " + describe(name, peerURL) + " to start"
	hint := fmt.Sprintf("the new member's etcd log on %s says why: %s; journalctl -u kubelet", name, logCommand)
	start := time.Now()
	var last string
	for {
		members, err := c.list(ctx)
		switch {
		case err != nil:
			if last == "" || ctx.Err() == nil {
				last = "listing the members failed: " + message(rpctypes.Error(err)) // etcd may be busy with the new member: look again
			}
		default:
			m, ok := find(members, "", peerURL)
			switch {
			case !ok:
				return &Error{Host: c.host, Op: op, Seen: fmt.Sprintf("etcd has no member with peer URL %s (members: %s)", peerURL, membersString(members)),
					Hint: "add the member first; kforge apply does that for a joining master"}
			case m.Name == name:
				return nil
			case m.Name != "":
				return &Error{Host: c.host, Op: op, Seen: fmt.Sprintf("the member with peer URL %s started under the name %q", peerURL, m.Name),
					Hint: "its --name must be " + name + "; remove the member (etcdctl member remove " + fmt.Sprintf("%x", m.ID) + ") and run again"}
			}
			last = fmt.Sprintf("member %s is listed but has not started", m)
		}
		select {
		case <-ctx.Done():
			return &Error{Host: c.host, Op: op, Err: ctx.Err(), Hint: hint,
				Seen: fmt.Sprintf("not started after %s; last seen: %s", time.Since(start).Round(100*time.Millisecond), last)}
		case <-time.After(retryEvery):
		}
	}
}

// membersString shows members for an error message.
func membersString(members []Member) string {
	s := make([]string, len(members))
	for i, m := range members {
		s[i] = m.String()
	}
	return strings.Join(s, "; ")
}

// HandOver makes the member with peerURL the leader when the member reached leads, and reports
// whether it did: a leader about to be removed hands its leadership over first, so the cluster
// does not wait an election timeout without a leader. etcd moves leadership only when asked by
// the leader, hence the member reached.
func (c *Client) HandOver(ctx context.Context, peerURL string) (bool, error) {
	op := "hand leadership over to " + peerURL
	s, err := c.Status(ctx)
	if err != nil {
		return false, err
	}
	if s.Leader == 0 || s.Leader != s.MemberID {
		return false, nil
	}
	members, err := c.members(ctx, op)
	if err != nil {
		return false, err
	}
	to, ok := find(members, "", peerURL)
	if !ok {
		return false, &Error{Host: c.host, Op: op, Seen: "etcd has no member with that peer URL (members: " + membersString(members) + ")"}
	}
	// raft gives a transfer up when the transferee has not won within an election timeout
	// (a loaded host, a transferee still catching up), and etcd's MoveLeader then waits for its
	// context without asking again: each attempt gets transferAttempt, and a leader that still
	// leads after one is asked again.
	for {
		attempt, cancel := context.WithTimeout(ctx, transferAttempt)
		_, err := c.maint.MoveLeader(attempt, to.ID)
		cancel()
		if err == nil {
			return true, nil
		}
		if ctx.Err() != nil || rpctypes.Error(err) == rpctypes.ErrBadLeaderTransferee { // a learner: never
			return false, c.fail(op, err)
		}
		s, serr := c.Status(ctx)
		if serr != nil {
			return false, serr
		}
		if s.Leader == to.ID {
			return true, nil
		}
		if s.Leader != s.MemberID && s.Leader != 0 {
			// Another member won an election meanwhile: the member reached leads no more.
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, c.fail(op, err)
		case <-time.After(retryEvery):
		}
	}
}

// transferAttempt bounds one leadership transfer: raft abandons a transfer after an election
// timeout (1 s by default), so a transfer not done in 10 s will not be done by waiting.
const transferAttempt = 10 * time.Second
