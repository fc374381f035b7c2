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

// lanes are the e2e tests that bring up a lab, in two lanes that run side by side: within a
// lane one lab at a time, in this order. A lab spends most of its time waiting (on kubelet
// restarting static pods, on certificates expiring: this 2-core machine is idle 85-95 % of a
// CA rotation), so two labs at once cost little more than one. The VM (QEMU without KVM,
// CPU-bound) took 25 minutes beside the lab cluster's life (a load test, the conformance slice)
// at e98b480's CI, its lane 54 minutes against the other's 37; beside the lighter labs (the
// certificates' expiry, which sleeps; the bare hosts of every minor; the external etcd) it took
// 20 at 87da547's (lanes 45 and 47 minutes). The HA test's timed failovers run beside no VM.
// Three lanes were tried at 98d3ae9: the load average went past 30 and the VM test, 9 minutes
// in two lanes, was not done after 25 (docs/testing.md).
var lanes = [][]string{
	{"TestHostsAsUsersHaveThem", "TestHAControlPlaneGrowsSurvivesAMasterAndShrinks", "TestRestoreThreeLostMasters"},
	{"TestExpiredCertificatesRenewed", "TestBareHostsEveryMinor", "TestExternalEtcd", "TestApplyLabClusterEndToEnd", "TestUpgradeAcrossTwoMinors", "TestConformance"},
}

// lane is one lane's tests selected by -run, and those of them done.
type lane struct {
	mu       sync.Mutex
	cond     *sync.Cond
	selected map[string]bool
	done     map[string]bool
}

var laneState = func() []*lane {
	var ls []*lane
	for range lanes {
		l := &lane{selected: map[string]bool{}, done: map[string]bool{}}
		l.cond = sync.NewCond(&l.mu)
		ls = append(ls, l)
	}
	return ls
}()

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

// inLane runs the calling test in its lane: in parallel with the other lane, after the tests
// before it in its own. It logs how long the test waited for its turn, which go test's
// duration of the test includes.
func inLane(t *testing.T) {
	t.Helper()
	li := slices.IndexFunc(lanes, func(l []string) bool { return slices.Contains(l, t.Name()) })
	if li < 0 {
		t.Fatalf("%s is in no lane (lanes_test.go)", t.Name())
	}
	l, order := laneState[li], lanes[li]
	l.mu.Lock()
	l.selected[t.Name()] = true // every selected test gets here before any resumes from Parallel
	l.mu.Unlock()
	t.Cleanup(func() { // last: after the test's lab is down
		l.mu.Lock()
		l.done[t.Name()] = true
		l.cond.Broadcast()
		l.mu.Unlock()
	})
	t.Parallel()
	// With -parallel smaller than the number of lab tests, a test waiting here could hold the
	// slot its predecessor needs: then the order is go test's.
	if p, _ := strconv.Atoi(flag.Lookup("test.parallel").Value.String()); p >= labTests() {
		start := time.Now()
		l.mu.Lock()
		for _, before := range order[:slices.Index(order, t.Name())] {
			for l.selected[before] && !l.done[before] {
				l.cond.Wait()
			}
		}
		l.mu.Unlock()
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
