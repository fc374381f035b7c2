package tasks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/remote/remotetest"
	"github.com/kforge/kforge/state"
)

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCleanIptablesOnRealRules: rules saved on a lab master running kube-proxy (iptables mode),
// kubelet and flannel, plus a user's own chain and rules: every KUBE-/FLANNEL- chain and every
// jump to one goes, the user's rules stay, and cleaning the result finds nothing.
func TestCleanIptablesOnRealRules(t *testing.T) {
	save := readFile(t, "testdata/reset-iptables-nft-save.txt")
	user := []string{
		":MY-CHAIN - [0:0]",
		`-A INPUT -s 203.0.113.0/24 -m comment --comment "not -j KUBE-SERVICES, a user's rule" -j DROP`,
		"-A FORWARD -j MY-CHAIN",
		"-A MY-CHAIN -p tcp --dport 22 -j ACCEPT",
	}
	// The user's chain and rules go into the filter table.
	save = strings.Replace(save, "*filter\n", "*filter\n"+user[0]+"\n", 1)
	i := strings.Index(save, "*filter\n")
	j := i + strings.Index(save[i:], "\nCOMMIT\n")
	save = save[:j] + "\n" + strings.Join(user[1:], "\n") + save[j:]

	restore, rules, chains := CleanIptables(save, resetChainPrefixes)
	// Counted on the lab: kforge reset reported "iptables-nft: 30 chains, 62 rules removed".
	if chains != 30 || rules != 62 {
		t.Errorf("removed %d chains and %d rules, want 30 and 62", chains, rules)
	}
	for _, l := range strings.Split(restore, "\n") {
		if strings.Contains(l, "KUBE-") && !strings.Contains(l, "not -j KUBE-SERVICES") || strings.Contains(l, "FLANNEL-") {
			t.Errorf("left in the restore input: %s", l)
		}
	}
	for _, l := range append(user, "*mangle", "*filter", "*nat", ":POSTROUTING ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]") {
		if !strings.Contains(restore, l+"\n") {
			t.Errorf("lost %q:\n%s", l, restore)
		}
	}
	if n := strings.Count(restore, "COMMIT\n"); n != 3 {
		t.Errorf("%d tables in the restore input, want mangle, filter and nat", n)
	}
	if again, r, c := CleanIptables(restore, resetChainPrefixes); again != "" || r != 0 || c != 0 {
		t.Errorf("second clean changed %d rules, %d chains:\n%s", r, c, again)
	}

	v6 := readFile(t, "testdata/reset-ip6tables-nft-save.txt")
	if _, r, c := CleanIptables(v6, resetChainPrefixes); r != 22 || c != 17 {
		t.Errorf("IPv6: %d rules, %d chains, want 22 and 17 (as on the lab)", r, c)
	}
}

// TestCleanIptablesLeavesOtherTablesAlone: a table without kforge's chains is not restored
// (iptables-restore would flush it), and a host without any is not touched at all.
func TestCleanIptablesLeavesOtherTablesAlone(t *testing.T) {
	save := "*raw\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j CT --notrack\nCOMMIT\n*nat\n:POSTROUTING ACCEPT [0:0]\n:CNI-HOSTPORT-MASQ - [0:0]\n-A POSTROUTING -g CNI-HOSTPORT-MASQ\n-A POSTROUTING -s 10.0.0.0/8 -j MASQUERADE\nCOMMIT\n"
	restore, rules, chains := CleanIptables(save, resetChainPrefixes)
	want := "*nat\n:POSTROUTING ACCEPT [0:0]\n-A POSTROUTING -s 10.0.0.0/8 -j MASQUERADE\nCOMMIT\n"
	if restore != want || rules != 1 || chains != 1 {
		t.Errorf("got %d rules %d chains:\n%s\nwant:\n%s", rules, chains, restore, want)
	}
	if restore, _, _ := CleanIptables("*raw\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n", resetChainPrefixes); restore != "" {
		t.Errorf("clean rules restored: %q", restore)
	}
}

// fakeNode is an in-memory host that holds what apply leaves (a running kubelet, containers,
// mounts, files, links, iptables rules) and answers reset's commands the way a real host would:
// the first reset reports each thing it removes, the next finds nothing.
type fakeNode struct {
	*remotetest.Host
	mu         sync.Mutex
	kubelet    bool
	containers int
	mounts     int
	files      []string
	links      []string
	iptables   map[string]string // tool → iptables-save output
	restores   []string          // tools restored
}

