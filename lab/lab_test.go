package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kforge/kforge/inventory"
)

func TestOptionsDefaultsAndValidation(t *testing.T) {
	o := Options{Hosts: 3}
	if err := o.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if o.Name != "kforge" || o.Masters != 1 || o.Dir == "" || o.CacheDir == "" || o.BootTimeout == 0 || o.Logger == nil || o.Report == nil {
		t.Fatalf("defaults not applied: %+v", o)
	}
	for _, bad := range []Options{
		{Name: "Bad", Hosts: 1},
		{Name: "1abc", Hosts: 1},
		{Name: "abc-", Hosts: 1},
		{Name: "a-very-long-lab-name-x", Hosts: 1},
		{Name: "ok", Hosts: 0},
		{Name: "ok", Hosts: 2, Masters: 3},
	} {
		if err := bad.setDefaults(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%+v: %v, want an ErrInvalidOptions", bad, err)
		}
	}
}

func TestRootfsHashFollowsPackages(t *testing.T) {
	h := RootfsHash()
	if len(h) != 16 || h != RootfsHash() {
		t.Fatalf("RootfsHash %q: want 16 stable hex digits", h)
	}
	saved := Packages
	defer func() { Packages = saved }()
	Packages = append(append([]string{}, saved...), "strace")
	if RootfsHash() == h {
		t.Fatal("adding a package did not change the rootfs hash: a stale rootfs would be reused")
	}
}

