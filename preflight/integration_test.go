package preflight

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/internal/testenv"

	"github.com/kforge/kforge/facts"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/remote"
)

const labName = "preflight"

func dial(t *testing.T, l *lab.Lab, h lab.Host, user string, sudo remote.SudoMode) *remote.SSH {
	t.Helper()
	s, err := remote.Dial(context.Background(), remote.Config{
		Name: h.Name, Address: h.Address, Port: h.Port, User: user, Sudo: sudo,
		IdentityFile: l.IdentityFile, KnownHostsFile: l.KnownHostsFile, DialRetry: 20 * time.Second,
	}, remote.Options{SSHConfigFile: "none", Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatalf("ssh %s@%s: %v", user, h.Name, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func labExec(t *testing.T, l *lab.Lab, host string, argv ...string) string {
	t.Helper()
	out, err := l.Exec(context.Background(), host, argv...)
	if err != nil {
		t.Fatalf("%s: %v", host, err)
	}
	return strings.TrimSpace(string(out))
}

// TestFactsAndPreflightOnLab gathers real facts over real SSH from two lab hosts (systemd-nspawn
// on this machine's kernel) and checks them against what the hosts say through another path
// (nsenter), then runs preflight: a port taken with socat on the master fails Port-6443 naming
// socat's PID, and nothing else fails; once socat is gone, preflight passes. A non-root login
// without sudo fails IsPrivilegedUser.
func TestFactsAndPreflightOnLab(t *testing.T) {
	testenv.Require(t, lab.Prerequisites())
	ctx := context.Background()
	if err := lab.Down(ctx, labName, nil); err != nil {
		t.Fatalf("tearing down a leftover lab: %v", err)
	}
	l, err := lab.Up(ctx, lab.Options{Name: labName, Hosts: 2, Masters: 1, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)), Report: testenv.Report(t)})
	if err != nil {
		t.Fatalf("lab up: %v", err)
	}
	t.Cleanup(func() {
		if err := lab.Down(context.Background(), labName, nil); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	m, w := l.Hosts[0], l.Hosts[1]
	hm, hw := dial(t, l, m, "root", ""), dial(t, l, w, "root", "")

	// A port of the API server taken by someone else.
	out, err := remote.Output(ctx, hm, "setsid socat TCP-LISTEN:6443,reuseaddr,fork /dev/null </dev/null >/dev/null 2>&1 & echo $!")
	if err != nil {
		t.Fatal(err)
	}
	socatPID, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("socat pid %q", out)
	}
	data := []byte("kforge preflight integration\n")
	if err := hm.Upload(ctx, remote.Bytes("/etc/kforge-test/hashed", data, 0o644)); err != nil {
		t.Fatal(err)
	}
	// Wait until socat listens (it was started in the background).
	deadline := time.Now().Add(10 * time.Second)
	for {
		if out, _ := remote.Output(ctx, hm, "grep -c ':192B .* 0A ' /proc/net/tcp /proc/net/tcp6 | grep -v ':0$' || true"); len(bytes.TrimSpace(out)) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("socat never listened on 6443")
		}
		time.Sleep(100 * time.Millisecond)
	}

	hash := []string{"/etc/kforge-test/hashed", "/etc/kforge-test/missing"}
	start := time.Now()
	all, err := facts.GatherAll(ctx, []remote.Host{hm, hw}, remote.Limits{}, func(string) facts.Options { return facts.Options{Hash: hash} })
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	t.Logf("facts of 2 hosts over SSH in %s (one round trip each)", time.Since(start).Round(time.Millisecond))

	machineCgroupV2 := false
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		machineCgroupV2 = true
	}
	uname, _ := exec.Command("uname", "-r").Output()
	machineHasSysResource := true
	if st, err := os.ReadFile("/proc/1/status"); err == nil {
		for _, line := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
				capEff, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
				machineHasSysResource = capEff&(1<<facts.CapSysResource) != 0
			}
		}
	}

	for _, h := range l.Hosts {
		f := all[h.Name]
		if f == nil {
			t.Fatalf("no facts for %s", h.Name)
		}
		if f.Hostname != h.Name || f.UID != 0 || !f.Systemd || f.OS.ID != "debian" || f.OS.VersionID != "12" {
			t.Errorf("%s: hostname %q uid %d systemd %v os %+v", h.Name, f.Hostname, f.UID, f.Systemd, f.OS)
		}
		if f.Kernel != strings.TrimSpace(string(uname)) {
			t.Errorf("%s: kernel %q, the machine runs %q", h.Name, f.Kernel, uname)
		}
		if f.Cgroup.V1() == machineCgroupV2 {
			t.Errorf("%s: cgroup %+v, machine cgroup v2 %v", h.Name, f.Cgroup, machineCgroupV2)
		}
		if want := labExec(t, l, h.Name, "nproc"); strconv.Itoa(f.CPUs) != want {
			t.Errorf("%s: %d CPUs, nproc says %s", h.Name, f.CPUs, want)
		}
		meminfo := labExec(t, l, h.Name, "grep", "^MemTotal:", "/proc/meminfo")
		if kb := strings.Fields(meminfo)[1]; strconv.FormatUint(f.MemoryBytes/1024, 10) != kb {
			t.Errorf("%s: memory %d bytes, /proc/meminfo %q", h.Name, f.MemoryBytes, meminfo)
		}
		swaps := labExec(t, l, h.Name, "cat", "/proc/swaps")
		if on := strings.Count(swaps, "\n") > 0; on != f.Swap.On {
			t.Errorf("%s: swap on %v, /proc/swaps %q", h.Name, f.Swap.On, swaps)
		}
		if want := labExec(t, l, h.Name, "cat", "/etc/machine-id"); f.MachineID != want {
			t.Errorf("%s: machine-id %q, want %q", h.Name, f.MachineID, want)
		}
		if want := labExec(t, l, h.Name, "cat", "/proc/sys/net/ipv4/ip_forward"); f.Sysctls["net.ipv4.ip_forward"] != want {
			t.Errorf("%s: ip_forward %q, want %q", h.Name, f.Sysctls["net.ipv4.ip_forward"], want)
		}
		if !machineHasSysResource && f.HasCapSysResource() {
			t.Errorf("%s: CAP_SYS_RESOURCE reported (CapEff %x) on a machine without it", h.Name, f.CapEff)
		}
		if ls := f.ListenersOn(22); len(ls) == 0 || ls[0].Command != "sshd" || ls[0].PID == 0 {
			t.Errorf("%s: port 22 listeners %v, want sshd", h.Name, ls)
		}
		for _, b := range []string{"containerd", "runc", "ctr", "socat", "iptables", "conntrack", "ebtables", "ethtool", "nsenter", "mount", "losetup", "ip", "cp", "sha256sum", "systemctl"} {
			if f.Binaries[b].Path == "" || f.Binaries[b].Version == "" {
				t.Errorf("%s: %s: %+v", h.Name, b, f.Binaries[b])
			}
		}
		if _, ok := f.Binaries["kubelet"]; ok {
			t.Errorf("%s: kubelet reported on a fresh lab host: %+v", h.Name, f.Binaries["kubelet"])
		}
		if !f.Runtime.Answering || !strings.HasPrefix(f.Runtime.Version, f.Binaries["containerd"].Version) {
			t.Errorf("%s: runtime %+v, containerd %+v", h.Name, f.Runtime, f.Binaries["containerd"])
		}
		if skew, unc := f.ClockSkew(); skew > time.Second+unc || skew < -time.Second-unc {
			t.Errorf("%s: clock skew %v ± %v on the same machine", h.Name, skew, unc)
		}
	}
	fm := all[m.Name]
	if ls := fm.ListenersOn(6443); len(ls) == 0 || ls[0].PID != socatPID || ls[0].Command != "socat" {
		t.Errorf("port 6443 listeners %v, want socat PID %d", ls, socatPID)
	}
	sum := sha256.Sum256(data)
	if len(fm.Files) != 1 || fm.Files["/etc/kforge-test/hashed"] != hex.EncodeToString(sum[:]) {
		t.Errorf("files %v", fm.Files)
	}

	c, err := inventory.Load(l.InventoryFile)
	if err != nil {
		t.Fatal(err)
	}
	c.Bundle = "bundle" // kubelet comes from a bundle: the lab hosts have none
	fs := Check(c, all, Options{BundleArch: "amd64"})
	for _, f := range fs {
		t.Log(f.String())
	}
	errs := fs.Errors()
	if len(errs) != 1 || errs[0].Host != m.Name || errs[0].Check != "Port-6443" || !strings.Contains(errs[0].Seen, "by PID "+strconv.Itoa(socatPID)+" (socat)") {
		t.Fatalf("errors %v, want only Port-6443 on %s held by socat", errs, m.Name)
	}
	if c.Kubelet.AllowCgroupV1 != !machineCgroupV2 {
		t.Fatalf("lab inventory allowCgroupV1 %v on a machine with cgroup v2 %v", c.Kubelet.AllowCgroupV1, machineCgroupV2)
	}
	c.Kubelet.AllowCgroupV1 = false
	if !machineCgroupV2 && !hasError(Check(c, all, Options{}), m.Name, CheckSystem) {
		t.Error("cgroup v1 without allowCgroupV1 is not an error")
	}
	c.Kubelet.AllowCgroupV1 = !machineCgroupV2

	// socat gone: the same hosts pass.
	if err := hm.Run(ctx, remote.Cmd{Command: "kill " + strconv.Itoa(socatPID)}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		all[m.Name], err = facts.Gather(ctx, hm, facts.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(all[m.Name].ListenersOn(6443)) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("port 6443 still in use after killing socat")
		}
	}
	if err := Check(c, all, Options{}).Err(); err != nil {
		t.Errorf("preflight after socat stopped: %v", err)
	}

	// A re-run: "kube-apiserver" (socat under that name) holds 6443. Without kforge's marker it
	// is someone else's API server; with this cluster's marker it is kforge's own; with another
	// cluster's marker it is not.
	out, err = remote.Output(ctx, hm, "cp \"$(command -v socat)\" /usr/local/bin/kube-apiserver && "+
		"{ setsid kube-apiserver TCP-LISTEN:6443,reuseaddr,fork /dev/null </dev/null >/dev/null 2>&1 & echo $!; }")
	if err != nil {
		t.Fatal(err)
	}
	apiPID := strings.TrimSpace(string(out))
	t.Cleanup(func() { hm.Run(context.Background(), remote.Cmd{Command: "kill " + apiPID}) })
	gatherM := func(listening bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			all[m.Name], err = facts.Gather(ctx, hm, facts.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if (len(all[m.Name].ListenersOn(6443)) > 0) == listening {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("port 6443 listening is not %v", listening)
			}
		}
	}
	gatherM(true)
	if errs := Check(c, all, Options{}).Errors(); len(errs) != 1 || errs[0].Check != "Port-6443" || !strings.Contains(errs[0].Seen, "by PID "+apiPID+" (kube-apiserver)") {
		t.Errorf("kube-apiserver without kforge's marker: errors %v, want Port-6443", errs)
	}
	upload := func(path string, data []byte) {
		t.Helper()
		if err := hm.Upload(ctx, remote.Bytes(path, data, 0o600)); err != nil {
			t.Fatal(err)
		}
	}
	upload(hostpath.ManifestsDir+"/kube-apiserver.yaml", []byte("# not a pod: kubelet does not run here\n"))
	upload(hostpath.ManifestsMarkerPath, facts.ManifestsMarker(c.Name, []string{"kube-apiserver.yaml"}))
	gatherM(true)
	fs = Check(c, all, Options{})
	if err := fs.Err(); err != nil {
		t.Errorf("kforge's own kube-apiserver on a re-run: %v", err)
	}
	if !strings.Contains(lines(fs), "[INFO Port-6443] "+m.Name+": port 6443 is held by kforge's own kube-apiserver") {
		t.Errorf("no INFO for kforge's own kube-apiserver:\n%s", lines(fs))
	}
	upload(hostpath.ManifestsMarkerPath, facts.ManifestsMarker("another", []string{"kube-apiserver.yaml"}))
	gatherM(true)
	if !hasError(Check(c, all, Options{}), m.Name, "Port-6443") || !hasError(Check(c, all, Options{}), m.Name, CheckManifestsDir) {
		t.Errorf("another cluster's marker passed:\n%s", lines(Check(c, all, Options{})))
	}

	// A login that is not root, without sudo: commands run as that user.
	labExec(t, l, w.Name, "sh", "-c", "useradd -m -s /bin/sh kfuser && mkdir -p ~kfuser/.ssh && cp /root/.ssh/authorized_keys ~kfuser/.ssh/ && chown -R kfuser ~kfuser/.ssh")
	hu := dial(t, l, w, "kfuser", remote.SudoNone)
	fu, err := facts.Gather(ctx, hu, facts.Options{})
	if err != nil {
		t.Fatal(err)
	}
	all[w.Name] = fu
	if fu.UID == 0 || !hasError(Check(c, all, Options{}), w.Name, CheckPrivilegedUser) {
		t.Errorf("uid %d as kfuser; want an IsPrivilegedUser error", fu.UID)
	}
}

func hasError(fs Findings, host, check string) bool {
	for _, f := range fs.Errors() {
		if f.Host == host && f.Check == check {
			return true
		}
	}
	return false
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
