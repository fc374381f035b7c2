package tasks

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/kforge/kforge/etcd"
	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/templates"
)

// EtcdStatus is one `kforge etcd status`: what each master's etcd member says of itself, the
// member list, the alarms, and whether the cluster has quorum. It works on what is left of a
// cluster: unreachable masters and members that do not answer are part of the answer, not
// failures of the command.
type EtcdStatus struct {
	etcdAccess
	// scheduledSnapshots says whether the masters take snapshots on a schedule, every how often.
	scheduledSnapshots bool
	every              inventory.Duration

	// Report is the answer, filled by status.
	Report EtcdReport
}

// etcdAccess is what the etcd commands share: the masters' connections, made to those that
// answer, and the credentials that reach their members.
type etcdAccess struct {
	o           Options
	fleet       *fleet.Fleet   // the cluster's hosts; reach connects the members' that answer
	role        inventory.Role // the members' hosts': the masters, or the etcd group (EtcdRole)
	creds       *pki.Set       // credentials: the etcd CA and apiserver-etcd-client, from the state dir
	unreachable []MemberStatus // reach: the masters that did not answer, and why
}

func newEtcdAccess(c *inventory.Cluster, o Options) etcdAccess {
	o = o.withDefaults()
	return etcdAccess{o: o, fleet: newFleet(c, c.Hosts(), o), role: c.EtcdRole()}
}

// Close ends every connection the command opened.
func (e *etcdAccess) Close() { e.fleet.Close() }

func (e *etcdAccess) credentials(context.Context, progress.Reporter) error {
	set, err := loadEtcdCredentials(e.o)
	e.creds = set
	return err
}

func (e *etcdAccess) reach(ctx context.Context, r progress.Reporter) error {
	e.unreachable = nil
	for name, err := range e.fleet.Reach(ctx, e.role, etcdReachTimeout, r) {
		e.unreachable = append(e.unreachable, MemberStatus{Master: name, Problem: "host unreachable: " + oneLine(err.Error())})
	}
	return nil
}

// EtcdReport is the state of a cluster's etcd as its masters see it.
type EtcdReport struct {
	Members []MemberStatus `json:"members"` // one per master of the inventory, in its order
	// Others are members etcd lists that are no master of the inventory (removed hosts, or
	// members added by hand).
	Others  []string `json:"others,omitempty"`
	Alarms  []string `json:"alarms,omitempty"`
	Leader  string   `json:"leader,omitempty"` // the leader's master name, or its ID
	Voters  int      `json:"voters"`           // voting members in etcd's list
	Healthy int      `json:"healthy"`          // voting members that answer with a leader and no error
	Quorum  bool     `json:"quorum"`
	// Advice says what to do when not every member is healthy.
	Advice string `json:"advice,omitempty"`
	// SnapshotsEvery is the scheduled snapshots' interval (etcdSnapshots.every); empty when the
	// cluster takes none. LateSnapshots are the masters whose snapshots are behind it.
	SnapshotsEvery string   `json:"snapshotsEvery,omitempty"`
	LateSnapshots  []string `json:"lateSnapshots,omitempty"`
}

// MemberStatus is one master's etcd member.
type MemberStatus struct {
	Master    string   `json:"master"`
	ID        string   `json:"id,omitempty"` // hex, as etcdctl prints it
	Healthy   bool     `json:"healthy"`
	Problem   string   `json:"problem,omitempty"` // why it is not healthy
	Leader    bool     `json:"leader"`
	Learner   bool     `json:"learner,omitempty"`
	Version   string   `json:"version,omitempty"`
	DBSize    int64    `json:"dbSize,omitempty"`
	DBInUse   int64    `json:"dbInUse,omitempty"`
	Revision  int64    `json:"revision,omitempty"`
	RaftIndex uint64   `json:"raftIndex,omitempty"`
	RaftTerm  uint64   `json:"raftTerm,omitempty"`
	Errors    []string `json:"errors,omitempty"`
	// Snapshots are the master's scheduled snapshots, when the cluster takes them.
	Snapshots *MemberSnapshots `json:"snapshots,omitempty"`

	status etcd.Status
}

// MemberSnapshots is what a master holds of the scheduled snapshots, by its own clock.
type MemberSnapshots struct {
	Count      int     `json:"count"`
	Newest     string  `json:"newest,omitempty"`     // its name (kforge etcd snapshot --fetch --name)
	AgeSeconds float64 `json:"ageSeconds,omitempty"` // how old the newest is
	Revision   int64   `json:"revision,omitempty"`   // the newest's revision
	Late       string  `json:"late,omitempty"`       // why the snapshots are behind the schedule (etcd status exits 1)
	Trouble    string  `json:"trouble,omitempty"`    // what will make them late, while the newest is recent
}

// etcdReachTimeout is how long a master that does not answer SSH is retried by etcd commands:
// short, since they must report on a cluster that lost masters.
const etcdReachTimeout = 10 * time.Second

