package facts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/remote/remotetest"
)

// fakeClock returns t0, t0+step, t0+2*step, ...
func fakeClock(t0 time.Time, step time.Duration) func() time.Time {
	n := 0
	return func() time.Time {
		n++
		return t0.Add(time.Duration(n-1) * step)
	}
}

// TestGatherFakeHost: one command per host, built from the options; its output parsed; the
// workstation's clock read around it; the host's name attached.
func TestGatherFakeHost(t *testing.T) {
	h := remotetest.New("m1")
	canned := readTestdata(t, "ubuntu-v2-rerun.txt")
	o := Options{CRIEndpoint: "unix:///run/k3s/containerd.sock", Hash: []string{"/usr/bin/kubelet", "/etc/it's here"}}
	h.On(Command(o), remotetest.Result{Stdout: string(canned)})
	t0 := time.Unix(1795295173, 0)
	o.Now = fakeClock(t0, 200*time.Millisecond)
	f, err := Gather(context.Background(), h, o)
	if err != nil {
		t.Fatal(err)
	}
	if cmds := h.Commands(); len(cmds) != 1 {
		t.Fatalf("commands %q, want exactly one round trip", cmds)
	}
	cmd := h.Commands()[0]
	for _, want := range []string{"/run/k3s/containerd.sock", "/usr/bin/kubelet", "s here"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("command does not carry %q", want)
		}
	}
	if f.Host != "m1" || f.Hostname != "m1" || !f.Sent.Equal(t0) || !f.Received.Equal(t0.Add(200*time.Millisecond)) {
		t.Errorf("host %q hostname %q sent %v received %v", f.Host, f.Hostname, f.Sent, f.Received)
	}
	skew, unc := f.ClockSkew() // host clock 1795295173.5, midpoint 1795295173.1
	if skew != 400*time.Millisecond || unc != 100*time.Millisecond {
		t.Errorf("skew %v ± %v, want 400ms ± 100ms", skew, unc)
	}
}

// TestGatherErrors: a failing command keeps its typed error; output that is not the script's is
// a ParseError naming the host.
func TestGatherErrors(t *testing.T) {
	h := remotetest.New("w1")
	h.On(Command(Options{}), remotetest.Result{Stderr: "sudo: a password is required", Exit: 1})
	_, err := Gather(context.Background(), h, Options{})
	var ce *remote.CommandError
	if !errors.As(err, &ce) || ce.Host != "w1" {
		t.Errorf("Gather = %v, want the CommandError", err)
	}

	h2 := remotetest.New("w2")
	h2.On(Command(Options{}), remotetest.Result{Stdout: "kforge-facts 1\nclock=1\n"})
	_, err = Gather(context.Background(), h2, Options{})
	var pe *ParseError
	if !errors.As(err, &pe) || !strings.HasPrefix(err.Error(), "w2: reading facts: ") {
		t.Errorf("Gather = %v, want a ParseError for w2", err)
	}
}

// TestGatherAll: hosts in parallel; the facts of those that answered, the errors of the others.
func TestGatherAll(t *testing.T) {
	canned := string(readTestdata(t, "debian12-hybrid.txt"))
	var hosts []remote.Host
	for _, n := range []string{"m1", "w1", "w2"} {
		h := remotetest.New(n)
		if n != "w1" {
			h.OnPrefix("sh -c ", remotetest.Result{Stdout: canned})
		}
		hosts = append(hosts, h)
	}
	var asked []string
	got, err := GatherAll(context.Background(), hosts, remote.Limits{Hosts: 1}, func(host string) Options {
		asked = append(asked, host)
		return Options{Hash: []string{"/etc/" + host}}
	})
	if len(got) != 2 || got["m1"] == nil || got["w2"] == nil || got["w2"].Host != "w2" {
		t.Errorf("facts for %v", got)
	}
	var errs remote.Errors
	if !errors.As(err, &errs) || len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), "w1: ") {
		t.Errorf("error %v, want w1's only", err)
	}
	if strings.Join(asked, ",") != "m1,w1,w2" {
		t.Errorf("options asked for %v", asked)
	}
}

