package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// systemdStub answers systemctl show/is-enabled/is-active as a unit in state would.
func systemdStub(load, active string, enabled bool) string {
	en := "exit 1"
	if enabled {
		en = "exit 0"
	}
	return `case "$*" in
*LoadState*) echo ` + load + `;;
*ActiveState*) echo ` + active + `;;
is-enabled*) ` + en + `;;
is-active*) [ ` + active + ` = active ] || exit 3;;
esac`
}

func TestResetStopKubelet(t *testing.T) {
	for _, c := range []struct {
		load, active string
		enabled      bool
		pgrep        string
		want, calls  string
	}{
		{"loaded", "active", true, "", "changed kubelet stopped\nchanged kubelet disabled\n",
			"systemctl stop kubelet.service\nsystemctl disable -q kubelet.service\n"},
		{"loaded", "failed", false, "", "", "systemctl stop kubelet.service\n"},
		{"not-found", "inactive", false, "", "", ""},
		// A kubelet outside systemd, in this PID namespace (this test's process stands for it).
		{"not-found", "inactive", false, "echo " + strconv.Itoa(os.Getpid()), "note kubelet-pid " + strconv.Itoa(os.Getpid()) + "\n", ""},
	} {
		s := newSandbox(t)
		s.stub("systemctl", systemdStub(c.load, c.active, c.enabled))
		s.stub("pgrep", c.pgrep)
		out := s.mustRun(Command("reset-stop-kubelet"), "")
		var calls []string
		for _, l := range strings.Split(s.calls(), "\n") {
			if strings.HasPrefix(l, "systemctl stop") || strings.HasPrefix(l, "systemctl disable") {
				calls = append(calls, l+"\n")
			}
		}
		if out != c.want || strings.Join(calls, "") != c.calls {
			t.Errorf("%s %s: printed %q and ran %q; want %q and %q", c.load, c.active, out, calls, c.want, c.calls)
		}
	}
}

// ctrStub is a containerd with containers c1 and c2 and sandbox s1 in k8s.io; version exits
// with versionExit.
func ctrStub(versionExit int) string {
	return `case "$*" in
*" version") exit ` + strconv.Itoa(versionExit) + `;;
"-n k8s.io containers ls -q") printf 'c1\nc2\n';;
"sandboxes --help") ;;
"-n k8s.io sandboxes ls") printf 'SANDBOX CREATED\ns1 now\n';;
esac`
}

func TestResetContainers(t *testing.T) {
	s := newSandbox(t)
	s.stub("ctr", ctrStub(0))
	s.stub("pgrep", "")
	want := "changed 2 containers removed\nchanged 1 sandboxes removed\n"
	if out := s.mustRun(Command("reset-containers"), ""); out != want {
		t.Errorf("got %q, want %q", out, want)
	}
	for _, c := range []string{"ctr -n k8s.io tasks kill -s SIGKILL c2", "ctr -n k8s.io tasks rm -f c1", "ctr -n k8s.io containers rm c2", "ctr -n k8s.io sandboxes rm -f s1"} {
		if !strings.Contains(s.calls(), c+"\n") {
			t.Errorf("did not run %q; ran\n%s", c, s.calls())
		}
	}

	down := newSandbox(t)
	down.stub("ctr", ctrStub(1))
	down.stub("pgrep", "")
	if out := down.mustRun(Command("reset-containers"), ""); out != "note containerd not running\n" {
		t.Errorf("containerd down: %q", out)
	}

	none := newSandbox(t)
	none.path = "" // no ctr anywhere
	if out := none.mustRun(Command("reset-containers"), ""); out != "note ctr not installed\n" {
		t.Errorf("no ctr: %q", out)
	}
}

// TestResetUnmount: the pods' network namespace files go; nothing mounted, nothing unmounted.
// As root, a real mount below the kubelet's directory (in a mount namespace of the test's own)
// is unmounted too.
func TestResetUnmount(t *testing.T) {
	s := newSandbox(t)
	kd := s.file("kubelet")
	if err := os.MkdirAll(filepath.Join(kd, "pods/p1/volumes/v"), 0o755); err != nil {
		t.Fatal(err)
	}
	s.write("netns/cni-1", "")
	s.write("netns/cni-2", "")
	s.write("netns/other", "")
	cmd := Command("reset-unmount", "kubelet_dir", kd, "netns_prefix", s.file("netns/cni-"))
	if out := s.mustRun(cmd, ""); out != "changed 2 network namespaces removed\n" {
		t.Errorf("got %q", out)
	}
	if left, _ := filepath.Glob(s.file("netns/*")); len(left) != 1 || filepath.Base(left[0]) != "other" {
		t.Errorf("left %q, want only other", left)
	}
	if os.Geteuid() != 0 {
		return
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		return
	}
	vol := filepath.Join(kd, "pods/p1/volumes/v")
	out, err := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c",
		"mount -t tmpfs none "+vol+" && "+cmd+" && ! grep -q "+vol+" /proc/mounts").CombinedOutput()
	if err != nil || string(out) != "changed 1 mounts unmounted\n" {
		t.Errorf("with a volume mounted: %v %q", err, out)
	}
}

