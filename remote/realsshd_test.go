package remote

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kforge/kforge/internal/testenv"
	"golang.org/x/crypto/ssh"
)

// Real OpenSSH (Debian's sshd and sudo) in two network namespaces: a bastion reachable from here
// at 198.51.100.186 and a target at 198.51.100.190 reachable only from the bastion. Each sshd
// runs in a private mount namespace over a copy of /etc (test users, sudoers rules, host keys),
// with /run, /var/log and /var/lib/sudo private too, so nothing on the machine changes. Every
// process is ended by PID and the root-namespace veth is deleted at cleanup.

const (
	labRootIP    = "198.51.100.185"
	labBastionIP = "198.51.100.186"
	labBastionIn = "198.51.100.189"
	labTargetIP  = "198.51.100.190"
	labSudoPW    = "correct horse battery"
	labUserPW    = "login-pw-42"
	// RHEL's secure_path, which leaves out /usr/local/bin (where kforge installs).
	labSudoersCfg = "Defaults secure_path=\"/sbin:/bin:/usr/sbin:/usr/bin\"\nkfnopw ALL=(ALL:ALL) NOPASSWD: ALL\nkfpw ALL=(ALL:ALL) ALL\n"
)

type sshdLab struct {
	dir        string
	clientKey  string
	knownHosts string
	home       string
	logs       *testenv.SyncBuffer
	stderr     map[string]*testenv.SyncBuffer
	goFuncs    []func() // let each sshd start once its network is configured
}

func requireTools(t testing.TB, tools ...string) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test; skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		testenv.Require(t, errors.New("must run as root (network and mount namespaces)"))
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Require(t, errors.New(tool+" not found (Debian packages: openssh-server, sudo, passwd, util-linux, iproute2)"))
		}
	}
}

func run(t testing.TB, stdin string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// netnsProcs returns the PIDs of every process in the network namespace of pid.
func netnsProcs(pid int) []int {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nil
	}
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", p)); err == nil && l == ns {
			pids = append(pids, p)
		}
	}
	return pids
}

