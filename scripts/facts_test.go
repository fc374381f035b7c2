package scripts

import (
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The facts scripts are rows of package facts' table; facts' own tests parse their output on
// this machine. These check each one's lines directly.

func TestFactsIdentity(t *testing.T) {
	s := newSandbox(t)
	out := s.mustRun(Command("facts-identity"), "")
	host, _ := os.Hostname()
	arch, _ := exec.Command("uname", "-m").Output()
	kernel, _ := exec.Command("uname", "-r").Output()
	want := fmt.Sprintf("uid=%d\nhostname=%s\narch=%s\nkernel=%s\n", os.Geteuid(), host, strings.TrimSpace(string(arch)), strings.TrimSpace(string(kernel)))
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
}

// TestFactsListeners: a socket this test listens on is printed as /proc/net/tcp has it, and
// this process is named as its holder.
func TestFactsListeners(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	out := newSandbox(t).mustRun(Command("facts-listeners"), "")
	var inode string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 11 && f[0] == "tcp" && f[2] == fmt.Sprintf("0100007F:%04X", port) {
			inode = f[10]
		}
	}
	if inode == "" {
		t.Fatalf("no tcp line for 127.0.0.1:%d in\n%s", port, out)
	}
	if _, err := exec.LookPath("awk"); err != nil {
		return
	}
	if want := fmt.Sprintf("sock %s %d ", inode, os.Getpid()); !strings.Contains(out, want) {
		t.Errorf("no %q line (this process holds the socket) in\n%s", want, out)
	}
}

// TestFactsBinaries: a binary found on PATH is printed with its version output, asked with its
// own arguments; the next run reads the cache instead of running it, until the file changes.
func TestFactsBinaries(t *testing.T) {
	s := newSandbox(t)
	s.stub("kubeadm", `echo "kubeadm v1.36.3 asked $*"`)
	cache := s.file("cache")
	cmd := Command("facts-binaries", "binaries", "kubeadm kforge-no-such-binary", "cache", cache)
	kubeadm := filepath.Join(s.bin, "kubeadm")
	want := "bin kubeadm " + kubeadm + "\nver kubeadm kubeadm v1.36.3 asked version -o short\n"
	for i := range 2 {
		if out := s.mustRun(cmd, ""); out != want {
			t.Errorf("run %d:\n%s\nwant\n%s", i, out, want)
		}
	}
	if n := strings.Count(s.calls(), "kubeadm "); n != 1 {
		t.Errorf("kubeadm ran %d times in two runs, want once (then the cache)", n)
	}
	if fi, err := os.Stat(cache); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("cache: %v %v, want a 0700 directory", fi, err)
	}
	s.stub("kubeadm", `echo "kubeadm v1.37.0"`)
	if out := s.mustRun(cmd, ""); !strings.Contains(out, "ver kubeadm kubeadm v1.37.0\n") {
		t.Errorf("after kubeadm changed:\n%s", out)
	}
}