// TestResetRemove: files and directories go; a symlinked directory is emptied and kept; the
// empty directory goes; the facts' cache goes without a word.
func TestResetRemove(t *testing.T) {
	s := newSandbox(t)
	kd := s.file("kubelet")
	s.write("kubelet/pods/x", "")
	s.write("etc/kubernetes/admin.conf", "")
	s.write("disk/etcd/member/wal", "")
	if err := os.Symlink(s.file("disk/etcd"), s.file("etcd")); err != nil {
		t.Fatal(err)
	}
	s.write("it's a unit", "")
	s.write("cache/kubelet", "")
	if err := os.Mkdir(s.file("dropins"), 0o755); err != nil {
		t.Fatal(err)
	}
	paths := Lines([]string{s.file("etc/kubernetes"), kd, s.file("etcd"), s.file("it's a unit"), s.file("missing")})
	cmd := Command("reset-remove", "kubelet_dir", kd, "paths", paths, "empty_dir", s.file("dropins"), "facts_cache", s.file("cache"))
	want := "changed removed " + s.file("etc/kubernetes") + "\nchanged removed " + kd + "\nchanged emptied " + s.file("etcd") +
		"\nchanged removed " + s.file("it's a unit") + "\nchanged removed " + s.file("dropins") + "\n"
	if out := s.mustRun(cmd, ""); out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	for p, want := range map[string]bool{"disk/etcd": true, "disk/etcd/member": false, "etcd": true, "cache": false, "kubelet": false} {
		if _, err := os.Lstat(s.file(p)); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", p, err == nil, want)
		}
	}
	if out := s.mustRun(cmd, ""); out != "" {
		t.Errorf("again: %q, want nothing", out)
	}
}

func TestResetNetwork(t *testing.T) {
	s := newSandbox(t)
	s.stub("ip", `case "$*" in "link show dev cni0"|"link show dev flannel-v6.1") ;; "link show dev"*) exit 1;; esac`)
	s.stub("nft", `case "$*" in "list table ip kube-proxy"|"list table ip flannel-ipv4"|"list table inet kube-network-policies"|delete*) ;; *) exit 1;; esac`)
	conf := s.write("net.d/10-kforge.conflist", "{}")
	s.write("cni/networks/kforge/10.244.0.2", "")
	s.write("cni/networks/other/10.9.0.2", "")
	s.write("cni/results/kforge-abc-eth0", "")
	s.write("cni/results/cni-loopback-abc-lo", "")
	s.write("flannel/subnet.env", "")
	cmd := Command("reset-network", "cni_conf", conf, "cni_network", "kforge", "cni_state", s.file("cni"), "flannel_run", s.file("flannel"))
	want := "changed link cni0 deleted\nchanged link flannel-v6.1 deleted\nchanged removed " + conf + "\nchanged removed " + s.file("flannel") +
		"\nchanged removed " + s.file("cni/networks/kforge") + "\nchanged removed CNI results\nchanged nft table ip kube-proxy deleted\nchanged nft table ip flannel-ipv4 deleted\nchanged nft table inet kube-network-policies deleted\n"
	if out := s.mustRun(cmd, ""); out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	if left, _ := filepath.Glob(s.file("cni/*/*")); len(left) != 1 || !strings.HasSuffix(left[0], "other") {
		t.Errorf("left %q, want only the other network", left)
	}
	if !strings.Contains(s.calls(), "ip link delete dev cni0\n") || !strings.Contains(s.calls(), "nft delete table ip kube-proxy\n") {
		t.Errorf("calls\n%s", s.calls())
	}
}

// TestResetIptablesDump: each variant's rules after its own line; plain iptables-save only
// when there is no variant.
func TestResetIptablesDump(t *testing.T) {
	s := newSandbox(t)
	s.path = "" // only the stubs
	s.stub("iptables-legacy-save", "echo '*filter'")
	s.stub("ip6tables-nft-save", "echo '*nat'")
	s.stub("iptables-save", "echo plain")
	want := "#kforge-iptables iptables-legacy\n*filter\n#kforge-iptables ip6tables-nft\n*nat\n"
	if out := s.mustRun(Command("reset-iptables-dump"), ""); out != want {
		t.Errorf("got %q, want %q", out, want)
	}
	plain := newSandbox(t)
	plain.path = ""
	plain.stub("iptables-save", "echo plain")
	if out := plain.mustRun(Command("reset-iptables-dump"), ""); out != "#kforge-iptables iptables\nplain\n" {
		t.Errorf("plain: %q", out)
	}
}