// TestScriptOnThisMachine runs the script with this machine's sh and checks the facts against
// what Go sees here: the script is real shell, so it is tested as such.
func TestScriptOnThisMachine(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the facts script reads Linux /proc")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "it's kubelet.conf") // quoting is part of the test
	data := []byte("hello kforge\n")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	o := Options{Hash: []string{file, filepath.Join(dir, "missing"), dir}, Dirs: []string{filepath.Join(dir, "missing"), dir, file}, CacheDir: t.TempDir()}
	sent := time.Now()
	out, err := exec.Command("sh", "-c", Script(o), "kforge-facts").Output()
	received := time.Now()
	if err != nil {
		t.Fatalf("script: %v", err)
	}
	f := mustParse(t, out)

	host, _ := os.Hostname()
	if f.Hostname != host || f.UID != os.Geteuid() || f.CPUs != runtime.NumCPU() {
		t.Errorf("hostname %q uid %d cpus %d; want %q %d %d", f.Hostname, f.UID, f.CPUs, host, os.Geteuid(), runtime.NumCPU())
	}
	if f.Clock.Before(sent.Add(-time.Second)) || f.Clock.After(received.Add(time.Second)) {
		t.Errorf("clock %v outside [%v, %v]", f.Clock, sent, received)
	}
	sum := sha256.Sum256(data)
	if len(f.Files) != 1 || f.Files[file] != hex.EncodeToString(sum[:]) {
		t.Errorf("files %v, want only %s", f.Files, file)
	}
	if len(f.Dirs) != 1 || f.Dirs[0] != dir {
		t.Errorf("dirs %q, want only %s", f.Dirs, dir)
	}
	// Values the script reads with the shell's own read (procfs files make dash's read return
	// 1 even when it read the line): each must match what Go reads.
	if ipf, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); err == nil && f.Sysctls["net.ipv4.ip_forward"] != strings.TrimSpace(string(ipf)) {
		t.Errorf("sysctl ip_forward %q, /proc says %q", f.Sysctls["net.ipv4.ip_forward"], ipf)
	}
	if b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled"); (err == nil && strings.TrimSpace(string(b)) == "Y") != f.LSM.AppArmor {
		t.Errorf("AppArmor %v, /sys/module/apparmor/parameters/enabled says %q (%v)", f.LSM.AppArmor, b, err)
	}
	if b, err := os.ReadFile("/sys/fs/selinux/enforce"); err == nil != (f.LSM.SELinux != "") {
		t.Errorf("SELinux %q, /sys/fs/selinux/enforce says %q (%v)", f.LSM.SELinux, b, err)
	}
	if rc, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		var ns []string
		for _, l := range strings.Split(string(rc), "\n") {
			if fs := strings.Fields(l); len(fs) >= 2 && fs[0] == "nameserver" {
				ns = append(ns, fs[1])
			}
		}
		if !slices.Equal(f.Resolver.Nameservers, ns) {
			t.Errorf("nameservers %q, /etc/resolv.conf says %q", f.Resolver.Nameservers, ns)
		}
	}
	if id, err := os.ReadFile("/etc/machine-id"); err == nil && f.MachineID != strings.TrimSpace(string(id)) {
		t.Errorf("machine id %q, /etc/machine-id says %q", f.MachineID, id)
	}
	if status, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(l, "CapEff:"); ok && fmt.Sprintf("%016x", f.CapEff) != strings.TrimSpace(v) {
				t.Errorf("CapEff %016x, /proc/self/status says %s", f.CapEff, strings.TrimSpace(v))
			}
		}
	}
	if ctl, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		for _, c := range strings.Fields(string(ctl)) {
			if !slices.Contains(f.Cgroup.V2Controllers, c) {
				t.Errorf("cgroup v2 controllers %q lack %s", f.Cgroup.V2Controllers, c)
			}
		}
	}
	mem, _ := os.ReadFile("/proc/meminfo")
	if !strings.Contains(string(mem), "MemTotal:") || f.MemoryBytes == 0 {
		t.Errorf("memory %d", f.MemoryBytes)
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil != (f.Cgroup.Version == CgroupV2) {
		t.Errorf("cgroup %q disagrees with /sys/fs/cgroup/cgroup.controllers (err %v)", f.Cgroup.Version, err)
	}
	ls := f.ListenersOn(port)
	if len(ls) != 1 || ls[0].Addr.String() != "127.0.0.1" {
		t.Fatalf("listeners on %d: %+v", port, ls)
	}
	if _, err := exec.LookPath("awk"); err == nil {
		self, _ := os.ReadFile("/proc/self/comm")
		if ls[0].PID != os.Getpid() || ls[0].Command != strings.TrimSpace(string(self)) {
			t.Errorf("listener held by %d (%s), want this test process %d (%s)", ls[0].PID, ls[0].Command, os.Getpid(), self)
		}
	}
	if p, err := exec.LookPath("mount"); err == nil {
		if b := f.Binaries["mount"]; b.Path == "" || b.Version == "" {
			t.Errorf("mount at %s reported as %+v", p, b)
		}
	}
}