func newFakeNode(t *testing.T, n inventory.Node, dirty bool) *fakeNode {
	h := &fakeNode{Host: remotetest.New(n.Name), iptables: map[string]string{"iptables-nft": "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n", "iptables-legacy": ""}}
	if dirty {
		h.kubelet, h.containers, h.mounts, h.links = true, 5, 3, []string{"cni0", "flannel.1"}
		h.files = resetFiles(n.Role)
		h.iptables["iptables-nft"] = readFile(t, "testdata/reset-iptables-nft-save.txt")
	}
	h.OnPrefix("sh -c ", remotetest.Result{Stdout: readFile(t, "../facts/testdata/debian12-hybrid.txt")})
	on := func(cmd string, fn func(w io.Writer, stdin string) error) {
		h.Handle(func(c string) bool { return c == cmd }, func(_ context.Context, c remote.Cmd) error {
			in, _ := io.ReadAll(c.Stdin)
			h.mu.Lock()
			defer h.mu.Unlock()
			return fn(c.Stdout, string(in))
		})
	}
	on(stopKubeletScript, func(w io.Writer, _ string) error {
		if h.kubelet {
			fmt.Fprint(w, "changed kubelet stopped\nchanged kubelet disabled\n")
			h.kubelet = false
		}
		return nil
	})
	on(containersScript, func(w io.Writer, _ string) error {
		if h.containers > 0 {
			fmt.Fprintf(w, "changed %d containers removed\n", h.containers)
			h.containers = 0
		}
		return nil
	})
	on("systemctl restart containerd", func(io.Writer, string) error { return nil })
	on("systemctl daemon-reload", func(io.Writer, string) error { return nil })
	on(unmountScript, func(w io.Writer, _ string) error {
		if h.mounts > 0 {
			fmt.Fprintf(w, "changed %d mounts unmounted\n", h.mounts)
			h.mounts = 0
		}
		return nil
	})
	on(stopServiceRouteScript, func(w io.Writer, _ string) error {
		if slices.Contains(h.files, hostpath.ServiceRouteUnitPath) {
			fmt.Fprintf(w, "changed %s stopped (its route removed) and disabled\n", hostpath.ServiceRouteUnit)
		}
		return nil
	})
	for _, u := range resetUnits {
		on(stopUnitScript(u[0], u[1]), func(w io.Writer, _ string) error {
			if slices.Contains(h.files, u[1]) {
				fmt.Fprintf(w, "changed %s stopped and disabled\n", u[0])
			}
			return nil
		})
	}
	on(removeScript(resetFiles(n.Role), path.Dir(hostpath.KubeletDropInPath)), func(w io.Writer, _ string) error {
		if h.mounts > 0 {
			return h.Exit("rm", 1, "mounts remain under /var/lib/kubelet")
		}
		for _, f := range h.files {
			fmt.Fprintf(w, "changed removed %s\n", f)
		}
		h.files = nil
		return nil
	})
	on(networkScript, func(w io.Writer, _ string) error {
		for _, l := range h.links {
			fmt.Fprintf(w, "changed link %s deleted\n", l)
		}
		h.links = nil
		return nil
	})
	on(iptablesDumpScript, func(w io.Writer, _ string) error {
		for _, tool := range []string{"iptables-legacy", "iptables-nft"} {
			fmt.Fprintf(w, "#kforge-iptables %s\n%s", tool, h.iptables[tool])
		}
		return nil
	})
	for _, tool := range []string{"iptables-legacy", "iptables-nft"} {
		on(tool+"-restore -w 10", func(_ io.Writer, stdin string) error {
			h.iptables[tool] = restoreTables(h.iptables[tool], stdin)
			h.restores = append(h.restores, tool)
			return nil
		})
	}
	return h
}

// restoreTables is what iptables-restore does to saved rules: each table in restore replaces
// the table of that name; the others stay.
func restoreTables(old, restore string) string {
	tables := func(s string) (names []string, byName map[string]string) {
		byName = map[string]string{}
		for _, block := range strings.SplitAfter(s, "COMMIT\n") {
			i := strings.Index(block, "*")
			if i < 0 {
				continue
			}
			name, _, _ := strings.Cut(block[i+1:], "\n")
			names = append(names, name)
			byName[name] = block[i:]
		}
		return names, byName
	}
	names, have := tables(old)
	_, repl := tables(restore)
	var b strings.Builder
	for _, n := range names {
		if r, ok := repl[n]; ok {
			b.WriteString(r)
		} else {
			b.WriteString(have[n])
		}
	}
	return b.String()
}

