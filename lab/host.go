package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kforge/kforge/progress"

	"golang.org/x/sync/errgroup"
)

// launcherScript runs as the host's outermost process, in the host's new network and private
// mount namespaces and its own cgroups: it mounts the overlay and runs systemd-nspawn, booting
// again when the host reboots (nspawn exit code 133). Its arguments: host dir, lower dir, then
// nspawn's arguments.
const launcherScript = `set -u
d=$1; lower=$2; shift 2
while read -r cg; do
  echo $$ > "$cg/cgroup.procs" || { echo "kforge lab: cannot join cgroup $cg" >&2; exit 97; }
done < "$d/cgroups"
# This private copy of the machine's mounts would keep namespace files (ip netns, other tools)
# alive after their owners delete them: drop them.
grep ' - nsfs ' /proc/self/mountinfo | cut -d' ' -f5 | while read -r m; do umount -l "$m" 2>/dev/null; done
i=0
while [ ! -e "$d/net-ready" ]; do
  i=$((i+1)); [ $i -gt 1200 ] && { echo "kforge lab: the network was never configured" >&2; exit 96; }
  sleep 0.05
done
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$d/upper,workdir=$d/work" "$d/root" || exit 98
while :; do
  systemd-nspawn "$@" &
  echo $! > "$d/nspawn.pid"
  wait $!
  rc=$?
  [ "$rc" = 133 ] || exit "$rc"
  echo "kforge lab: the host rebooted" >&2
done
`

// sysctls kubelet reads and would write machine-wide: each host sees read-only files with the
// values kubelet wants instead.
var sysctls = []string{"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes"}

// prepareHost writes the host's upper dir (hostname, machine-id, /etc/hosts, load-balancer
// config) and creates its cgroups.
func (l *Lab) prepareHost(h *hostState, hier []hierarchy) error {
	for _, d := range []string{"upper/etc", "work", "root", "containerd"} {
		if err := os.MkdirAll(filepath.Join(h.Dir, d), 0o755); err != nil {
			return err
		}
	}
	if l.st.Bare && h.Role != RoleLoadBalancer && !h.VM {
		if err := whiteoutPackages(l.st.Rootfs, filepath.Join(h.Dir, "upper"), bareHidden...); err != nil {
			return fmt.Errorf("bare host %s: %w", h.Name, err)
		}
	}
	etc := filepath.Join(h.Dir, "upper", "etc")
	if err := os.WriteFile(filepath.Join(etc, "hostname"), []byte(h.Name+"\n"), 0o644); err != nil {
		return err
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	if err := os.WriteFile(filepath.Join(etc, "machine-id"), []byte(hex.EncodeToString(id)+"\n"), 0o444); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(etc, "resolv.conf"), []byte(resolvConf), 0o644); err != nil {
		return err
	}
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	for _, o := range l.st.Hosts {
		fmt.Fprintf(&hosts, "%s\t%s\n", o.Address, o.Name)
	}
	if err := os.WriteFile(filepath.Join(etc, "hosts"), []byte(hosts.String()), 0o644); err != nil {
		return err
	}
	if h.Role == RoleLoadBalancer {
		if err := l.writeHAProxy(h); err != nil {
			return err
		}
	}
	cgs, err := makeCgroups(hier, "kforge-lab-"+h.Name)
	l.mu.Lock()
	h.Cgroups = cgs // recorded even when partly made, so Down removes them
	l.mu.Unlock()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(h.Dir, "cgroups"), []byte(strings.Join(cgs, "\n")+"\n"), 0o644)
}