// NewEtcdStatus prepares a status of c's etcd.
func NewEtcdStatus(c *inventory.Cluster, o Options) *EtcdStatus {
	return &EtcdStatus{etcdAccess: newEtcdAccess(c, o), scheduledSnapshots: c.ScheduledSnapshots(), every: c.EtcdSnapshots.Every}
}

// Steps is etcd status, top to bottom.
func (x *EtcdStatus) Steps() []Step {
	masters := x.fleet.Names(x.role)
	var l list
	l.add("credentials", OnWorkstation, nil, x.credentials, "read the etcd CA and the apiserver-etcd-client certificate from the state dir")
	l.add("connect", OnHosts, masters, x.reach, "connect to %s over SSH; a host that does not answer within %s is reported, not fatal", count(len(masters), string(x.role)+" host"), etcdReachTimeout)
	l.add("status", OnHosts, masters, x.status, "ask each member (127.0.0.1:2379 through its host's SSH connection) for its status; the member list and alarms from a healthy one")
	if x.scheduledSnapshots {
		l.add("snapshots", OnHosts, masters, x.scheduled, "read each member's scheduled snapshots in %s: late when the newest is older than every %s and %s more (a stopped timer or a failed run is named, and is late once the newest is that old)", hostpath.EtcdSnapshotDir, x.every, snapshotGrace(time.Duration(x.every)))
	}
	return l
}

func (x *EtcdStatus) scheduled(ctx context.Context, r progress.Reporter) error {
	every := time.Duration(x.every)
	x.Report.SnapshotsEvery = x.every.String()
	read := map[string]hostSnapshots{}
	for _, s := range readAllHostSnapshots(ctx, x.fleet, x.role, r) {
		read[s.Master] = s
	}
	for i := range x.Report.Members {
		m := &x.Report.Members[i]
		s, ok := read[m.Master]
		if !ok {
			continue // unreachable: the member's problem says so
		}
		ms := &MemberSnapshots{Count: len(s.Records)}
		ms.Late, ms.Trouble = s.health(every)
		if n := len(s.Records); n > 0 {
			newest := s.Records[n-1]
			ms.Newest, ms.AgeSeconds, ms.Revision = strings.TrimSuffix(path.Base(newest.File), ".db"), s.Now.Sub(newest.Time).Round(time.Second).Seconds(), newest.Revision
		}
		m.Snapshots = ms
		msg := fmt.Sprintf("%d scheduled snapshots", ms.Count)
		if ms.Newest != "" {
			msg += fmt.Sprintf(", the newest %s old", progress.Round(time.Duration(ms.AgeSeconds)*time.Second))
		}
		switch {
		case ms.Late != "":
			x.Report.LateSnapshots = append(x.Report.LateSnapshots, m.Master)
			msg += ": LATE, " + ms.Late
		case ms.Trouble != "":
			msg += ": " + ms.Trouble
		}
		r(progress.Event{Kind: progress.HostDone, Host: m.Master, Message: msg})
	}
	if len(x.Report.LateSnapshots) > 0 && x.Report.Advice == "" {
		x.Report.Advice = fmt.Sprintf("the scheduled snapshots of %s are late: the cluster has no recent backup there", strings.Join(x.Report.LateSnapshots, ", "))
	}
	return nil
}

// loadEtcdCredentials reads what reaching etcd takes from the state dir.
func loadEtcdCredentials(o Options) (*pki.Set, error) {
	return pki.Load(o.State.PKI(), pki.EtcdCA, "apiserver-etcd-client")
}

func (x *EtcdStatus) status(ctx context.Context, r progress.Reporter) error {
	rep, err := surveyEtcd(ctx, x.fleet, x.role, x.creds, x.unreachable)
	x.Report = rep
	for _, m := range rep.Members {
		msg := "healthy"
		if !m.Healthy {
			msg = "unhealthy: " + m.Problem
		}
		r(progress.Event{Kind: progress.HostDone, Host: m.Master, Message: msg})
	}
	return err
}