func resetFleet(t *testing.T, dirty bool) (*Reset, map[string]*fakeNode, string) {
	t.Helper()
	c := cluster(t, "workers:\n  - {name: w1, address: 10.0.0.2}\n")
	dir := t.TempDir()
	hosts := map[string]*fakeNode{}
	for _, n := range c.Nodes() {
		hosts[n.Name] = newFakeNode(t, n, dirty)
	}
	a := NewReset(c, Options{State: state.At(dir), Connect: func(_ context.Context, n inventory.Node) (remote.Host, error) {
		return hosts[n.Name], nil
	}})
	return a, hosts, dir
}

// recorder keeps a run's events.
type recorder struct{ progress.Recorder }

func (r *recorder) report(e progress.Event) { r.Report(e) }

// hostLines returns task → host → message of the host-done events.
func (r *recorder) hostLines() map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, e := range r.Events() {
		if e.Kind == progress.HostDone {
			if out[e.Task] == nil {
				out[e.Task] = map[string]string{}
			}
			out[e.Task][e.Host] = e.Message
		}
	}
	return out
}

func TestResetStepsList(t *testing.T) {
	a, _, _ := resetFleet(t, false)
	var names []string
	for _, s := range a.Steps() {
		names = append(names, s.Name)
		if s.Scope == OnHosts && !slices.Equal(s.Hosts, []string{"m1", "w1"}) {
			t.Errorf("%s runs on %v, want every host", s.Name, s.Hosts)
		}
	}
	want := []string{"connect", "stop-kubelet", "containers", "unmount", "files", "network", "state"}
	if !slices.Equal(names, want) {
		t.Errorf("reset steps %v, want %v", names, want)
	}
	if slices.Contains(resetFiles(inventory.RoleWorker), hostpath.EtcdDataDir) || !slices.Contains(resetFiles(inventory.RoleMaster), hostpath.EtcdDataDir) {
		t.Errorf("etcd's data belongs to masters only: worker %v, master %v", resetFiles(inventory.RoleWorker), resetFiles(inventory.RoleMaster))
	}
}

// TestResetKeepsTheLocalVolumes: the directories the inventory keeps the local volumes out of
// (inventory.ResetDirs) are reset's, and the default directory of the volumes is none of what
// reset removes, nor inside it: reset keeps the users' data.
func TestResetKeepsTheLocalVolumes(t *testing.T) {
	all := append(resetFiles(inventory.RoleMaster), resetFiles(inventory.RoleWorker)...)
	for _, d := range inventory.ResetDirs {
		if !slices.Contains(all, d) {
			t.Errorf("inventory.ResetDirs names %s, which reset does not remove", d)
		}
	}
	for _, p := range all {
		if v := inventory.DefaultLocalVolumesPath; v == p || strings.HasPrefix(v, p+"/") || strings.HasPrefix(p, v+"/") {
			t.Errorf("reset removes %s, and the local volumes are in %s by default", p, v)
		}
	}
}

