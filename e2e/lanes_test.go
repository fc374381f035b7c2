package e2e

import (
	"flag"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// phases are the e2e tests that bring up a lab: in lanes that run side by side, within a lane
// one lab at a time, in order; a phase's lanes begin when every test of the phases before it is
// done. A lab spends most of its time waiting (on kubelet restarting static pods, on
// certificates expiring): with two of the big labs side by side this 2-core machine is about
// 40 % idle. Three lanes of nspawn labs beside the other packages' tests (0a81bb4: load average
// 47) failed an HA failover, the external etcd's upgrade and the etcd package's real members,
// so two lanes carry the big nspawn labs. The VM is CPU-bound (QEMU without KVM): 14 minutes
// alone; run after them it put 17 minutes on the critical path. It now has a lane of its own
// beside them, where it takes the CPU they leave. With its cgroup at a quarter of an nspawn
// host's CPU weight (8b33102) it got 0.1-0.3 cores while they were busy, its kubelet said
// "container runtime is down" and the VM test failed; at the same weight as a host, it takes
// its share. The certificates' expiry (it sleeps) has a lane of its own. docs/testing.md has
// the history.
var phases = [][][]string{
	{
		{"TestHAControlPlaneGrowsSurvivesAMasterAndShrinks", "TestApplyLabClusterEndToEnd", "TestConformance"},
		{"TestExternalEtcd", "TestUpgradeAcrossTwoMinors", "TestControllerMakesAndKeepsACluster"},
		{"TestHostsAsUsersHaveThem", "TestRestoreThreeLostMasters", "TestBareHostsEveryMinor"},
		{"TestExpiredCertificatesRenewed"},
	},
}

// labRuns is which lab tests -run selected, and which of them are done, in all lanes.
var labRuns = func() *labState {
	s := &labState{selected: map[string]bool{}, done: map[string]bool{}}
	s.cond = sync.NewCond(&s.mu)
	return s
}()

type labState struct {
	mu       sync.Mutex
	cond     *sync.Cond
	selected map[string]bool
	done     map[string]bool
}

// labTests is the number of lab tests, in all phases.
func labTests() int {
	n := 0
	for _, p := range phases {
		for _, l := range p {
			n += len(l)
		}
	}
	return n
}

// before are the tests that must be done before name begins: those before it in its lane and
// every test of the phases before its own; lane is its lane's number, counted across phases.
func before(name string) (waitFor []string, lane int, ok bool) { return beforeIn(phases, name) }

// beforeIn is before in the phases ph.
func beforeIn(ph [][][]string, name string) (waitFor []string, lane int, ok bool) {
	for _, p := range ph {
		for _, l := range p {
			lane++
			if i := slices.Index(l, name); i >= 0 {
				return append(waitFor, l[:i]...), lane, true
			}
		}
		for _, l := range p {
			waitFor = append(waitFor, l...)
		}
	}
	return nil, 0, false
}

// TestMain lets every lab test be in flight at once (each waits for its turn in its lane, not
// for a -parallel slot, which a waiting test would hold), unless -parallel is given.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", strconv.Itoa(labTests())); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

// inLane runs the calling test in its lane: in parallel with the other lanes of its phase,
// after the tests before it in its lane and every test of the phases before. It logs how long
// the test waited for its turn, which go test's duration of the test includes.
func inLane(t *testing.T) {
	t.Helper()
	waitFor, lane, ok := before(t.Name())
	if !ok {
		t.Fatalf("%s is in no lane (lanes_test.go)", t.Name())
	}
	s := labRuns
	s.mu.Lock()
	s.selected[t.Name()] = true // every selected test gets here before any resumes from Parallel
	s.mu.Unlock()
	t.Cleanup(func() { // last: after the test's lab is down
		s.mu.Lock()
		s.done[t.Name()] = true
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	t.Parallel()
	// With -parallel smaller than the number of lab tests, a test waiting here could hold the
	// slot its predecessor needs: then the order is go test's.
	if p, _ := strconv.Atoi(flag.Lookup("test.parallel").Value.String()); p >= labTests() {
		start := time.Now()
		s.mu.Lock()
		for _, b := range waitFor {
			for s.selected[b] && !s.done[b] {
				s.cond.Wait()
			}
		}
		s.mu.Unlock()
		if w := time.Since(start); w > time.Second {
			t.Logf("waited %s for its turn in lane %d", w.Round(time.Second), lane)
		}
		start = time.Now()
		t.Cleanup(func() { t.Logf("ran %s after its turn came", time.Since(start).Round(time.Second)) })
	}
}

// step runs one phase of a lab's life as a subtest named name, with c.t the subtest's: a
// failure is named by its phase, and ends the life there (each phase needs the ones before).
func (c *cluster) step(name string, f func(t *testing.T)) {
	parent := c.t.(*testing.T)
	parent.Helper()
	ok := parent.Run(name, func(t *testing.T) {
		c.t = t
		defer func() { c.t = parent }()
		f(t)
	})
	if !ok {
		parent.FailNow()
	}
}

// TestLanes: every lab test is in one lane once; a test waits for those before it in its lane
// and for every test of the phases before its own.
func TestLanes(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range phases {
		for _, l := range p {
			for _, n := range l {
				if seen[n] {
					t.Errorf("%s is in two lanes", n)
				}
				seen[n] = true
			}
		}
	}
	if w, lane, ok := before("TestUpgradeAcrossTwoMinors"); !ok || lane != 2 || !slices.Equal(w, []string{"TestExternalEtcd"}) {
		t.Errorf("before the upgrade: %v in lane %d", w, lane)
	}
	if w, lane, ok := before("TestExpiredCertificatesRenewed"); !ok || lane != 4 || len(w) != 0 {
		t.Errorf("before the certificates' expiry (a lane of its own): %v in lane %d", w, lane)
	}
	if w, lane, _ := before("TestRestoreThreeLostMasters"); lane != 3 || !slices.Equal(w, []string{"TestHostsAsUsersHaveThem"}) {
		t.Errorf("before the three lost masters (behind the VM): %v in lane %d", w, lane)
	}
	// A later phase waits for every test of the phases before it; lanes count across phases.
	two := [][][]string{{{"A1", "A2"}, {"B1"}}, {{"C1", "C2"}}}
	if w, lane, _ := beforeIn(two, "C2"); lane != 3 || !slices.Equal(w, []string{"A1", "A2", "B1", "C1"}) {
		t.Errorf("before C2 (second phase): %v in lane %d", w, lane)
	}
	if _, _, ok := before("TestNoSuchLab"); ok {
		t.Error("a test in no lane was found")
	}
}