func (l *Lab) writeHAProxy(h *hostState) error {
	var b strings.Builder
	b.WriteString(`# kforge lab load balancer: TCP :6443 to every master's :6443.
global
	log /dev/log local0
	chroot /var/lib/haproxy
	user haproxy
	group haproxy
	daemon

defaults
	mode tcp
	log global
	option tcplog
	# A master whose kube-apiserver restarts (an upgrade, a renewed certificate) refuses
	# connections until the health check marks it down: retry those on another master.
	option redispatch
	retries 2
	timeout connect 5s
	timeout client 1h
	timeout server 1h
	# A health check's whole time (connect, TLS, /readyz). Unset, it is inter (1 s), and on
	# these 2 cores under two labs (load average 20-25) a ready API server's /readyz took over
	# a second twice in a row and its master was marked down. A stopped API server still fails
	# its checks at once (connection refused).
	timeout check 5s

frontend kube-apiserver
	bind :6443
	default_backend masters

backend masters
	# As kubeadm's HA guide (ha-considerations.md) sets it up: a master is in the rotation while
	# its kube-apiserver says it is ready (GET /readyz over TLS; anonymous access to it is
	# allowed by default). A TCP check let requests reach a kube-apiserver that was starting
	# (the port accepts before the server is ready) or shutting down, and they failed. A
	# master marked down keeps its sessions: kube-apiserver, told to stop, goes on serving for
	# its shutdown delay (5 s) while its /readyz fails, then ends its connections itself
	# (HTTP/2 GOAWAY) once their requests are answered. Closing them when the master was marked
	# down (on-marked-down shutdown-sessions, from 2694adb, when an API server could hang on its
	# own restarting etcd, which kforge no longer lets happen: tasks/etcdfirst.go) cut the
	# requests in flight on a server still answering them: a probe failed with "broken pipe"
	# at fb91cc2's and 4c1f846's CI, once as a master's API server began its shutdown, once
	# when a check had timed out under load.
	option httpchk
	http-check connect ssl
	http-check send meth GET uri /readyz
	http-check expect status 200
	balance roundrobin
`)
	for _, m := range l.st.Hosts {
		if m.Role == RoleMaster {
			fmt.Fprintf(&b, "\tserver %s %s:6443 check verify none inter 1s fall 2 rise 1\n", m.Name, m.Address)
		}
	}
	etc := filepath.Join(h.Dir, "upper", "etc")
	if err := os.MkdirAll(filepath.Join(etc, "haproxy"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(etc, "haproxy", "haproxy.cfg"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	wants := filepath.Join(etc, "systemd", "system", "multi-user.target.wants")
	if err := os.MkdirAll(wants, 0o755); err != nil {
		return err
	}
	return os.Symlink("/lib/systemd/system/haproxy.service", filepath.Join(wants, "haproxy.service"))
}

func (l *Lab) nspawnArgs(h *hostState) []string {
	a := []string{"-q", "-D", filepath.Join(h.Dir, "root"), "-M", h.Name, "-b",
		"--register=no", "--keep-unit", // no machined on the machine; the launcher made the cgroups
		"--console=pipe", "--link-journal=no", "--resolv-conf=off", "--timezone=off",
		"--capability=all",              // CAP_NET_ADMIN & co. in the host's own network namespace
		"--system-call-filter=@keyring", // runc needs keyctl
		"--bind=" + filepath.Join(h.Dir, "containerd") + ":/var/lib/containerd", // not on overlayfs
		"--bind-ro=/dev/kmsg", // kubelet exits without it
	}
	for _, s := range sysctls {
		a = append(a, "--bind-ro="+sysctlDir+"/"+s+":/proc/sys/"+strings.ReplaceAll(s, ".", "/"))
	}
	return a
}

// startHost starts the host's launcher and wires its network namespace to the bridge.
func (l *Lab) startHost(ctx context.Context, h *hostState) error {
	if h.VM {
		return l.startVM(ctx, h)
	}
	for _, f := range []string{"net-ready", "nspawn.pid"} {
		_ = os.Remove(filepath.Join(h.Dir, f))
	}
	argv := append([]string{"unshare", "--mount", "--propagation", "private", "--net",
		"/bin/sh", "-c", launcherScript, "kforge-lab-host", h.Dir, l.st.Rootfs}, l.nspawnArgs(h)...)
	pid, err := spawn(h, []string{"SYSTEMD_NSPAWN_LOCK=0"}, argv...)
	if err != nil {
		return fmt.Errorf("starting the launcher: %w", err)
	}
	// The PID is unshare's until it has made the namespaces and exec'd the script.
	self, _ := os.Readlink("/proc/self/ns/net")
	deadline := time.Now().Add(10 * time.Second)
	for {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			return fmt.Errorf("the launcher (PID %d) died at once: %s", pid, lastLines(filepath.Join(h.Dir, "console.log"), 5))
		}
		if ns != self && comm(pid) == "sh" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the launcher (PID %d) made no network namespace within 10s", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	l.mu.Lock()
	h.LauncherPID, h.LauncherStart = pid, procStart(pid)
	l.mu.Unlock()
	if err := wireHost(ctx, h, pid); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(h.Dir, "net-ready"), nil, 0o644)
}

// spawn starts argv in the background, in a session of its own (it outlives `kforge lab up`),
// stdin from /dev/null, its output appended to the host's console.log, with env added to a
// clean PATH; it returns argv's PID.
func spawn(h *hostState, env []string, argv ...string) (int, error) {
	cmd := exec.Command("/bin/sh", append([]string{"-c", `"$@" </dev/null >>"$KFORGE_LAB_CONSOLE" 2>&1 & echo $!`, "sh"}, argv...)...)
	cmd.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"KFORGE_LAB_CONSOLE=" + filepath.Join(h.Dir, "console.log")}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	closeInheritedOnExec()
	out, err := cmd.Output()
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return 0, fmt.Errorf("got %q for its PID", out)
	}
	return pid, nil
}

