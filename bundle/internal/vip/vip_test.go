package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestReadConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		f := filepath.Join(dir, "vip.json")
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	f := write(`{"address": "198.51.100.50", "interface": "", "kubeconfig": "/etc/kubernetes/kforge-vip.conf", "identity": "m1", "namespace": "kube-system", "lease": "kforge-vip"}`)
	c, err := ReadConfig(f)
	want := Config{Address: "198.51.100.50", Kubeconfig: "/etc/kubernetes/kforge-vip.conf", Identity: "m1", Namespace: "kube-system", Lease: "kforge-vip"}
	if err != nil || c != want {
		t.Errorf("ReadConfig: %+v, %v; want %+v", c, err, want)
	}
	c, err = ReadConfig(write(`{"address": "198.51.100.50", "kubeconfig": "k.conf", "identity": "m1"}`))
	if err != nil || c.Namespace != DefaultNamespace || c.Lease != DefaultLease {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"address": "198.51.100.50", "kubeconfig": "k", "identity": "m1", "port": 1}`, `unknown field "port"`},
		{`{"kubeconfig": "k", "identity": "m1"}`, "address: missing"},
		{`{"address": "2001:db8::1", "kubeconfig": "k", "identity": "m1"}`, "address: \"2001:db8::1\" is not an IPv4 address"},
		{`{"address": "198.51.100", "kubeconfig": "k", "identity": "m1"}`, "address: \"198.51.100\" is not an IPv4 address"},
		{`{"address": "127.0.0.5", "kubeconfig": "k", "identity": "m1"}`, "address: 127.0.0.5 is not a unicast address"},
		{`{"address": "224.0.0.18", "kubeconfig": "k", "identity": "m1"}`, "address: 224.0.0.18 is not a unicast address"},
		{`{"address": "198.51.100.50", "interface": "eth0/x", "kubeconfig": "k", "identity": "m1"}`, `interface: "eth0/x" is not an interface name`},
		{`{"address": "198.51.100.50", "identity": "m1"}`, "kubeconfig: missing"},
		{`{"address": "198.51.100.50", "kubeconfig": "k"}`, "identity: missing"},
		{`{"address": "198.51.100.50", "kubeconfig": "k", "identity": "m1", "namespace": "Kube_System"}`, `namespace: "Kube_System"`},
		{`{"address": "198.51.100.50", "kubeconfig": "k", "identity": "m1", "lease": "a lease"}`, `lease: "a lease"`},
	} {
		_, err := ReadConfig(write(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), f+": ") {
			t.Errorf("%s: %v; want %s: ...%s...", tc.body, err, f, tc.want)
		}
	}
	if _, err := ReadConfig(filepath.Join(dir, "none.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestChooseInterface(t *testing.T) {
	vip := netip.MustParseAddr("198.51.100.50")
	p := netip.MustParsePrefix
	host := map[string][]netip.Prefix{
		"eth0": {p("192.0.2.10/24")},
		"eth1": {p("198.51.100.10/24"), p("198.51.100.50/32")}, // the runner's own, left over
		"eth2": nil,
	}
	for _, tc := range []struct {
		name  string
		addrs map[string][]netip.Prefix
		want  string // interface, or error
	}{
		{"", host, "eth1"},
		{"eth2", host, "eth2"},
		{"eth9", host, "this host has no interface eth9"},
		{"", map[string][]netip.Prefix{"eth0": {p("192.0.2.10/24")}}, "no interface of this host is in the subnet of 198.51.100.50"},
		{"", map[string][]netip.Prefix{"eth0": {p("198.51.100.50/32")}}, "no interface of this host is in the subnet of 198.51.100.50"},
		{"", map[string][]netip.Prefix{"eth0": {p("198.51.100.10/25")}, "br0": {p("198.51.100.11/24")}}, "several interfaces of this host are in the subnet of 198.51.100.50 (br0, eth0)"},
		{"", map[string][]netip.Prefix{"eth0": {p("198.51.100.50/24")}}, "198.51.100.50 is already an address of this host (198.51.100.50/24 on eth0)"},
		{"eth0", map[string][]netip.Prefix{"eth0": {p("198.51.100.50/24")}}, "198.51.100.50 is already an address of this host"},
	} {
		got, err := ChooseInterface(vip, tc.name, tc.addrs)
		if err != nil {
			got = err.Error()
		}
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("ChooseInterface(%q, %v) = %q, want %q", tc.name, tc.addrs, got, tc.want)
		}
	}
}

// fakeAddress is an Address that records what is done to it.
type fakeAddress struct {
	mu        sync.Mutex
	held      bool
	ops       []string
	at        map[string]time.Time // when each operation was last done
	announces int
	failAdd   bool
}

// did records op; f.mu is held.
func (f *fakeAddress) did(op string) {
	f.ops = append(f.ops, op)
	if f.at == nil {
		f.at = map[string]time.Time{}
	}
	f.at[op] = time.Now()
}

// when is the time op was last done (zero if never).
func (f *fakeAddress) when(op string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at[op]
}

func (f *fakeAddress) Has() (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held, nil
}

func (f *fakeAddress) Add() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.did("add")
	if f.failAdd {
		return errors.New("no such device")
	}
	f.held = true
	return nil
}

func (f *fakeAddress) Remove() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.did("remove")
	f.held = false
	return nil
}

func (f *fakeAddress) Disconnect() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.did("disconnect")
	return 0, nil
}

func (f *fakeAddress) Announce() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.held {
		return errors.New("announcing an address not held")
	}
	f.announces++
	return nil
}

func (f *fakeAddress) isHeld() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held
}

func (f *fakeAddress) stats() (ops []string, announces int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ops...), f.announces
}

// candidate is a runner under test.
type candidate struct {
	name   string
	addr   *fakeAddress
	state  string
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, client *fake.Clientset, name string, timing Timing, addr *fakeAddress) *candidate {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{name: name, addr: addr, state: filepath.Join(t.TempDir(), "run", "state.json"), cancel: cancel, done: make(chan error, 1)}
	r := &Runner{
		Config:  Config{Address: "198.51.100.50", Interface: "eth0", Identity: name, Namespace: DefaultNamespace, Lease: DefaultLease},
		Leases:  client.CoordinationV1(),
		Address: addr,
		Timing:  timing,
		State:   c.state,
		Logf: func(format string, args ...any) {
			t.Logf("%s %s: %s", time.Now().Format("15:04:05.000"), name, fmt.Sprintf(format, args...))
		},
	}
	go func() { c.done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			t.Errorf("%s: Run did not return", name)
		}
	})
	return c
}

// stop cancels c's context, as SIGTERM does, and waits for its Run to return.
func (c *candidate) stop(t *testing.T) {
	t.Helper()
	c.cancel()
	select {
	case err := <-c.done:
		if err != nil {
			t.Errorf("%s: Run: %v", c.name, err)
		}
		c.done <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: Run did not return within 10 s of its context's end", c.name)
	}
}

func (c *candidate) readState(t *testing.T) State {
	t.Helper()
	data, err := os.ReadFile(c.state)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("%s: state %s: %v", c.name, data, err)
	}
	return s
}

// eventually waits up to d for cond.
func eventually(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// holders are the candidates holding their address.
func holders(cs ...*candidate) []*candidate {
	var out []*candidate
	for _, c := range cs {
		if c.addr.isHeld() {
			out = append(out, c)
		}
	}
	return out
}

// watchOverlap samples the candidates every 5 ms until the returned function is called (or
// the test ends), which fails the test if two of them ever held the address at once.
func watchOverlap(t *testing.T, cs ...*candidate) (stop func()) {
	var both atomic.Bool
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			if len(holders(cs...)) > 1 {
				both.Store(true)
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(done)
			<-stopped
			if both.Load() {
				t.Error("two runners held the address at once")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestOneHoldsAndTheOtherTakesOver: of two runners electing on one API server, exactly one holds
// the address; when it stops (SIGTERM), it releases the lease, the other takes the address
// within a few seconds (kube-vip's timing), and only then does the first remove it.
func TestOneHoldsAndTheOtherTakesOver(t *testing.T) {
	if testing.Short() {
		t.Skip("takes about 9 s")
	}
	client := fake.NewClientset()
	a := start(t, client, "m1", DefaultTiming, &fakeAddress{})
	b := start(t, client, "m2", DefaultTiming, &fakeAddress{})
	overlap := watchOverlap(t, a, b)
	if !eventually(5*time.Second, func() bool { return len(holders(a, b)) == 1 }) {
		t.Fatalf("no runner holds the address")
	}
	// It stays so: the other does not take it while the leader renews.
	leader := holders(a, b)[0]
	other := map[*candidate]*candidate{a: b, b: a}[leader]
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if h := holders(a, b); len(h) != 1 || h[0] != leader {
			t.Fatalf("holders changed to %d while %s leads", len(h), leader.name)
		}
	}
	if _, n := leader.addr.stats(); n < DefaultTiming.AnnounceBurst {
		t.Errorf("%s announced %d times in its first 2 s, want at least %d", leader.name, n, DefaultTiming.AnnounceBurst)
	}
	if ops, _ := other.addr.stats(); len(ops) != 0 {
		t.Errorf("%s, not leading, did %v", other.name, ops)
	}
	if !eventually(2*time.Second, func() bool { return leader.readState(t) == State{"198.51.100.50", "eth0", leader.name, true} }) {
		t.Errorf("%s state %+v", leader.name, leader.readState(t))
	}
	if !eventually(2*time.Second, func() bool { return other.readState(t) == State{"198.51.100.50", "eth0", leader.name, false} }) {
		t.Errorf("%s state %+v", other.name, other.readState(t))
	}

	// Stopping, the leader hands the address over make before break: it releases the lease and
	// removes the address only once the other holds it (the two hold it at once for a moment).
	overlap()
	stopped := time.Now()
	leader.stop(t)
	if leader.addr.isHeld() {
		t.Errorf("%s still holds the address after stopping", leader.name)
	}
	if ops, _ := leader.addr.stats(); !slices.Equal(ops, []string{"add", "disconnect", "remove"}) {
		t.Errorf("%s did %v, want [add disconnect remove]: its connections reset while it holds the address", leader.name, ops)
	}
	if s := leader.readState(t); s.Leading || s.Holder == leader.name {
		t.Errorf("%s state after stopping: %+v", leader.name, s)
	}
	if !other.addr.isHeld() {
		t.Fatalf("%s did not hold the address when %s's Run returned; want it to take over first", other.name, leader.name)
	}
	took, removed := other.addr.when("add"), leader.addr.when("remove")
	if gap := removed.Sub(took); gap < 2*DefaultTiming.AnnounceGap || gap > time.Second {
		t.Errorf("%s removed the address %s after %s added it; want between %s (its announcement) and 1 s", leader.name, gap, other.name, 2*DefaultTiming.AnnounceGap)
	}
	t.Logf("%s took over %s after %s stopped, which removed the address %s later", other.name, took.Sub(stopped).Round(time.Millisecond), leader.name, removed.Sub(took).Round(time.Millisecond))
	if !eventually(2*time.Second, func() bool { return other.readState(t) == State{"198.51.100.50", "eth0", other.name, true} }) {
		t.Errorf("%s state %+v", other.name, other.readState(t))
	}
	// With no one to take over, it waits LeaseDuration at most, then removes it.
	stopped = time.Now()
	other.stop(t)
	if other.addr.isHeld() {
		t.Errorf("%s still holds the address after stopping", other.name)
	}
	if d := time.Since(stopped); d < DefaultTiming.LeaseDuration || d > DefaultTiming.LeaseDuration+time.Second {
		t.Errorf("%s, alone, stopped in %s; want about LeaseDuration (%s), waiting for a successor", other.name, d, DefaultTiming.LeaseDuration)
	}
	lease, err := client.CoordinationV1().Leases(DefaultNamespace).Get(context.Background(), DefaultLease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("lease still held by %s after both stopped", *h)
	}
}

// fastTiming shortens the election for tests of lost leases. A leader that cannot renew stops
// at most RetryPeriod+RenewDeadline after its last renewal (1.2 s); another takes the lease
// LeaseDuration after it first saw the record of that renewal, and records count whole seconds,
// so that can be up to a second before the renewal itself (3 s - 1 s, later than 1.2 s).
var fastTiming = Timing{
	LeaseDuration: 3 * time.Second,
	RenewDeadline: 1000 * time.Millisecond,
	RetryPeriod:   200 * time.Millisecond,
	AnnounceBurst: 3,
	AnnounceGap:   50 * time.Millisecond,
	AnnounceEvery: 300 * time.Millisecond,
}

// TestLostLease: a leader that cannot renew (its API server is unreachable) removes the address
// and stands for election again without exiting; the other takes over, and keeps the lease when
// the first can reach the API server again.
func TestLostLease(t *testing.T) {
	if testing.Short() {
		t.Skip("takes about 4 s")
	}
	client := fake.NewClientset()
	var cut sync.Map // identities whose lease writes fail
	client.PrependReactor("*", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		a, ok := action.(interface{ GetObject() runtime.Object }) // create, update
		if !ok {
			return false, nil, nil
		}
		if l, ok := a.GetObject().(*coordv1.Lease); ok && l.Spec.HolderIdentity != nil {
			if _, c := cut.Load(*l.Spec.HolderIdentity); c {
				return true, nil, errors.New("connection refused")
			}
		}
		return false, nil, nil
	})
	a := start(t, client, "m1", fastTiming, &fakeAddress{})
	if !eventually(3*time.Second, a.addr.isHeld) {
		t.Fatal("m1 does not hold the address")
	}
	b := start(t, client, "m2", fastTiming, &fakeAddress{})
	overlap := watchOverlap(t, a, b)
	time.Sleep(500 * time.Millisecond)
	if len(holders(a, b)) != 1 || !a.addr.isHeld() {
		t.Fatal("m2 took the address from m1")
	}

	cut.Store("m1", true)
	lost := time.Now()
	if !eventually(3*time.Second, func() bool { return !a.addr.isHeld() }) {
		t.Fatal("m1 kept the address without renewing its lease")
	}
	t.Logf("m1 removed the address %s after it could no longer renew", time.Since(lost).Round(time.Millisecond))
	if !eventually(5*time.Second, b.addr.isHeld) {
		t.Fatal("m2 did not take the address from m1")
	}
	if len(holders(a, b)) != 1 {
		t.Error("both hold the address")
	}
	select {
	case err := <-a.done:
		t.Fatalf("m1 exited on losing the lease: %v", err)
	default:
	}

	cut.Delete("m1")
	time.Sleep(time.Second)
	if a.addr.isHeld() || !b.addr.isHeld() {
		t.Errorf("after m1 reaches the API server again: m1 holds %v, m2 holds %v; want m2 only", a.addr.isHeld(), b.addr.isHeld())
	}
	if s := a.readState(t); s.Leading || s.Holder != "m2" {
		t.Errorf("m1 state %+v, want m2 the holder", s)
	}
	// m1 leads again once m2 stops (handing it over make before break).
	overlap()
	b.stop(t)
	if !eventually(3*time.Second, a.addr.isHeld) {
		t.Fatal("m1 did not stand for election again")
	}
}

// TestLeftoverRemovedFirst: an address left by a crashed run is removed before the election.
func TestLeftoverRemovedFirst(t *testing.T) {
	client := fake.NewClientset()
	addr := &fakeAddress{held: true}
	a := start(t, client, "m1", fastTiming, addr)
	if !eventually(3*time.Second, func() bool { ops, _ := addr.stats(); return len(ops) >= 3 }) {
		t.Fatal("m1 did not take the address")
	}
	if ops, _ := addr.stats(); !slices.Equal(ops[:3], []string{"disconnect", "remove", "add"}) {
		t.Errorf("ops %v, want disconnect, remove, then add", ops)
	}
	a.stop(t)
	if addr.isHeld() {
		t.Error("the address is held after stopping")
	}
}

// TestCannotAdd: a leader that cannot add the address gives up the lease to the other master.
func TestCannotAdd(t *testing.T) {
	client := fake.NewClientset()
	a := start(t, client, "m1", fastTiming, &fakeAddress{failAdd: true})
	if !eventually(3*time.Second, func() bool { ops, _ := a.addr.stats(); return len(ops) > 0 }) {
		t.Fatal("m1 did not lead")
	}
	b := start(t, client, "m2", fastTiming, &fakeAddress{})
	if !eventually(4*time.Second, b.addr.isHeld) {
		t.Fatal("m2 did not take the address m1 could not hold")
	}
	if s := a.readState(t); s.Leading {
		t.Errorf("m1 state %+v", s)
	}
}