// TestResetTwiceOnFakeHosts: the first reset removes everything, restarts containerd only where
// it removed containers, reloads systemd only where it removed the unit, restores only the
// iptables variant that held kforge's chains (with them gone), and deletes the admin
// kubeconfig and token but keeps the PKI; the second reset finds nothing and changes nothing.
func TestResetTwiceOnFakeHosts(t *testing.T) {
	a, hosts, state := resetFleet(t, true)
	for _, f := range []string{"admin.conf", "bootstrap-token", "pki/ca.crt"} {
		os.MkdirAll(filepath.Dir(filepath.Join(state, f)), 0o700)
		if err := os.WriteFile(filepath.Join(state, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var r recorder
	if _, err := Run(context.Background(), a.Steps(), r.report, time.Now); err != nil {
		t.Fatal(err)
	}
	lines := r.hostLines()
	for _, name := range []string{"m1", "w1"} {
		h := hosts[name]
		cmds := h.Commands()
		for _, want := range []string{"systemctl restart containerd", "systemctl daemon-reload", "iptables-nft-restore -w 10"} {
			if !slices.Contains(cmds, want) {
				t.Errorf("%s: %q not run", name, want)
			}
		}
		if slices.Index(cmds, stopKubeletScript) > slices.Index(cmds, containersScript) || slices.Index(cmds, containersScript) > slices.Index(cmds, unmountScript) {
			t.Errorf("%s: kubelet must stop before containers go, and containers before unmounting: %q", name, cmds)
		}
		if !slices.Equal(h.restores, []string{"iptables-nft"}) {
			t.Errorf("%s: restored %v, want only iptables-nft (legacy held nothing)", name, h.restores)
		}
		if strings.Contains(h.iptables["iptables-nft"], "KUBE-") || !strings.Contains(h.iptables["iptables-nft"], "*filter") {
			t.Errorf("%s: rules after reset:\n%s", name, h.iptables["iptables-nft"])
		}
		if msg := lines["containers"][name]; msg != "5 containers removed, containerd restarted" {
			t.Errorf("%s: containers line %q", name, msg)
		}
		if msg := lines["network"][name]; !strings.Contains(msg, "link cni0 deleted") || !strings.Contains(msg, "iptables-nft: 30 chains, 62 rules removed") {
			t.Errorf("%s: network line %q", name, msg)
		}
	}
	if m, w := lines["files"]["m1"], lines["files"]["w1"]; !strings.Contains(m, hostpath.EtcdDataDir) || strings.Contains(w, hostpath.EtcdDataDir) || !strings.HasSuffix(m, "systemd reloaded") {
		t.Errorf("files lines: m1 %q, w1 %q", m, w)
	}
	for f, gone := range map[string]bool{"admin.conf": true, "bootstrap-token": true, "pki/ca.crt": false} {
		if _, err := os.Stat(filepath.Join(state, f)); errors.Is(err, os.ErrNotExist) != gone {
			t.Errorf("state %s: gone %v, want %v", f, !gone, gone)
		}
	}

	// Second reset: a fresh applier (a new kforge process) on the now clean hosts.
	before := map[string]int{}
	for name, h := range hosts {
		before[name] = len(h.Commands())
	}
	a2 := NewReset(a.inv, a.o)
	var r2 recorder
	if _, err := Run(context.Background(), a2.Steps(), r2.report, time.Now); err != nil {
		t.Fatalf("second reset: %v", err)
	}
	clean := map[string]string{"stop-kubelet": "kubelet not running", "containers": "no containers", "unmount": "nothing mounted", "files": "no files left", "network": "nothing left"}
	for task, byHost := range r2.hostLines() {
		if task == "connect" {
			continue
		}
		for host, msg := range byHost {
			if msg != clean[task] {
				t.Errorf("second reset, %s on %s: %q, want %q", task, host, msg, clean[task])
			}
		}
	}
	for name, h := range hosts {
		for _, c := range h.Commands()[before[name]:] {
			if c == "systemctl restart containerd" || c == "systemctl daemon-reload" || strings.Contains(c, "-restore") {
				t.Errorf("%s: second reset ran %q", name, c)
			}
		}
	}
	for _, e := range r2.Events() {
		if e.Kind == progress.Info && strings.HasPrefix(e.Message, "deleted") {
			t.Errorf("second reset deleted state: %s", e.Message)
		}
	}

	// --purge-state deletes the PKI, once.
	var r3 recorder
	o := a.o
	o.PurgeState = true
	purge := func() Step { steps := NewReset(a.inv, o).Steps(); return steps[len(steps)-1] }
	if p := purge(); p.Name != "purge-state" {
		t.Fatalf("last reset step with PurgeState: %s", p.Name)
	}
	if _, err := Run(context.Background(), []Step{purge(), purge()}, r3.report, time.Now); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(state, "pki")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("PKI still there after purge: %v", err)
	}
	if n := len(r3.Events()); n != 5 { // 2× started/done, one "deleted"
		t.Errorf("purge events %+v", r3.Events())
	}
}

// TestResetStopsOnAKubeletOutsideSystemd: a kubelet systemd does not manage would bring the
// containers back; reset names the host and stops before removing anything.
func TestResetStopsOnAKubeletOutsideSystemd(t *testing.T) {
	a, hosts, _ := resetFleet(t, true)
	hosts["w1"].On(stopKubeletScript, remotetest.Result{Stdout: "note kubelet-pid 4242\n"})
	_, err := Run(context.Background(), a.Steps(), progress.Discard, time.Now)
	var te *TaskError
	if !errors.As(err, &te) || te.Task != "stop-kubelet" || !strings.Contains(err.Error(), "w1: ") || !strings.Contains(err.Error(), "kubelet-pid 4242") {
		t.Fatalf("error %v, want stop-kubelet failing on w1 with the PID", err)
	}
	if slices.Contains(hosts["m1"].Commands(), containersScript) {
		t.Error("containers removed although a host failed the step before")
	}
}

// TestResetWithContainerdDown: a host where containerd does not run (apply stopped before
// starting it) is reset all the same, without a containerd restart.
func TestResetWithContainerdDown(t *testing.T) {
	a, hosts, _ := resetFleet(t, true)
	hosts["w1"].On(containersScript, remotetest.Result{Stdout: "note containerd not running\n"})
	var r recorder
	if _, err := Run(context.Background(), a.Steps(), r.report, time.Now); err != nil {
		t.Fatal(err)
	}
	if msg := r.hostLines()["containers"]["w1"]; msg != "containerd not running: no containers to remove" {
		t.Errorf("w1 containers line %q", msg)
	}
	if slices.Contains(hosts["w1"].Commands(), "systemctl restart containerd") {
		t.Error("containerd restarted on a host where it was not running")
	}
	if !strings.Contains(r.hostLines()["files"]["w1"], "removed /etc/kubernetes") {
		t.Errorf("w1 files line %q", r.hostLines()["files"]["w1"])
	}
}

// TestResetFailureNamesHostAndCommand: a failing remote command is the typed error, wrapped
// with its host; the other host's work in the same step still finishes.
func TestResetFailureNamesHostAndCommand(t *testing.T) {
	a, hosts, _ := resetFleet(t, true)
	hosts["m1"].On(networkScript, remotetest.Result{Stderr: "RTNETLINK answers: Operation not permitted", Exit: 2})
	_, err := Run(context.Background(), a.Steps(), progress.Discard, time.Now)
	var ce *remote.CommandError
	if !errors.As(err, &ce) || ce.Host != "m1" || ce.ExitCode != 2 {
		t.Fatalf("error %v, want m1's CommandError", err)
	}
	if !slices.Equal(hosts["w1"].restores, []string{"iptables-nft"}) {
		t.Errorf("w1's network step did not finish: restores %v", hosts["w1"].restores)
	}
}

// TestRemoveScriptWithThisMachinesShell runs the file-removal script with the local sh over a
// temporary tree: it removes files, directories and symlinks, empties a directory reached
// through a symlink (keeping the link), reports each, leaves a non-empty directory it was only
// to remove when empty, and a second run prints nothing.
func TestRemoveScriptWithThisMachinesShell(t *testing.T) {
	if _, err := exec.LookPath("mountpoint"); err != nil {
		t.Skip("mountpoint (util-linux) not installed")
	}
	dir := t.TempDir()
	mk := func(p string) {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, p), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk("etc/kubernetes/pki/ca.crt")
	mk("etc/kubernetes/manifests/etcd.yaml")
	mk("lib/kubelet/config.yaml")
	mk("unit.d/10-kforge.conf")
	mk("keep.d/other.conf")
	mk("it's here")
	if err := os.Symlink("/nonexistent", filepath.Join(dir, "dangling")); err != nil {
		t.Fatal(err)
	}
	mk("disk/kubelet/pods/p1/volume")
	if err := os.Symlink(filepath.Join(dir, "disk/kubelet"), filepath.Join(dir, "kubelet-link")); err != nil {
		t.Fatal(err)
	}
	paths := []string{dir + "/etc/kubernetes", dir + "/lib/kubelet", dir + "/unit.d/10-kforge.conf", dir + "/dangling", dir + "/it's here", dir + "/absent", dir + "/kubelet-link"}
	run := func(emptyDir string) string {
		out, err := exec.Command("sh", "-c", removeScript(paths, emptyDir)).CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return string(out)
	}
	out := run(dir + "/unit.d")
	for _, p := range append(slices.Clone(paths[:5]), dir+"/unit.d") {
		if !strings.Contains(out, "changed removed "+p+"\n") {
			t.Errorf("not reported: %s\n%s", p, out)
		}
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there", p)
		}
	}
	if !strings.Contains(out, "changed emptied "+dir+"/kubelet-link\n") {
		t.Errorf("symlinked directory not reported as emptied:\n%s", out)
	}
	if ents, err := os.ReadDir(filepath.Join(dir, "disk/kubelet")); err != nil || len(ents) != 0 {
		t.Errorf("symlinked directory: the link must stay and its target be emptied: %v %v", ents, err)
	}
	if out := run(dir + "/keep.d"); out != "" {
		t.Errorf("second run printed %q", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "keep.d/other.conf")); err != nil {
		t.Errorf("a non-empty directory was removed: %v", err)
	}
}