// TestServiceRouteOnThisMachine: the script reports a route for an address that has one
// (loopback), and none in a network namespace of its own, which has no routes at all.
func TestServiceRouteOnThisMachine(t *testing.T) {
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("ip (iproute2) is not installed")
	}
	cache := t.TempDir()
	out, err := exec.Command("sh", "-c", Script(Options{ServiceAddress: "127.0.0.1", CacheDir: cache}), "kforge-facts").Output()
	if err != nil {
		t.Fatal(err)
	}
	if f := mustParse(t, out); f.ServiceRoute != RouteCovered {
		t.Errorf("route to 127.0.0.1: %q, want %q", f.ServiceRoute, RouteCovered)
	}
	if f := mustParse(t, mustRun(t, "sh", "-c", Script(Options{CacheDir: cache}), "kforge-facts")); f.ServiceRoute != RouteUnknown {
		t.Errorf("route not asked: %q, want %q", f.ServiceRoute, RouteUnknown)
	}
	if os.Geteuid() != 0 {
		t.Skip("a network namespace of its own needs root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare (util-linux) is not installed")
	}
	out = mustRun(t, "unshare", "--net", "sh", "-c", Script(Options{ServiceAddress: "10.96.0.1", CacheDir: cache}), "kforge-facts")
	if f := mustParse(t, out); f.ServiceRoute != RouteMissing {
		t.Errorf("route to 10.96.0.1 in an empty network namespace: %q, want %q", f.ServiceRoute, RouteMissing)
	}
}