// TestFactsRuntime: no socket, only its path; a socket that ctr gets an answer on, all of it.
func TestFactsRuntime(t *testing.T) {
	s := newSandbox(t)
	sock := s.file("containerd.sock")
	if out := s.mustRun(Command("facts-runtime", "socket", sock), ""); out != "runtime socket "+sock+"\n" {
		t.Errorf("without a socket: %q", out)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s.stub("ctr", `printf 'Client:\n  Version: v2.1.4\nServer:\n  Version: v2.1.4\n'`)
	want := "runtime socket " + sock + "\nruntime exists\nruntime answering\nctr Client:\nctr   Version: v2.1.4\nctr Server:\nctr   Version: v2.1.4\n"
	if out := s.mustRun(Command("facts-runtime", "socket", sock), ""); out != want {
		t.Errorf("answering:\n%s\nwant\n%s", out, want)
	}
	if !strings.Contains(s.calls(), "ctr --address "+sock+" version") {
		t.Errorf("ctr calls %q", s.calls())
	}
}

func TestFactsManifests(t *testing.T) {
	s := newSandbox(t)
	dir := s.file("manifests")
	cmd := Command("facts-manifests", "manifests_dir", dir, "marker", filepath.Join(dir, ".kforge-manifests"))
	if out := s.mustRun(cmd, ""); out != "" {
		t.Errorf("no directory: %q", out)
	}
	s.write("manifests/etcd.yaml", "")
	s.write("manifests/.kforge-manifests", "cluster demo\nfile etcd.yaml") // no last newline
	want := "manifests exists\nmanifest .kforge-manifests\nmanifest etcd.yaml\nmarker cluster demo\nmarker file etcd.yaml\n"
	if out := s.mustRun(cmd, ""); out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
}

// TestFactsVIP: the address on an interface; on a subnet with a neighbour that answered; on no
// subnet of the host's.
func TestFactsVIP(t *testing.T) {
	for _, c := range []struct{ ip, want string }{
		{`case "$*" in *"addr show"*) echo "2: eth0    inet 10.0.0.5/24 brd 10.0.0.255";; esac`, "viphere=1\n"},
		{`case "$*" in *"route get"*) echo "10.0.0.5 dev eth0 src 10.0.0.2 uid 0";; *"neigh show"*) echo "10.0.0.5 dev eth0 lladdr 52:54:00:12:34:56 REACHABLE";; esac`,
			"vipdev=eth0\nvipmac=52:54:00:12:34:56\n"},
		{`case "$*" in *"route get"*) echo "10.0.0.5 via 192.168.1.1 dev eth0 src 192.168.1.2";; esac`, ""},
	} {
		s := newSandbox(t)
		s.stub("ip", c.ip)
		s.stub("bash", "") // the connection attempt that makes the kernel ask ARP
		if out := s.mustRun(Command("facts-vip", "vip", "10.0.0.5"), ""); out != c.want {
			t.Errorf("ip saying %s: %q, want %q", c.ip, out, c.want)
		}
	}
}

// TestFactsAddrs: each global address with its device (ip -o pads with spaces, and marks IPv6
// ones nodad or not); nothing at all when ip is missing, so that preflight does not take "no
// addresses" for a fact.
func TestFactsAddrs(t *testing.T) {
	s := newSandbox(t)
	s.stub("ip", `printf '%s\n' '2: eth0    inet 198.51.100.12/25 scope global eth0\       valid_lft forever preferred_lft forever' \
  '2: eth0    inet6 2001:db8:100::12/64 scope global nodad \       valid_lft forever preferred_lft forever' \
  '5: eth1    inet 192.168.9.3/24 brd 192.168.9.255 scope global dynamic eth1\       valid_lft 86000sec preferred_lft 86000sec'`)
	flags := s.write("kubeadm-flags.env", `KUBELET_KUBEADM_ARGS="--hostname-override=w1 --node-ip=198.51.100.12,2001:db8:100::12 --pod-max-pids=4096"`+"\n")
	want := "addrs=1\naddr 198.51.100.12 eth0\naddr 2001:db8:100::12 eth0\naddr 192.168.9.3 eth1\nnodeip=198.51.100.12,2001:db8:100::12\n"
	if out := s.mustRun(Command("facts-addrs", "kubelet_flags", flags), ""); out != want {
		t.Errorf("got %q, want %q", out, want)
	}
	none := newSandbox(t)
	none.path = "" // only the stubs: no ip, and no kubelet flags
	if out := none.mustRun(Command("facts-addrs", "kubelet_flags", none.file("missing")), ""); out != "" {
		t.Errorf("without ip: %q, want nothing", out)
	}
}

func TestFactsSumsAndDirs(t *testing.T) {
	s := newSandbox(t)
	file := s.write("it's here", "hello\n")
	paths := Lines([]string{file, s.file("missing"), s.dir})
	sum := sha256.Sum256([]byte("hello\n"))
	if out, want := s.mustRun(Command("facts-sums", "paths", paths), ""), fmt.Sprintf("sum %x %s\n", sum, file); out != want {
		t.Errorf("sums %q, want %q", out, want)
	}
	if out, want := s.mustRun(Command("facts-dirs", "dirs", paths), ""), "dir "+s.dir+"\n"; out != want {
		t.Errorf("dirs %q, want %q", out, want)
	}
}

// TestFactsFirewall: firewalld's default zone and the ports it lets in, given as ports or
// through services (the zone named: firewalld 1.x warns on stdout otherwise, once a source is in
// another zone), and its trusted zone's sources; ufw's status lines; none when neither runs.
func TestFactsFirewall(t *testing.T) {
	s := newSandbox(t)
	if out := s.mustRun(Command("facts-firewall"), ""); out != "firewall=none\n" {
		t.Errorf("no firewall: %q", out)
	}
	s.stub("firewall-cmd", `case "$*" in
--state) echo running;;
--get-default-zone) echo public;;
"--zone=public --list-ports") echo "6443/tcp 30000-32767/udp";;
"--zone=public --list-services") echo "ssh dhcpv6-client";;
--list-ports|--list-services) echo "You're performing an operation over default zone ('public'), but your connections/interfaces are in zone 'trusted' (see --get-active-zones)";;
"--permanent --service=ssh --get-ports") echo 22/tcp;;
"--permanent --service=dhcpv6-client --get-ports") echo 546/udp;;
"--zone=trusted --list-sources") echo "10.244.0.0/16 10.96.0.0/12";;
*) exit 2;;
esac`)
	if out, want := s.mustRun(Command("facts-firewall"), ""), "firewall=firewalld\nfwzone public\nfwopen 6443/tcp\nfwopen 30000-32767/udp\nfwopen 22/tcp\nfwopen 546/udp\nfwsource 10.244.0.0/16\nfwsource 10.96.0.0/12\n"; out != want {
		t.Errorf("firewalld: got\n%s\nwant\n%s", out, want)
	}
	s.stub("firewall-cmd", `echo "not running" >&2; exit 252`)
	s.stub("ufw", `printf 'Status: active\n\nTo                         Action      From\n--                         ------      ----\n22/tcp                     ALLOW       Anywhere\n'`)
	if out, want := s.mustRun(Command("facts-firewall"), ""), "firewall=ufw\nufw Status: active\nufw \nufw To                         Action      From\nufw --                         ------      ----\nufw 22/tcp                     ALLOW       Anywhere\n"; out != want {
		t.Errorf("ufw: got\n%q\nwant\n%q", out, want)
	}
}