func startSSHDLab(t *testing.T) *sshdLab {
	requireTools(t, "sshd", "sudo", "unshare", "nsenter", "ip", "useradd", "chpasswd", "ssh-keygen")
	if _, err := os.Stat("/usr/lib/openssh/sftp-server"); err != nil {
		testenv.Require(t, errors.New("/usr/lib/openssh/sftp-server missing (Debian package openssh-sftp-server)"))
	}
	dir, err := os.MkdirTemp("", "kfr-sshd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o711) // test users traverse to their homes; the /etc copy (shadow) stays unlisted
	lab := &sshdLab{dir: dir, home: filepath.Join(dir, "client"), logs: &testenv.SyncBuffer{}, stderr: map[string]*testenv.SyncBuffer{}}
	for _, d := range []string{"home", "ak", "client", "b/log", "b/sudo", "t/log", "t/sudo", "rootonly"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	os.Chmod(filepath.Join(dir, "rootonly"), 0o700)
	run(t, "", "cp", "-a", "/etc", filepath.Join(dir, "etc"))
	run(t, "", "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(dir, "b_host"))
	run(t, "", "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(dir, "t_host"))
	lab.clientKey = filepath.Join(dir, "client", "id_ed25519")
	run(t, "", "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", lab.clientKey)
	pub, _ := os.ReadFile(lab.clientKey + ".pub")
	users := []string{"root", "kfnopw", "kfpw", "kfnosudo", "kfjump"}
	for _, u := range users {
		os.WriteFile(filepath.Join(dir, "ak", u), pub, 0o644)
	}
	// Users, passwords and sudoers rules, written into the /etc copy only.
	prep := `set -e
mount --bind "$D/etc" /etc
for u in kfnopw kfpw kfnosudo kfjump; do useradd -d "$D/home/$u" -m -s /bin/sh "$u"; done
IFS= read -r pw
IFS= read -r upw
printf 'kfpw:%s\n' "$pw" | chpasswd
for u in kfnopw kfnosudo kfjump; do printf '%s:%s\n' "$u" "$upw" | chpasswd; done
printf '%s' "$SUDOERS" > /etc/sudoers.d/kforge-test
chmod 0440 /etc/sudoers.d/kforge-test
visudo -c -q
`
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", prep)
	cmd.Env = append(os.Environ(), "D="+dir, "SUDOERS="+labSudoersCfg)
	cmd.Stdin = strings.NewReader(labSudoPW + "\n" + labUserPW + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("preparing test users: %v\n%s", err, out)
	}
	suffix := strconv.Itoa(os.Getpid() % 100000)
	rootVeth, bastionVeth := "kfr-r"+suffix, "kfr-b"+suffix
	bastionIn, targetVeth := "kfr-i"+suffix, "kfr-t"+suffix
	// The bastion refuses a third handshake in progress (MaxStartups start:rate:full = 2:100:2,
	// OpenSSH's 10:30:100 made small); the target takes many at once.
	maxStartups := map[string]string{"b": "2:100:2", "t": "100"}
	start := func(name, listen string) int {
		cfg := filepath.Join(dir, name+"_sshd_config")
		os.WriteFile(cfg, []byte(fmt.Sprintf(`MaxStartups `+maxStartups[name]+`
ListenAddress %s
HostKey %s/%s_host
PidFile none
UsePAM no
PasswordAuthentication yes
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AuthorizedKeysFile %s/ak/%%u
StrictModes no
Subsystem sftp /usr/lib/openssh/sftp-server
AllowTcpForwarding yes
PrintMotd no
PrintLastLog no
LogLevel ERROR
`, listen, dir, name, dir)), 0o644)
		pid, goOn, errb := startNS(t, dir, name, cfg, true, "")
		lab.stderr[name] = errb
		lab.goFuncs = append(lab.goFuncs, goOn)
		return pid
	}
	bpid := start("b", labBastionIP)
	tpid := start("t", labTargetIP)
	t.Cleanup(func() { exec.Command("ip", "link", "del", rootVeth).Run() })
	run(t, "", "ip", "link", "add", rootVeth, "type", "veth", "peer", "name", bastionVeth)
	run(t, "", "ip", "link", "set", bastionVeth, "netns", strconv.Itoa(bpid))
	run(t, "", "ip", "addr", "add", labRootIP+"/30", "dev", rootVeth)
	run(t, "", "ip", "link", "set", rootVeth, "up")
	run(t, "", "ip", "link", "add", bastionIn, "type", "veth", "peer", "name", targetVeth)
	run(t, "", "ip", "link", "set", bastionIn, "netns", strconv.Itoa(bpid))
	run(t, "", "ip", "link", "set", targetVeth, "netns", strconv.Itoa(tpid))
	ns := func(pid int, script string) {
		run(t, "", "nsenter", "-t", strconv.Itoa(pid), "-n", "sh", "-ec", script)
	}
	ns(bpid, fmt.Sprintf("ip link set lo up; ip addr add %s/30 dev %s; ip link set %s up; ip addr add %s/30 dev %s; ip link set %s up",
		labBastionIP, bastionVeth, bastionVeth, labBastionIn, bastionIn, bastionIn))
	ns(tpid, fmt.Sprintf("ip link set lo up; ip addr add %s/30 dev %s; ip link set %s up", labTargetIP, targetVeth, targetVeth))
	for _, f := range lab.goFuncs {
		f()
	}
	// known_hosts for both, as OpenSSH writes it.
	var kh bytes.Buffer
	for name, ip := range map[string]string{"b": labBastionIP, "t": labTargetIP} {
		b, _ := os.ReadFile(filepath.Join(dir, name+"_host.pub"))
		k, _, _, _, err := ssh.ParseAuthorizedKey(b)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&kh, "%s %s", ip, ssh.MarshalAuthorizedKey(k))
	}
	lab.knownHosts = filepath.Join(lab.home, "known_hosts")
	os.WriteFile(lab.knownHosts, kh.Bytes(), 0o600)
	return lab
}

// cfg is a Config for user on the target behind the bastion (or on the bastion itself).
func (l *sshdLab) cfg(user string, viaBastion bool) (Config, Options) {
	c := Config{Name: "real-" + user, Address: labBastionIP, User: user, IdentityFile: l.clientKey, KnownHostsFile: l.knownHosts,
		DialRetry: 10 * time.Second, KeepAlive: -1}
	if viaBastion {
		c.Address = labTargetIP
		c.Bastions = []Bastion{{Address: labBastionIP, User: "kfjump"}}
	}
	env := map[string]string{"HOME": l.home, "SUDO_PW": labSudoPW, "WRONG_PW": "nope", "LOGIN_PW": labUserPW}
	return c, Options{Getenv: func(k string) string { return env[k] }, SSHConfigFile: "none",
		Logger: slog.New(slog.NewTextHandler(l.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
}

func (l *sshdLab) dial(t *testing.T, c Config, o Options) *SSH {
	t.Helper()
	h, err := Dial(ctxT(t, 30*time.Second), c, o)
	if err != nil {
		t.Fatalf("%v\nbastion sshd: %s\ntarget sshd: %s", err, l.stderr["b"].String(), l.stderr["t"].String())
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func TestRealSSHD(t *testing.T) {
	lab := startSSHDLab(t)

	t.Run("root direct", func(t *testing.T) {
		c, o := lab.cfg("root", false)
		h := lab.dial(t, c, o)
		out, err := Output(ctxT(t, 10*time.Second), h, "id -u; cat /etc/sudoers.d/kforge-test | wc -l")
		if err != nil || string(out) != "0\n3\n" { // the test sudoers rules: 3 lines
			t.Fatalf("%q %v", out, err)
		}
	})

	t.Run("target is reachable only through the bastion", func(t *testing.T) {
		c, o := lab.cfg("root", false)
		c.Address, c.DialRetry, c.DialTimeout = labTargetIP, 0, 2*time.Second
		_, err := Dial(ctxT(t, 10*time.Second), c, o)
		var de *DialError
		if !errors.As(err, &de) {
			t.Fatalf("direct dial to the target: want DialError, got %v", err)
		}
	})

	t.Run("passwordless sudo behind the bastion", func(t *testing.T) {
		c, o := lab.cfg("kfnopw", true)
		h := lab.dial(t, c, o)
		ctx := ctxT(t, 20*time.Second)
		out, err := Output(ctx, h, "id -u; hostname -I")
		if err != nil || !strings.HasPrefix(string(out), "0\n"+labTargetIP) {
			t.Fatalf("%q %v", out, err)
		}
		// sudo's secure_path (RHEL's) leaves out /usr/local/bin; kforge's commands find what it
		// installs there all the same.
		if out, err := Output(ctx, h, `echo "$PATH"`); err != nil || !strings.HasPrefix(string(out), "/usr/local/sbin:/usr/local/bin:/sbin:/bin:") {
			t.Errorf("PATH under sudo with RHEL's secure_path: %q %v; want /usr/local/sbin and /usr/local/bin first", out, err)
		}
		// A root-only directory: the upload needs sudo.
		dst := filepath.Join(lab.dir, "rootonly", "etc", "kubelet.conf")
		f := Bytes(dst, []byte("kind: KubeletConfiguration\n"), 0o600)
		if err := h.Upload(ctx, f); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(dst)
		if err != nil || st.Mode().Perm() != 0o600 || st.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Fatalf("uploaded file: %v %v", st, err)
		}
		if err := h.Upload(ctx, Bytes(dst, []byte("kind: KubeletConfiguration\n"), 0o600)); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(lab.logs.String(), "skipped=true") {
			t.Error("second identical upload not skipped")
		}
	})

	t.Run("many commands and uploads at once within sshd's default MaxSessions", func(t *testing.T) {
		c, o := lab.cfg("kfnopw", true)
		h := lab.dial(t, c, o)
		ctx := ctxT(t, 60*time.Second)
		jobs := make([]named, 40)
		for i := range jobs {
			jobs[i] = named(strconv.Itoa(i))
		}
		err := Each(ctx, jobs, Limits{Hosts: 40}, func(ctx context.Context, j named) error {
			if _, err := Output(ctx, h, "sleep 0.1; id -u"); err != nil {
				return err
			}
			return h.Upload(ctx, Bytes(filepath.Join(lab.dir, "rootonly", "many", string(j)), []byte(j), 0o644))
		})
		if err != nil {
			t.Fatal(err)
		}
		if ents, _ := os.ReadDir(filepath.Join(lab.dir, "rootonly", "many")); len(ents) != 40 {
			t.Errorf("%d files", len(ents))
		}
	})

	t.Run("a fleet behind a bastion shares its connection, within the bastion's MaxStartups", func(t *testing.T) {
		dialAll := func(jumps *Jumps) error {
			errs := make([]error, 12)
			var wg sync.WaitGroup
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, o := lab.cfg("root", true)
					c.Name, c.DialRetry, o.Jumps = fmt.Sprintf("fleet-%d", i), 0, jumps
					h, err := Dial(ctxT(t, 20*time.Second), c, o)
					if err == nil {
						_, err = Output(ctxT(t, 10*time.Second), h, "true")
						h.Close()
					}
					errs[i] = err
				}()
			}
			wg.Wait()
			return errors.Join(errs...)
		}
		// Without sharing, twelve handshakes at once meet MaxStartups 2:100:2: some are dropped
		// (this shows the limit is real here).
		if err := dialAll(nil); err == nil {
			t.Errorf("twelve separate connections through the bastion at once all got through: MaxStartups is not in effect, so the next check proves nothing")
		}
		jumps := &Jumps{}
		defer jumps.Close()
		if err := dialAll(jumps); err != nil {
			t.Errorf("twelve hosts through one shared bastion connection: %v", err)
		}
	})

	t.Run("sudo with a password", func(t *testing.T) {
		c, o := lab.cfg("kfpw", false)
		c.Sudo, c.SudoPasswordEnv = SudoPassword, "SUDO_PW"
		h := lab.dial(t, c, o)
		ctx := ctxT(t, 30*time.Second)
		var out, errb bytes.Buffer
		err := h.Run(ctx, Cmd{Command: "id -u; cat; echo done >&2", Stdin: strings.NewReader("stdin data\n"), Stdout: &out, Stderr: &errb})
		if err != nil || out.String() != "0\nstdin data\n" || errb.String() != "done\n" {
			t.Fatalf("stdout %q stderr %q err %v", out.String(), errb.String(), err)
		}
		// Twice more: sudo's credential cache must not confuse the protocol.
		for range 2 {
			if out, err := Output(ctx, h, "id -u"); err != nil || string(out) != "0\n" {
				t.Fatalf("%q %v", out, err)
			}
		}
		dst := filepath.Join(lab.dir, "rootonly", "pw", "admin.conf")
		if err := h.Upload(ctx, Bytes(dst, []byte("secret\n"), 0o600)); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(dst); string(b) != "secret\n" {
			t.Errorf("content %q", b)
		}
		if strings.Contains(lab.logs.String(), labSudoPW) {
			t.Error("sudo password in the log")
		}
	})

	t.Run("wrong sudo password", func(t *testing.T) {
		c, o := lab.cfg("kfpw", false)
		c.Sudo, c.SudoPasswordEnv = SudoPassword, "WRONG_PW"
		h := lab.dial(t, c, o)
		err := h.Run(ctxT(t, 30*time.Second), Cmd{Command: "id -u"})
		var ce *CommandError
		if !errors.As(err, &ce) || ce.Reason != "sudo rejected the password" {
			t.Fatalf("want rejected password, got %v", err)
		}
	})

	t.Run("password needed but passwordless configured", func(t *testing.T) {
		c, o := lab.cfg("kfpw", false)
		c.Sudo = SudoAuto
		h := lab.dial(t, c, o)
		err := h.Run(ctxT(t, 20*time.Second), Cmd{Command: "id -u"})
		var ce *CommandError
		if !errors.As(err, &ce) || !strings.Contains(ce.Hint, "ssh.sudo: password") {
			t.Fatalf("want hint to configure a sudo password, got %v", err)
		}
	})

	t.Run("no sudo rights", func(t *testing.T) {
		c, o := lab.cfg("kfnosudo", false)
		c.Sudo, c.SudoPasswordEnv = SudoPassword, "LOGIN_PW"
		h := lab.dial(t, c, o)
		err := h.Run(ctxT(t, 20*time.Second), Cmd{Command: "id -u"})
		var ce *CommandError
		if !errors.As(err, &ce) || !strings.Contains(ce.Hint, "sudoers") {
			t.Fatalf("want sudoers hint, got %v", err)
		}
	})

	t.Run("password login", func(t *testing.T) {
		c, o := lab.cfg("kfnopw", false)
		c.IdentityFile, c.PasswordEnv = "", "LOGIN_PW"
		h := lab.dial(t, c, o)
		if out, err := Output(ctxT(t, 10*time.Second), h, "id -u"); err != nil || string(out) != "0\n" {
			t.Fatalf("%q %v", out, err)
		}
		c.PasswordEnv = "WRONG_PW"
		_, err := Dial(ctxT(t, 20*time.Second), c, o)
		var ae *AuthError
		if !errors.As(err, &ae) {
			t.Fatalf("want AuthError, got %v", err)
		}
	})

	t.Run("hung command under sudo ends at its deadline", func(t *testing.T) {
		c, o := lab.cfg("kfnopw", true)
		h := lab.dial(t, c, o)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		marker := "sleep " + strconv.Itoa(30000000+os.Getpid()) // a unique, findable command line
		err := h.Run(ctx, Cmd{Command: "exec " + marker})
		var te *TimeoutError
		if !errors.As(err, &te) {
			t.Fatalf("want TimeoutError, got %v", err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			out, err := Output(ctxT(t, 10*time.Second), h, "pgrep -f "+Quote("[s]"+marker[1:])+" || true")
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(string(out)) == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("remote command still running: pids %s", out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	t.Run("unknown and mismatched host keys", func(t *testing.T) {
		c, o := lab.cfg("root", false)
		c.KnownHostsFile = filepath.Join(lab.home, "empty_known_hosts")
		_, err := Dial(ctxT(t, 20*time.Second), c, o)
		var hk *HostKeyError
		if !errors.As(err, &hk) || !hk.Unknown {
			t.Fatalf("want unknown host key, got %v", err)
		}
		c.AcceptNewHostKeys = true
		lab.dial(t, c, o)
		c.AcceptNewHostKeys = false
		lab.dial(t, c, o)
		tk, _ := os.ReadFile(filepath.Join(lab.dir, "t_host.pub"))
		c.HostKey = string(tk) // the target's key pinned for the bastion's address
		_, err = Dial(ctxT(t, 20*time.Second), c, o)
		if !errors.As(err, &hk) || hk.Unknown {
			t.Fatalf("want mismatch, got %v", err)
		}
	})
}

// startNS starts sshd -f cfg in new network and mount namespaces: /run is a private tmpfs,
// /var/log, /var/lib/sudo and /root (a clean root home) private directories under dir/name, and, with etc, dir/etc is
// bound over /etc. The shell holding the namespaces waits until goOn is called (the caller
// moves a network interface in first), runs netSetup in the namespace, then execs sshd.
// Cleanup ends every process of the namespace by PID.
func startNS(tb testing.TB, dir, name, cfg string, etc bool, netSetup string) (pid int, goOn func(), stderr *testenv.SyncBuffer) {
	tb.Helper()
	os.MkdirAll(filepath.Join(dir, name, "log"), 0o755)
	os.MkdirAll(filepath.Join(dir, name, "sudo"), 0o700)
	os.MkdirAll(filepath.Join(dir, name, "root"), 0o700)
	holder := `set -e
[ -z "$ETC" ] || mount --bind "$D/etc" /etc
mount --bind "$D/$N/log" /var/log
mount --bind "$D/$N/root" /root
[ ! -d /var/lib/sudo ] || mount --bind "$D/$N/sudo" /var/lib/sudo
mount -t tmpfs tmpfs /run
mkdir -m 0755 /run/sshd
echo mounted
read go
eval "$NETSETUP"
exec /usr/sbin/sshd -D -e -f "$CFG"
`
	c := exec.Command("unshare", "--net", "--mount", "--propagation", "private", "sh", "-c", holder)
	c.Env = append(os.Environ(), "D="+dir, "N="+name, "CFG="+cfg, "NETSETUP="+netSetup)
	if etc {
		c.Env = append(c.Env, "ETC=1")
	}
	in, _ := c.StdinPipe()
	out, _ := c.StdoutPipe()
	errb := &testenv.SyncBuffer{}
	c.Stderr = errb
	if err := c.Start(); err != nil {
		tb.Fatal(err)
	}
	pid = c.Process.Pid
	tb.Cleanup(func() {
		pids := netnsProcs(pid)
		c.Process.Signal(syscall.SIGTERM)
		for _, p := range pids {
			if p != pid {
				syscall.Kill(p, syscall.SIGKILL)
			}
		}
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			c.Process.Kill()
			<-done
		}
		if tb.Failed() {
			tb.Logf("%s sshd stderr:\n%s", name, errb.String())
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "mounted\n" {
		tb.Fatalf("%s namespace setup failed: %q %v\n%s", name, line, err, errb.String())
	}
	tb.Cleanup(func() { in.Close() })
	return pid, func() { io.WriteString(in, "go\n") }, errb
}
