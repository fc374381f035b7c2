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

// lanes are the e2e tests that bring up a lab, in lanes that run side by side: within a lane
// one lab at a time, in this order. A lab spends most of its time waiting (on kubelet
// restarting static pods, on certificates expiring: this 2-core machine is idle 85-95 % of a
// CA rotation), so labs at once cost little more than one, except the VM: QEMU without KVM is
// CPU-bound, 14 minutes alone, 35 beside the 11-host external etcd (809cd06) and 33 beside its
// first 17 minutes (74b018e). So while it runs only the light labs run beside it (the
// certificates' expiry, which sleeps; the bare hosts; the three lost masters); the heavy ones
// wait for it to end (afterTest) and then run three at once. Three lanes from the start were
// tried at 98d3ae9: the load average went past 30 and the VM test was not done after 25
// minutes (docs/testing.md).
var lanes = [][]string{
	{"TestHostsAsUsersHaveThem", "TestHAControlPlaneGrowsSurvivesAMasterAndShrinks"},
	{"TestExpiredCertificatesRenewed", "TestBareHostsEveryMinor", "TestRestoreThreeLostMasters", "TestExternalEtcd"},
	{"TestApplyLabClusterEndToEnd", "TestUpgradeAcrossTwoMinors", "TestConformance"},
}

// afterTest holds a test until another lane's test is done, when both are selected.
var afterTest = map[string]string{
	"TestApplyLabClusterEndToEnd": "TestHostsAsUsersHaveThem",
	"TestExternalEtcd":            "TestHostsAsUsersHaveThem",
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

// labTests is the number of lab tests, in all lanes.
func labTests() int {
	n := 0
	for _, l := range lanes {
		n += len(l)
	}
	return n
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

// inLane runs the calling test in its lane: in parallel with the other lanes, after the tests
// before it in its own and after its afterTest. It logs how long the test waited for its
// turn, which go test's duration of the test includes.
func inLane(t *testing.T) {
	t.Helper()
	li := slices.IndexFunc(lanes, func(l []string) bool { return slices.Contains(l, t.Name()) })
	if li < 0 {
		t.Fatalf("%s is in no lane (lanes_test.go)", t.Name())
	}
	s, order := labRuns, lanes[li]
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
		waitFor := order[:slices.Index(order, t.Name())]
		if a, ok := afterTest[t.Name()]; ok {
			waitFor = append(slices.Clone(waitFor), a)
		}
		s.mu.Lock()
		for _, before := range waitFor {
			for s.selected[before] && !s.done[before] {
				s.cond.Wait()
			}
		}
		s.mu.Unlock()
		if w := time.Since(start); w > time.Second {
			t.Logf("waited %s for its turn in lane %d", w.Round(time.Second), li+1)
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