func TestCheckSubnetFree(t *testing.T) {
	parse := func(s string) []map[string]any {
		var v []map[string]any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	clean := parse(`[{"dst":"default","gateway":"192.0.2.1","dev":"eth0"},{"dst":"192.0.2.0/24","dev":"eth0"},
		{"dst":"198.51.100.0/25","dev":"kforgelab0"},{"dst":"198.51.100.128/26","dev":"bench0"},{"type":"local","dst":"198.51.100.1","dev":"kforgelab0"}]`)
	addrs := parse(`[{"ifname":"eth0","addr_info":[{"local":"192.0.2.2"}]},{"ifname":"kforgelab0","addr_info":[{"local":"198.51.100.1"}]},
		{"ifname":"bench0","addr_info":[{"local":"198.51.100.129"}]}]`)
	if err := checkSubnetFree(clean, addrs); err != nil {
		t.Fatalf("a machine with only the lab bridge and a neighbour's /26 was refused: %v", err)
	}
	for _, r := range []string{
		`[{"dst":"198.51.100.0/24","dev":"eth0"}]`,
		`[{"dst":"198.51.100.64/26","dev":"other0"}]`,
		`[{"type":"local","dst":"198.51.100.7","dev":"other0"}]`,
	} {
		if err := checkSubnetFree(parse(r), nil); err == nil || !strings.Contains(err.Error(), "already routed") {
			t.Errorf("route %s: err %v, want 'already routed'", r, err)
		}
	}
	if err := checkSubnetFree(nil, parse(`[{"ifname":"x0","addr_info":[{"local":"198.51.100.9"}]}]`)); err == nil {
		t.Error("an address inside the subnet on another interface was accepted")
	}
}

func TestFindRule(t *testing.T) {
	listing := "-P INPUT ACCEPT\n-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n" +
		`-A INPUT -m comment --comment "kforge-lab-fault-drop" -m statistic --mode random --probability 0.30000000009 -j DROP` + "\n"
	got := findRule(listing, dropComment)
	want := []string{"-A", "INPUT", "-m", "comment", "--comment", dropComment, "-m", "statistic", "--mode", "random", "--probability", "0.30000000009", "-j", "DROP"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("findRule = %q\nwant %q", got, want)
	}
	if findRule("-P INPUT ACCEPT\n", dropComment) != nil {
		t.Fatal("found a rule in a listing without one")
	}
}

func TestInventorySkeletonLoads(t *testing.T) {
	dir := t.TempDir()
	l := &Lab{Name: "inv", Dir: dir}
	l.st = state{Name: "inv", Dir: dir, Hosts: []*hostState{
		{Host: Host{Name: "inv-1", Address: "198.51.100.2", Port: 22, Role: RoleMaster}},
		{Host: Host{Name: "inv-2", Address: "198.51.100.3", Port: 22, Role: RoleMaster}},
		{Host: Host{Name: "inv-3", Address: "198.51.100.4", Port: 22, Role: RoleWorker}},
		{Host: Host{Name: "inv-lb", Address: "198.51.100.5", Port: 22, Role: RoleLoadBalancer}},
	}}
	l.index()
	b, err := l.inventory()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := inventory.Load(p)
	if err != nil {
		t.Fatalf("the skeleton does not load:\n%s\n%v", b, err)
	}
	if len(c.Masters) != 2 || len(c.Workers) != 1 || c.Masters[0].Name != "inv-1" || c.Workers[0].Address != "198.51.100.4" {
		t.Fatalf("hosts: masters %+v workers %+v", c.Masters, c.Workers)
	}
	if c.ControlPlaneEndpoint != "198.51.100.5:6443" {
		t.Fatalf("controlPlaneEndpoint %q, want the load balancer 198.51.100.5:6443", c.ControlPlaneEndpoint)
	}
	if c.SSH.User != "root" || c.SSH.IdentityFile != l.IdentityFile || c.SSH.KnownHostsFile != l.KnownHostsFile {
		t.Fatalf("ssh block %+v", c.SSH)
	}

	// A reserved VIP and no load balancer: the skeleton names the VIP, and no endpoint.
	l.st.Hosts = l.st.Hosts[:3]
	l.st.VIP = "198.51.100.6"
	l.index()
	if b, err = l.inventory(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err = inventory.Load(p); err != nil {
		t.Fatalf("the skeleton with a VIP does not load:\n%s\n%v", b, err)
	}
	if c.ControlPlaneVIP != "198.51.100.6" || c.ControlPlaneEndpoint != "" || l.VIP != "198.51.100.6" {
		t.Fatalf("controlPlaneVIP %q, controlPlaneEndpoint %q, Lab.VIP %q; want the VIP and no endpoint", c.ControlPlaneVIP, c.ControlPlaneEndpoint, l.VIP)
	}
}

func TestAptMirrorFromThisMachine(t *testing.T) {
	if _, err := os.Stat("/etc/apt"); err != nil {
		t.Skip("not a Debian machine")
	}
	m, err := aptMirror()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(m, "http") {
		t.Fatalf("mirror %q is not a URL", m)
	}
}

func TestRemoveUnmountedRefusesMounts(t *testing.T) {
	// "/" always has a mount at itself: removeUnmounted must refuse before deleting anything.
	if err := removeUnmounted("/proc"); err == nil || !strings.Contains(err.Error(), "mounted") {
		t.Fatalf("removeUnmounted(/proc) = %v, want a refusal", err)
	}
	d := t.TempDir()
	if err := os.WriteFile(filepath.Join(d, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := removeUnmounted(d); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d); !os.IsNotExist(err) {
		t.Fatalf("%s still exists", d)
	}
}

func TestDownOfMissingLabIsNoop(t *testing.T) {
	if err := Down(context.Background(), "no-such-lab-x", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Open("no-such-lab-x"); err == nil {
		t.Fatal("Open of a missing lab succeeded")
	}
}

// testLogger sends the lab's debug records to the test log (testenv.Report its progress).
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestSpawnKeepsNoInheritedDescriptor: a process spawn starts (a host's launcher, QEMU) holds no
// descriptor this process inherited, such as the lock of `flock LOCK kforge lab up`.
func TestSpawnKeepsNoInheritedDescriptor(t *testing.T) {
	dir := t.TempDir()
	held := filepath.Join(dir, "held.lock")
	fd, err := syscall.Open(held, syscall.O_RDWR|syscall.O_CREAT, 0o644) // no O_CLOEXEC, as flock(1) passes it
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	h := &hostState{Dir: dir}
	if _, err := spawn(h, nil, "/bin/sh", "-c", `ls -l /proc/$$/fd; echo done`); err != nil {
		t.Fatal(err)
	}
	console := filepath.Join(dir, "console.log")
	var out []byte
	for i := 0; i < 100 && !bytes.Contains(out, []byte("done\n")); i++ {
		time.Sleep(50 * time.Millisecond)
		out, _ = os.ReadFile(console)
	}
	if !bytes.Contains(out, []byte("done\n")) || bytes.Contains(out, []byte(held)) {
		t.Errorf("the spawned process's descriptors (want none on %s):\n%s", held, out)
	}
}

// TestRemakeCgroups: StartHost makes a host's cgroups again where they were, a cpuset one with
// its parent's CPUs and memory nodes; a parent that is gone is an error saying what to do.
func TestRemakeCgroups(t *testing.T) {
	root := t.TempDir() // plain directories stand in for the hierarchies
	cpuset, memory := filepath.Join(root, "cpuset"), filepath.Join(root, "memory")
	for _, d := range []string{cpuset, memory} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for f, v := range map[string]string{"cpuset.cpus": "0-1\n", "cpuset.mems": "0\n"} {
		if err := os.WriteFile(filepath.Join(cpuset, f), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dirs := []string{filepath.Join(cpuset, "kforge-lab-x-1"), filepath.Join(memory, "kforge-lab-x-1")}
	if err := remakeCgroups(dirs); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dirs[0], "cpuset.cpus")); err != nil || string(b) != "0-1\n" {
		t.Errorf("cpuset.cpus of the new cpuset cgroup: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dirs[1], "cpuset.cpus")); err == nil {
		t.Error("a cgroup outside the cpuset hierarchy got cpuset files")
	}
	gone := filepath.Join(root, "gone", "kforge-lab-x-1")
	if err := remakeCgroups([]string{gone}); err == nil || !strings.Contains(err.Error(), "take the lab down and bring it up again") {
		t.Errorf("remaking a cgroup whose parent is gone: %v", err)
	}
}
