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
// certificates expiring: this 2-core machine is idle 85-95 % of a CA rotation), so two labs at
// once cost little more than one; three do not: at 0a81bb4 three lanes of nspawn labs beside
// the other packages' tests pushed the load average to 47, and an HA failover, the external
// etcd's upgrade (a Service request timed out) and the etcd package's real members (a leader
// hand-over of 2m43s) failed. The VM is CPU-bound (QEMU without KVM): 14 minutes alone, 35
// beside the 11-host external etcd (809cd06) and 35 beside the light labs and the other
// packages' tests (74b018e). So the nspawn labs come first, two at once, and the VM last, with
// only the certificates' expiry beside it (it sleeps): at a4aa4ec the first phase took 39
// minutes, the VM 13m35s after it (docs/testing.md). At 9ac0cc4's CI the first lane took 30
// minutes, the second 36 (the external etcd 18m42s, the upgrade 8m31s, the controller 5m15s,
// the three lost masters 2m28s, the bare hosts 1m10s), so the last two moved to the first; at
// 4c1f846's that lane took 38m41s (HA cut short at its CA rotation, 20m21s; the lab cluster
// 13m13s, the three lost masters 3m35s, the bare hosts 1m32s) and the other 34m22s: the three
// lost masters went back (about 37.5 and 38 minutes with HA whole). One phase of four lanes
// (the VM in a lane of its own beside the two, the certificates' expiry in another) kept the
// machine 92-100 % busy: with the VM's cgroup at a quarter of a host's CPU weight (8b33102) the
// VM got 0.1-0.3 cores and its kubelet said "container runtime is down"; at a host's weight
// (bab43b2) the VM's local volume did not provision within 120 s and the external etcd's CA
// rotation failed (an etcd member not ready for 5 minutes in the reissue phase, as at a4aa4ec:
// docs/testing.md), so the VM runs after them again.
var phases = [][][]string{
	{
		{"TestHAControlPlaneGrowsSurvivesAMasterAndShrinks", "TestApplyLabClusterEndToEnd", "TestConformance", "TestBareHostsEveryMinor"},
		{"TestExternalEtcd", "TestUpgradeAcrossTwoMinors", "TestControllerMakesAndKeepsACluster", "TestRestoreThreeLostMasters"},
	},
	{
		{"TestHostsAsUsersHaveThem"},
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
	if w, lane, _ := before("TestExpiredCertificatesRenewed"); lane != 4 || len(w) != labTests()-2 || slices.Contains(w, "TestHostsAsUsersHaveThem") {
		t.Errorf("before the certificates' expiry (second phase): %v in lane %d", w, lane)
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