// surveyEtcd asks every reachable master's member for its status (unreachable ones come in
// already marked), then the member list and the alarms from a healthy member, and judges the
// quorum. Errors of single members are part of the report; the error is for a survey that
// could not be made at all.
func surveyEtcd(ctx context.Context, f *fleet.Fleet, role inventory.Role, creds *pki.Set, unreachable []MemberStatus) (EtcdReport, error) {
	var rep EtcdReport
	down := map[string]MemberStatus{}
	for _, m := range unreachable {
		down[m.Master] = m
	}
	var healthyOne string
	for _, n := range f.Nodes(role) {
		if m, ok := down[n.Name]; ok {
			rep.Members = append(rep.Members, m)
			continue
		}
		m := MemberStatus{Master: n.Name}
		sctx, cancel := context.WithTimeout(ctx, etcdReachTimeout)
		c, err := newEtcdClient(sctx, f, creds, n.Name)
		if err == nil {
			m.status, err = c.Status(sctx)
			c.Close()
		}
		cancel()
		switch s := m.status; {
		case err != nil:
			m.Problem = oneLine(err.Error())
		default:
			m.ID, m.Version, m.DBSize, m.DBInUse, m.Revision = fmt.Sprintf("%x", s.MemberID), s.Version, s.DBSize, s.DBInUse, s.Revision
			m.RaftIndex, m.RaftTerm, m.Leader, m.Learner, m.Errors = s.RaftIndex, s.RaftTerm, s.Leader == s.MemberID, s.IsLearner, s.Errors
			switch {
			case s.Leader == 0:
				m.Problem = "no leader: the cluster has no quorum"
			case len(s.Errors) > 0:
				m.Problem = strings.Join(s.Errors, "; ")
			default:
				m.Healthy = true
				if healthyOne == "" {
					healthyOne = n.Name
				}
			}
		}
		rep.Members = append(rep.Members, m)
	}

	var listed []etcd.Member
	if healthyOne != "" {
		c, err := newEtcdClient(ctx, f, creds, healthyOne)
		if err != nil {
			return rep, err
		}
		defer c.Close()
		if listed, err = c.Members(ctx); err != nil {
			return rep, err
		}
		if rep.Alarms, err = c.Alarms(ctx); err != nil {
			return rep, err
		}
	}
	judge(&rep, f, role, listed)
	return rep, nil
}

// judge fills the report's leader, counts, quorum and advice from the members' answers and
// etcd's member list (empty when no member answered).
func judge(rep *EtcdReport, f *fleet.Fleet, role inventory.Role, listed []etcd.Member) {
	byPeer := map[string]string{} // peer URL -> master
	for _, n := range f.Nodes(role) {
		byPeer[templates.EtcdPeerURL(n.NodeIP())] = n.Name
	}
	healthy := map[string]bool{}
	for _, m := range rep.Members {
		if m.Healthy {
			healthy[m.ID] = true
		}
		if m.Leader {
			rep.Leader = m.Master
		}
	}
	for _, mem := range listed {
		id := fmt.Sprintf("%x", mem.ID)
		if !mem.Learner {
			rep.Voters++
			if healthy[id] {
				rep.Healthy++
			}
		}
		master := ""
		for _, u := range mem.PeerURLs {
			if byPeer[u] != "" {
				master = byPeer[u]
			}
		}
		if master == "" {
			rep.Others = append(rep.Others, mem.String())
		}
	}
	if len(listed) == 0 { // nobody answered with a leader: count what the inventory expects
		rep.Voters = len(rep.Members)
	}
	rep.Quorum = rep.Healthy > rep.Voters/2
	switch {
	case !rep.Quorum:
		rep.Advice = fmt.Sprintf("etcd has lost quorum (%d of %d members healthy): the API server cannot read or write. "+
			"If the unhealthy masters can come back (host restarted, network restored), bring them back and run kforge etcd status again; "+
			"if they are lost, restore the control plane from a snapshot onto the inventory's masters (kforge restore --snapshot FILE; snapshots: %s)",
			rep.Healthy, rep.Voters, "kforge etcd snapshot, kept in the state dir")
	case len(rep.Others) > 0:
		rep.Advice = fmt.Sprintf("%d of %d members healthy; etcd lists members that are no master of the inventory, and they count towards the quorum: "+
			"remove those that are not coming (etcdctl member remove ID), or add their hosts to the inventory", rep.Healthy, rep.Voters)
	case rep.Healthy < rep.Voters:
		rep.Advice = fmt.Sprintf("%d of %d members healthy: one more lost member may cost the quorum. "+
			"Bring the unhealthy masters back, or remove lost ones from the inventory and run kforge apply --prune", rep.Healthy, rep.Voters)
	case len(rep.Alarms) > 0:
		rep.Advice = "alarms are raised: NOSPACE means the database reached its quota (compact, defragment, then etcdctl alarm disarm)"
	}
	slices.SortStableFunc(rep.Members, func(a, b MemberStatus) int { return indexOf(f, a.Master) - indexOf(f, b.Master) })
}

// indexOf is the host's place in the fleet, which lists hosts in inventory order.
func indexOf(f *fleet.Fleet, host string) int {
	return slices.Index(f.Names(""), host)
}

// AllHealthy reports whether every member is healthy, no alarm is raised, and no master's
// scheduled snapshots are late.
func (r EtcdReport) AllHealthy() bool { return r.MembersHealthy() && len(r.LateSnapshots) == 0 }

// MembersHealthy reports whether every member is healthy and no alarm is raised.
func (r EtcdReport) MembersHealthy() bool {
	return r.Quorum && r.Healthy == r.Voters && len(r.Alarms) == 0 && len(r.Others) == 0
}

// oneLine is the first line of s.
func oneLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}