// TestVersionCache: a binary runs for its version once; later runs read the host's cache
// until the file changes (replaced as kforge installs files: a new file renamed over it), and
// a host where the cache cannot be written still gets every version.
func TestVersionCache(t *testing.T) {
	bin, cache := t.TempDir(), filepath.Join(t.TempDir(), "cache")
	calls := filepath.Join(t.TempDir(), "calls")
	install := func(version string) {
		t.Helper()
		script := "#!/bin/sh\necho run >>" + remote.Quote(calls) + "\necho 'Kubernetes " + version + "'\n"
		if err := os.WriteFile(filepath.Join(bin, ".kubelet"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(bin, ".kubelet"), filepath.Join(bin, "kubelet")); err != nil {
			t.Fatal(err)
		}
	}
	gather := func(dir string) *Facts {
		t.Helper()
		cmd := exec.Command("sh", "-c", Script(Options{CacheDir: dir}), "kforge-facts")
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("script: %v", err)
		}
		return mustParse(t, out)
	}
	runs := func() int {
		data, _ := os.ReadFile(calls)
		return strings.Count(string(data), "run\n")
	}
	install("v1.36.3")
	for i := range 3 {
		f := gather(cache)
		if b := f.Binaries["kubelet"]; b.Path != filepath.Join(bin, "kubelet") || b.Version != "1.36.3" || b.Output != "Kubernetes v1.36.3" {
			t.Fatalf("gather %d: kubelet %+v", i, b)
		}
	}
	if n := runs(); n != 1 {
		t.Errorf("kubelet ran %d times for three gatherings, want once", n)
	}
	if fi, err := os.Stat(cache); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("cache dir: %v, %v; want mode 0700", fi, err)
	}
	install("v1.37.2")
	if v := gather(cache).Binaries["kubelet"].Version; v != "1.37.2" || runs() != 2 {
		t.Errorf("after replacing kubelet: version %q after %d runs, want 1.37.2 after 2", v, runs())
	}
	if v := gather(cache).Binaries["kubelet"].Version; v != "1.37.2" || runs() != 2 {
		t.Errorf("again: version %q after %d runs, want 1.37.2 from the cache", v, runs())
	}
	blocked := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocked, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if v := gather(filepath.Join(blocked, "cache")).Binaries["kubelet"].Version; v != "1.37.2" || runs() != 3+i {
			t.Errorf("without a cache, gather %d: version %q after %d runs, want 1.37.2 after %d", i, v, runs(), 3+i)
		}
	}
}

func mustRun(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out
}

// TestVIPOverRealARP: two network namespaces joined by a veth pair on 198.51.100.0/24; the
// second also holds 198.51.100.213. From the first, the script finds that address on its
// veth's subnet and the MAC that answered ARP for it (the second's); a free address of the
// subnet gets no answer; an address outside it is not on any interface's subnet. From the
// second, the address is here.
func TestVIPOverRealARP(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	for _, tool := range []string{"ip", "bash", "timeout"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	a, b := fmt.Sprintf("kfvipa%d", os.Getpid()), fmt.Sprintf("kfvipb%d", os.Getpid())
	for _, ns := range []string{a, b} {
		mustRun(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", ns).Run() })
	}
	mustRun(t, "ip", "-n", a, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", b)
	for _, c := range [][]string{
		{"-n", a, "addr", "add", "198.51.100.211/24", "dev", "va"},
		{"-n", a, "link", "set", "va", "up"},
		{"-n", b, "addr", "add", "198.51.100.212/24", "dev", "vb"},
		{"-n", b, "addr", "add", "198.51.100.213/32", "dev", "vb"},
		{"-n", b, "link", "set", "vb", "up"},
	} {
		mustRun(t, "ip", c...)
	}
	mac := strings.TrimSpace(string(mustRun(t, "ip", "netns", "exec", b, "cat", "/sys/class/net/vb/address")))
	cache := t.TempDir()
	gather := func(ns, vip string) VIP {
		t.Helper()
		return mustParse(t, mustRun(t, "ip", "netns", "exec", ns, "sh", "-c", Script(Options{VIP: vip, CacheDir: cache}), "kforge-facts")).VIP
	}
	if got := gather(a, "198.51.100.213"); got != (VIP{Device: "va", Neighbour: mac}) {
		t.Errorf("a VIP another host holds: %+v, want device va and neighbour %s", got, mac)
	}
	if got := gather(a, "198.51.100.214"); got != (VIP{Device: "va"}) {
		t.Errorf("a free VIP of the subnet: %+v, want device va and no neighbour", got)
	}
	if got := gather(a, "203.0.113.7"); got != (VIP{}) {
		t.Errorf("a VIP outside every subnet: %+v, want nothing", got)
	}
	if got := gather(b, "198.51.100.213"); got != (VIP{Here: true}) {
		t.Errorf("the VIP on the host itself: %+v, want Here", got)
	}
}