// closeInheritedOnExec marks every descriptor this process inherited (above stderr) close-on-exec
// (Go opens its own so): what spawn starts runs for the lab's life and must not hold what
// kforge's caller gave it. A lock of `flock LOCK kforge lab up` stayed held until the lab went
// down.
func closeInheritedOnExec() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// waitSSH waits until every host's sshd sends its banner.
func (l *Lab) waitSSH(ctx context.Context, timeout time.Duration, hosts []*hostState) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	g, ctx := errgroup.WithContext(ctx)
	for _, h := range hosts {
		g.Go(func() error {
			addr := net.JoinHostPort(h.Address, strconv.Itoa(h.Port))
			var last error
			for {
				if !alive(h.LauncherPID, h.LauncherStart) {
					return fmt.Errorf("lab host %s died while booting; its console (%s) ends with:\n%s", h.Name,
						filepath.Join(h.Dir, "console.log"), lastLines(filepath.Join(h.Dir, "console.log"), 15))
				}
				if last = sshBanner(ctx, addr); last == nil {
					return nil
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("lab host %s: sshd on %s did not answer within %s (last: %v); its console (%s) ends with:\n%s",
						h.Name, addr, timeout, last, filepath.Join(h.Dir, "console.log"), lastLines(filepath.Join(h.Dir, "console.log"), 15))
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	}
	return g.Wait()
}

// waitRunning waits until systemd reports every host "running", reporting each host that is; a
// host that ends up degraded is an error naming its failed units.
func (l *Lab) waitRunning(ctx context.Context, timeout time.Duration, hosts []*hostState, r progress.Reporter) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, h := range hosts {
		g.Go(func() error {
			out, _ := l.Exec(ctx, h.Name, "systemctl", "is-system-running", "--wait")
			if s := strings.TrimSpace(string(out)); s != "running" {
				failed, _ := l.Exec(context.WithoutCancel(ctx), h.Name, "systemctl", "--failed", "--no-legend", "--plain")
				return fmt.Errorf("lab host %s: systemd reports %q, not running (within %s); failed units: %s; look with `journalctl` inside the host (ssh, or nsenter)",
					h.Name, s, timeout, strings.Join(strings.Fields(string(failed)), " "))
			}
			r(progress.Event{Kind: progress.HostDone, Host: h.Name, Message: fmt.Sprintf("up: %s, %s, systemd running", h.Role, h.Address)})
			return nil
		})
	}
	return g.Wait()
}

func sshBanner(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != "SSH-" {
		return fmt.Errorf("%s answered %q, not an SSH banner", addr, buf)
	}
	return nil
}

// nspawnPID returns the host's systemd-nspawn process, or 0.
func (l *Lab) nspawnPID(h *hostState) int {
	l.mu.Lock()
	lp, ls := h.LauncherPID, h.LauncherStart
	l.mu.Unlock()
	if !alive(lp, ls) {
		return 0
	}
	for _, c := range children(lp) {
		if comm(c) == "systemd-nspawn" {
			return c
		}
	}
	return 0
}

// leader returns the PID (as the machine sees it) of the host's init.
func (l *Lab) leader(h *hostState) (int, error) {
	np := l.nspawnPID(h)
	if np == 0 {
		return 0, fmt.Errorf("lab host %s is not running: boot it with `kforge lab start --name %s %s` (Go: StartHost)", h.Name, l.Name, h.Name)
	}
	for _, c := range children(np) {
		if comm(c) == "systemd" {
			return c, nil
		}
	}
	return 0, fmt.Errorf("lab host %s: systemd-nspawn (PID %d) has no systemd child yet: the host is still starting", h.Name, np)
}

// ExecError is a command that failed inside a lab host.
type ExecError struct {
	Host     string
	Argv     []string
	ExitCode int
	Stderr   string
	Err      error
}

func (e *ExecError) Error() string {
	msg := fmt.Sprintf("lab host %s: %s: %v", e.Host, strings.Join(e.Argv, " "), e.Err)
	if s := strings.TrimSpace(e.Stderr); s != "" { // its last line: ssh's reason, a command's complaint
		msg += ": " + s[strings.LastIndexByte(s, '\n')+1:]
	}
	return msg
}

func (e *ExecError) Unwrap() error { return e.Err }

// Details is the captured stderr, for kforge's error printer.
func (e *ExecError) Details() []string {
	d := []string{e.Error()}
	if s := strings.TrimSpace(e.Stderr); s != "" {
		d = append(d, strings.Split(s, "\n")...)
	}
	return d
}

// Command returns a command that runs argv inside the host — all its namespaces and its root,
// via nsenter into its init, not SSH — with a clean root environment; on a VM host, over SSH
// with the lab's key. The caller may set Stdin, Stdout and Stderr.
func (l *Lab) Command(ctx context.Context, host string, argv ...string) (*exec.Cmd, error) {
	h, err := l.host(host)
	if err != nil {
		return nil, err
	}
	if len(argv) == 0 {
		return nil, errors.New("lab: Command needs a command")
	}
	if h.VM {
		return l.vmCommand(ctx, h, argv), nil
	}
	pid, err := l.leader(h)
	if err != nil {
		return nil, err
	}
	args := append([]string{"-t", strconv.Itoa(pid), "-m", "-u", "-i", "-n", "-p", "-r", "-w", "--"}, argv...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8", "TERM=dumb"}
	// nsenter forks the command into the host's PID namespace: when ctx ends, kill both
	// through their process group, not only nsenter.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd, nil
}

// Exec runs argv inside the host (see Command) and returns its stdout; a failure is an
// *ExecError with the exit code and stderr.
func (l *Lab) Exec(ctx context.Context, host string, argv ...string) ([]byte, error) {
	cmd, err := l.Command(ctx, host, argv...)
	if err != nil {
		return nil, err
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		ee := &ExecError{Host: host, Argv: argv, ExitCode: -1, Stderr: errb.String(), Err: err}
		var xe *exec.ExitError
		if errors.As(err, &xe) {
			ee.ExitCode = xe.ExitCode()
		}
		return out.Bytes(), ee
	}
	return out.Bytes(), nil
}

// removeHost ends the host's processes — a clean shutdown until deadline, then SIGKILL of its
// init and of every process left in its cgroups, all by PID — then removes its cgroups, veth and
// files. Files stay when a process survives.
func (l *Lab) removeHost(ctx context.Context, h *hostState, deadline time.Time, r progress.Reporter) error {
	if err := l.stopProcesses(h, deadline, r); err != nil {
		return err
	}
	var errs []error
	if err := removeCgroups(h.Cgroups); err != nil {
		errs = append(errs, err)
	}
	if err := deleteLink(ctx, h.Veth); err != nil {
		errs = append(errs, err)
	}
	_ = os.RemoveAll(filepath.Join("/run/systemd/nspawn/propagate", h.Name))
	if err := removeUnmounted(h.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// stopProcesses ends every process of the host and returns once none is left: a clean shutdown
// until deadline, then SIGKILL; a deadline that has passed (the zero time) kills at once, with
// no shutdown at all. r hears when a host that was asked to shut down has to be killed.
func (l *Lab) stopProcesses(h *hostState, deadline time.Time, r progress.Reporter) error {
	if np := l.nspawnPID(h); np != 0 {
		clean := time.Now().Before(deadline)
		if clean {
			// systemd-nspawn turns SIGTERM into a clean shutdown of the host.
			_ = syscall.Kill(np, syscall.SIGTERM)
		}
		for time.Now().Before(deadline) && l.nspawnPID(h) != 0 {
			time.Sleep(50 * time.Millisecond)
		}
		if pid, err := l.leader(h); err == nil {
			if clean {
				l.log.Debug("host did not shut down in time; killing it", "host", h.Name, "pid", pid)
				r(progress.Event{Kind: progress.Info, Host: h.Name, Message: "did not shut down in time; killing it"})
			}
			_ = syscall.Kill(pid, syscall.SIGKILL) // ends its whole PID namespace
		}
	}
	// Whatever is left in the host's cgroups (the launcher, nspawn, a process that escaped the
	// PID namespace) is killed by PID.
	for i := 0; ; i++ {
		pids := cgroupPIDs(h.Cgroups)
		l.mu.Lock()
		if alive(h.LauncherPID, h.LauncherStart) {
			pids = append(pids, h.LauncherPID)
		}
		l.mu.Unlock()
		if len(pids) == 0 {
			return nil
		}
		if i == 100 {
			return fmt.Errorf("processes %v are still running after SIGKILL; not removing %s", pids, h.Dir)
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StopHost cuts the host's power: SIGKILL of its init (a VM: of QEMU) and of every process left
// in its cgroups, with no shutdown. What the host's kernel held goes with it, as on a real
// machine: its network namespace and link, its mounts, its /run. And its cgroups: an nspawn host
// shares this machine's kernel, where the cgroups its previous boot made (kubelet's kubepods,
// one per container) would outlive it, and kubelet, once booted again, would wait on each of
// those containers, whose tasks containerd no longer has, before it reports Ready. So they are
// removed, the host's own included (StartHost makes them anew). Its disk stays: the overlay,
// /var/lib/containerd, the journal. StartHost boots it again.
func (l *Lab) StopHost(ctx context.Context, host string) error {
	h, err := l.host(host)
	if err != nil {
		return err
	}
	if err := l.powerOff(h); err != nil {
		return fmt.Errorf("lab host %s: %w", host, err)
	}
	return l.save()
}

// powerOff kills every process of the host at once and removes its cgroups.
func (l *Lab) powerOff(h *hostState) error {
	if err := l.stopProcesses(h, time.Time{}, progress.Discard); err != nil {
		return err
	}
	l.mu.Lock()
	h.LauncherPID, h.LauncherStart = 0, 0
	l.mu.Unlock()
	return removeCgroups(h.Cgroups)
}

// StartHost boots a stopped host again (same disk, keys and address) as from a cold start, and
// waits until its sshd answers and systemd runs. A host that went down otherwise than by
// StopHost (its launcher killed, say) is first wiped as StopHost would.
func (l *Lab) StartHost(ctx context.Context, host string) error {
	h, err := l.host(host)
	if err != nil {
		return err
	}
	if l.Running(host) {
		return nil
	}
	if err := l.powerOff(h); err != nil {
		return fmt.Errorf("lab host %s: %w", host, err)
	}
	if err := remakeCgroups(h.Cgroups); err != nil {
		return fmt.Errorf("lab host %s: %w", host, err)
	}
	_ = deleteLink(ctx, h.Veth)
	if err := l.startHost(ctx, h); err != nil {
		return fmt.Errorf("lab host %s: %w", host, err)
	}
	if err := l.save(); err != nil {
		return err
	}
	timeout := 2 * time.Minute
	if h.VM { // an emulated VM boots slowly, and its kubelet and containerd start with it
		timeout = 6 * time.Minute
	}
	if err := l.waitSSH(ctx, timeout, []*hostState{h}); err != nil {
		return err
	}
	return l.waitRunning(ctx, timeout, []*hostState{h}, l.report)
}
