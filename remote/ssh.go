package remote

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// SSH is a Host reached over SSH: one connection (through its bastions), reused for every
// command and upload, kept alive with keepalive requests.
type SSH struct {
	name    string
	addr    string
	user    string
	sudo    SudoMode // resolved: none, passwordless or password
	sudoPW  Secret
	sudoEnv string
	log     *slog.Logger

	client *ssh.Client
	chain  []*ssh.Client // bastion connections, outermost first
	stopKA chan struct{}
	once   sync.Once

	sftpMu sync.Mutex
	sftp   *sftpConn

	sessions chan struct{} // slots for concurrent commands
}

// maxCommandSessions bounds concurrent commands on one connection: OpenSSH's sshd allows 10
// sessions per connection by default (MaxSessions); one is kept for the SFTP session and one
// for ending a command at its deadline.
const maxCommandSessions = 8

// Dial connects to the host cfg describes and returns it. Connection failures (refused,
// unreachable, timed out) are retried with backoff for cfg.DialRetry; authentication and host key
// failures are not. The errors are *DialError, *AuthError, *HostKeyError or *TimeoutError.
func Dial(ctx context.Context, cfg Config, o Options) (*SSH, error) {
	name := cfg.name()
	log := o.logger()
	p, err := resolve(cfg, o)
	if err != nil {
		return nil, &HostError{Host: name, Err: err}
	}
	target := p.hops[len(p.hops)-1]
	h := &SSH{name: name, addr: target.addr, user: target.user, log: log, stopKA: make(chan struct{}), sessions: make(chan struct{}, maxCommandSessions)}
	switch cfg.Sudo {
	case "", SudoAuto:
		h.sudo = SudoPasswordless
		if target.user == "root" {
			h.sudo = SudoNone
		}
	case SudoNone, SudoPasswordless:
		h.sudo = cfg.Sudo
	case SudoPassword:
		h.sudo, h.sudoEnv = SudoPassword, cfg.SudoPasswordEnv
		if cfg.SudoPasswordEnv == "" {
			return nil, &HostError{Host: name, Err: errors.New("ssh.sudo is password but ssh.sudoPasswordEnv is not set: name the environment variable that holds the sudo password")}
		}
		h.sudoPW = Secret(o.getenv(cfg.SudoPasswordEnv))
		if h.sudoPW == "" {
			return nil, &HostError{Host: name, Err: fmt.Errorf("the sudo password variable $%s (ssh.sudoPasswordEnv) is empty or unset: export it before running kforge", cfg.SudoPasswordEnv)}
		}
	default:
		return nil, &HostError{Host: name, Err: fmt.Errorf("unknown ssh.sudo mode %q: use auto, none, passwordless or password", cfg.Sudo)}
	}
	timeout := cfg.DialTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	start := time.Now()
	backoff := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		client, chain, err := dialChain(ctx, name, p, cfg, o, timeout)
		if err == nil {
			h.client, h.chain = client, chain
			break
		}
		var de *DialError
		retry := errors.As(err, &de) && ctx.Err() == nil && time.Since(start)+backoff < cfg.DialRetry
		log.Debug("ssh connect failed", "host", name, "addr", target.addr, "attempt", attempt, "err", err, "retry", retry)
		if !retry {
			if de != nil {
				de.Attempts = attempt
			}
			if ctx.Err() != nil && !errors.As(err, new(*HostKeyError)) && !errors.As(err, new(*AuthError)) {
				return nil, &TimeoutError{Host: name, Op: "connect to " + target.addr, After: time.Since(start),
					Hint: fmt.Sprintf("is %s reachable from here and is sshd running? try: ssh -p %s %s@%s true", target.addr, portOf(target.addr), target.user, hostOf(target.addr))}
			}
			return nil, err
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff = min(2*backoff, 2*time.Second)
	}
	log.Debug("ssh connected", "host", name, "addr", target.addr, "user", target.user, "hops", len(p.hops), "duration", time.Since(start))
	ka := cfg.KeepAlive
	if ka == 0 {
		ka = 15 * time.Second
	}
	if ka > 0 {
		go h.keepalive(ka)
	}
	return h, nil
}

func hostOf(addr string) string { h, _ := splitHostPort(addr); return h }
func portOf(addr string) string { _, p := splitHostPort(addr); return fmt.Sprint(p) }

// dialChain connects through every bastion to the host. It returns the host's connection and
// the bastion connections the host owns, outermost first: none when o.Jumps shares them.
func dialChain(ctx context.Context, name string, p plan, cfg Config, o Options, timeout time.Duration) (*ssh.Client, []*ssh.Client, error) {
	var chain []*ssh.Client
	var prev *ssh.Client
	last := len(p.hops) - 1
	for i, h := range p.hops {
		var c *ssh.Client
		var err error
		if i < last && o.Jumps != nil {
			via := prev
			c, err = o.Jumps.get(cfg.KnownHostsFile+"\n"+jumpKey(p.hops[:i+1]), name, func() (*ssh.Client, error) {
				return dialHop(ctx, name, via, h, cfg, o, timeout)
			})
		} else {
			c, err = dialHop(ctx, name, prev, h, cfg, o, timeout)
			if err == nil && i < last {
				chain = append(chain, c)
			}
		}
		if err != nil {
			for i := len(chain) - 1; i >= 0; i-- {
				chain[i].Close()
			}
			return nil, nil, err
		}
		prev = c
	}
	return prev, chain, nil
}

func dialHop(ctx context.Context, name string, prev *ssh.Client, h hop, cfg Config, o Options, timeout time.Duration) (*ssh.Client, error) {
	cr, err := authFor(h, cfg, o)
	if err != nil {
		return nil, &HostError{Host: name, Err: err}
	}
	defer cr.close()
	cb, algos, err := hostKeyCheck(name, h, cfg, o)
	if err != nil {
		return nil, err
	}
	sc := &ssh.ClientConfig{User: h.user, Auth: cr.methods, HostKeyCallback: cb, HostKeyAlgorithms: algos, ClientVersion: "SSH-2.0-kforge"}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var conn net.Conn
	if prev == nil {
		conn, err = (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext(actx, "tcp", h.addr)
		if err == nil {
			conn = o.Traffic.count(conn)
		}
	} else {
		conn, err = prev.DialContext(actx, "tcp", h.addr)
	}
	dialHint := fmt.Sprintf("check that %s is up, that sshd listens on port %s and that no firewall is in the way; try: ssh -p %s %s@%s true", h.label, portOf(h.addr), portOf(h.addr), h.user, hostOf(h.addr))
	if err != nil {
		if actx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %s", timeout)
		}
		return nil, &DialError{Host: name, Addr: h.label, Err: err, Hint: dialHint}
	}
	stop := context.AfterFunc(actx, func() { conn.Close() })
	cc, chans, reqs, err := ssh.NewClientConn(conn, h.addr, sc)
	if !stop() {
		// The deadline closed the connection under the handshake.
		if err == nil {
			cc.Close()
		}
		if ctx.Err() != nil {
			return nil, &DialError{Host: name, Addr: h.label, Err: ctx.Err(), Hint: dialHint}
		}
		return nil, &DialError{Host: name, Addr: h.label, Err: fmt.Errorf("SSH handshake did not finish within %s", timeout), Hint: dialHint}
	}
	if err != nil {
		conn.Close()
		var hk *HostKeyError
		if errors.As(err, &hk) {
			return nil, hk
		}
		if msg := err.Error(); strings.Contains(msg, "unable to authenticate") || strings.Contains(msg, "too many authentication failures") {
			hint := cr.problem
			if strings.Contains(msg, "too many authentication failures") {
				hint = "the server gave up before the right key was offered (MaxAuthTries): set ssh.identityFile so that only its key is offered from the agent"
			} else if hint == "" && len(cr.offered) == 0 {
				hint = "no credentials to offer: set ssh.identityFile, start an ssh-agent (SSH_AUTH_SOCK), or set ssh.passwordEnv"
			} else if hint == "" {
				key := h.identityFile
				if key == "" {
					key = "~/.ssh/id_ed25519"
				}
				hint = fmt.Sprintf("check that the public key is in ~%s/.ssh/authorized_keys on %s (ssh-copy-id -i %s -p %s %s@%s) and that ssh.user is right; try: ssh -i %s -p %s %s@%s true",
					h.user, h.label, key, portOf(h.addr), h.user, hostOf(h.addr), key, portOf(h.addr), h.user, hostOf(h.addr))
			}
			offered := cr.offered
			if len(offered) == 0 {
				offered = []string{"nothing"}
			}
			return nil, &AuthError{Host: name, Addr: h.label, User: h.user, Methods: offered, Err: err, Hint: hint}
		}
		return nil, &DialError{Host: name, Addr: h.label, Err: err, Hint: dialHint}
	}
	return ssh.NewClient(cc, chans, reqs), nil
}

func (h *SSH) keepalive(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	fails := 0
	for {
		select {
		case <-h.stopKA:
			return
		case <-t.C:
		}
		res := make(chan error, 1)
		go func() {
			_, _, err := h.client.SendRequest("keepalive@openssh.com", true, nil)
			res <- err
		}()
		select {
		case err := <-res:
			if err != nil {
				fails = 3
			} else {
				fails = 0
			}
		case <-time.After(every):
			fails++
		case <-h.stopKA:
			return
		}
		if fails >= 3 {
			h.log.Debug("ssh keepalive failed; closing connection", "host", h.name)
			h.client.Close()
			return
		}
	}
}

// Name implements Host.
func (h *SSH) Name() string { return h.name }

// Close ends the connection and the bastion connections it owns (not those Options.Jumps
// shares).
func (h *SSH) Close() error {
	var err error
	h.once.Do(func() {
		close(h.stopKA)
		h.sftpMu.Lock()
		if h.sftp != nil {
			h.sftp.close()
			h.sftp = nil
		}
		h.sftpMu.Unlock()
		err = h.client.Close()
		for i := len(h.chain) - 1; i >= 0; i-- {
			h.chain[i].Close()
		}
	})
	return err
}

// proc is a started remote command.
type proc struct {
	sess   *ssh.Session
	stdin  io.WriteCloser
	stdout io.Reader // set when the caller gave no stdout writer
	tail   *tailBuffer
	filter *sudoFilter // password sudo only
	ready  chan struct{}
}

// sudoPath puts /usr/local/sbin and /usr/local/bin, where kforge installs the bundle's binaries,
// first on the PATH of commands run under sudo: sudo's secure_path replaces the login's PATH,
// and RHEL's leaves them out (a command such as ctr was then "not found").
const sudoPath = `PATH=/usr/local/sbin:/usr/local/bin:$PATH; export PATH; `

// wrap turns command into what runs on the host: as is for root, under sudo otherwise (with
// sudoPath). Under sudo, the shell first prints a unique marker with its process group on stderr, so the caller
// knows the command runs (and sudo's prompt, if any, is over) and can end the whole group at a
// deadline: sshd sends signals with the login user's rights, which cannot reach root processes.
// With a sudo password, sudo prompts with a unique prompt that the filter answers on stdin.
func (h *SSH) wrap(command string) (string, *sudoFilter) {
	if h.sudo != SudoPasswordless && h.sudo != SudoPassword {
		return command, nil
	}
	nonce := make([]byte, 8)
	rand.Read(nonce)
	n := hex.EncodeToString(nonce)
	f := &sudoFilter{prompt: []byte("[kforge-sudo-" + n + "]"), marker: []byte("kforge-run-" + n + ":"), password: h.sudoPW}
	script := `read -r _ _ _ _ g _ </proc/$$/stat; printf '` + string(f.marker) + `%s\n' "$g" >&2; ` + sudoPath + `exec sh -c "$1"`
	if h.sudo == SudoPasswordless {
		return "sudo -n -- sh -c " + Quote(script) + " kforge " + Quote(command), f
	}
	return "sudo -S -p " + Quote(string(f.prompt)) + " -- sh -c " + Quote(script) + " kforge " + Quote(command), f
}

func (h *SSH) start(command string, stdout, stderr io.Writer) (*proc, error) {
	sess, err := h.newSession()
	if err != nil {
		return nil, &CommandError{Host: h.name, Command: command, ExitCode: -1, Reason: "cannot open an SSH session: " + err.Error(),
			Hint: fmt.Sprintf("the connection to %s was lost or sshd refused a new session (MaxSessions)", h.addr)}
	}
	p := &proc{sess: sess, tail: &tailBuffer{max: 4096}, ready: make(chan struct{})}
	if p.stdin, err = sess.StdinPipe(); err != nil {
		sess.Close()
		return nil, err
	}
	if stdout != nil {
		sess.Stdout = stdout
	} else if p.stdout, err = sess.StdoutPipe(); err != nil {
		sess.Close()
		return nil, err
	}
	var errw io.Writer = p.tail
	if stderr != nil {
		errw = io.MultiWriter(p.tail, stderr)
	}
	wrapped, filter := h.wrap(command)
	if filter != nil {
		filter.out, filter.tail, filter.stdin, filter.ready = errw, p.tail, p.stdin, p.ready
		filter.rejected = make(chan struct{})
		p.filter = filter
		sess.Stderr = filter
	} else {
		sess.Stderr = errw
		close(p.ready)
	}
	if err := sess.Start(wrapped); err != nil {
		sess.Close()
		return nil, &CommandError{Host: h.name, Command: command, ExitCode: -1, Reason: "cannot start: " + err.Error()}
	}
	return p, nil
}

// newSession opens a session channel. sshd frees a finished session's slot a moment after the
// channel closes, so a refused open (nothing ran) is retried briefly; this is the one retry
// besides dialing.
func (h *SSH) newSession() (*ssh.Session, error) {
	wait := 10 * time.Millisecond
	for deadline := time.Now().Add(3 * time.Second); ; {
		sess, err := h.client.NewSession()
		var oe *ssh.OpenChannelError
		if err == nil || !errors.As(err, &oe) || oe.Reason != ssh.ConnectionFailed || time.Now().After(deadline) {
			return sess, err
		}
		time.Sleep(wait)
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// Run implements Host.
func (h *SSH) Run(ctx context.Context, c Cmd) error {
	start := time.Now()
	select {
	case h.sessions <- struct{}{}:
		defer func() { <-h.sessions }()
	case <-ctx.Done():
		return h.ctxError(ctx, "command "+short(c.Command), time.Since(start), nil)
	}
	if err := ctx.Err(); err != nil {
		return h.ctxError(ctx, "command "+short(c.Command), 0, nil)
	}
	p, err := h.start(c.Command, orDiscard(c.Stdout), c.Stderr)
	if err != nil {
		return err
	}
	defer p.sess.Close()
	go func() {
		select {
		case <-p.ready:
		case <-ctx.Done():
			return
		}
		if c.Stdin != nil {
			io.Copy(p.stdin, c.Stdin)
		}
		p.stdin.Close()
	}()
	done := make(chan error, 1)
	go func() { done <- p.sess.Wait() }()
	var rejected <-chan struct{}
	if p.filter != nil {
		rejected = p.filter.rejected
	}
	var runErr error
	select {
	case err = <-done:
	case <-rejected:
		p.sess.Signal(ssh.SIGTERM)
		p.sess.Close()
		<-done
		runErr = &CommandError{Host: h.name, Command: c.Command, ExitCode: -1, Reason: "sudo rejected the password", Stderr: p.tail.Bytes(),
			Hint: fmt.Sprintf("the password in $%s is not %s's sudo password on this host", h.sudoEnv, h.user)}
	case <-ctx.Done():
		h.stop(p, done)
		runErr = h.ctxError(ctx, "command "+short(c.Command), time.Since(start), p)
	}
	if p.filter != nil {
		p.filter.flush()
	}
	code := 0
	if runErr == nil && err != nil {
		runErr = h.exitError(c.Command, err, p.tail.Bytes())
		code = -1
		var ce *CommandError
		if errors.As(runErr, &ce) {
			code = ce.ExitCode
		}
	} else if runErr != nil {
		code = -1
	}
	h.log.Debug("remote command", "host", h.name, "command", Redact(c.Command, h.sudoPW.Reveal()), "duration", time.Since(start), "exit", code)
	return runErr
}

// stop ends a remote command whose context is done: SIGTERM to the command (through sshd, and
// to its process group as root when it runs under sudo), a moment to exit, then SIGKILL and
// closing the session.
func (h *SSH) stop(p *proc, done <-chan error) {
	pg := p.filter.group()
	p.sess.Signal(ssh.SIGTERM)
	if pg > 1 {
		h.killGroup(pg, "TERM")
	}
	select {
	case <-done:
		return
	case <-time.After(2 * time.Second):
	}
	p.sess.Signal(ssh.SIGKILL)
	if pg > 1 {
		h.killGroup(pg, "KILL")
	}
	p.sess.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}

// killGroup sends sig to process group pg on the host, as root, on a new session; bounded, and
// never itself stopped by stop.
func (h *SSH) killGroup(pg int, sig string) {
	p, err := h.start(fmt.Sprintf("kill -%s -- -%d 2>/dev/null || true", sig, pg), io.Discard, nil)
	if err != nil {
		return
	}
	defer p.sess.Close()
	p.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- p.sess.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	h.log.Debug("killed remote process group", "host", h.name, "pgid", pg, "signal", sig)
}

func (h *SSH) ctxError(ctx context.Context, op string, after time.Duration, p *proc) error {
	var tail []byte
	if p != nil {
		tail = p.tail.Bytes()
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &TimeoutError{Host: h.name, Op: op, After: after, Stderr: tail,
			Hint: fmt.Sprintf("it was stopped on the host; look at what it waits for there (ssh %s@%s, journalctl -e) or allow more time", h.user, hostOf(h.addr))}
	}
	return &HostError{Host: h.name, Err: fmt.Errorf("%s: %w", op, ctx.Err())}
}

func (h *SSH) exitError(command string, err error, tail []byte) error {
	ce := &CommandError{Host: h.name, Command: command, ExitCode: -1, Stderr: tail}
	var ee *ssh.ExitError
	var em *ssh.ExitMissingError
	switch {
	case errors.As(err, &ee):
		ce.ExitCode = ee.ExitStatus()
		if ee.Signal() != "" {
			ce.Signal = ee.Signal()
		}
	case errors.As(err, &em):
		ce.Reason = "the connection was lost before the command finished"
		ce.Hint = "the host may have rebooted or the network dropped; re-run once it is reachable"
	default:
		ce.Reason = err.Error()
	}
	switch t := string(tail); {
	case strings.Contains(t, "sudo: a password is required"):
		ce.Hint = fmt.Sprintf("%s needs a password for sudo on this host: set ssh.sudo: password and ssh.sudoPasswordEnv, or give %s a NOPASSWD sudoers rule", h.user, h.user)
	case strings.Contains(t, "is not in the sudoers file") || strings.Contains(t, "is not allowed to execute"):
		ce.Hint = fmt.Sprintf("%s may not use sudo on this host: add a sudoers rule for %s, or log in as root (ssh.user)", h.user, h.user)
	}
	return ce
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// sudoFilter sits on stderr of a command run under sudo: it answers sudo's prompt with the
// password (on stdin, once), spots the marker (and process group) printed once the command
// runs, and passes everything after it through.
type sudoFilter struct {
	prompt, marker []byte
	password       Secret
	out            io.Writer // tail + caller's stderr
	tail           *tailBuffer
	stdin          io.Writer
	ready          chan struct{}
	rejected       chan struct{}

	mu      sync.Mutex
	buf     []byte
	prompts int
	passed  bool
	pgid    int
}

func (f *sudoFilter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.passed {
		return f.out.Write(p)
	}
	f.buf = append(f.buf, p...)
	for {
		if i := bytes.Index(f.buf, f.prompt); i >= 0 {
			f.buf = append(f.buf[:i:i], f.buf[i+len(f.prompt):]...)
			f.prompts++
			if f.prompts == 1 && f.password != "" {
				io.WriteString(f.stdin, f.password.Reveal()+"\n")
			} else if f.prompts == 2 || f.password == "" {
				close(f.rejected)
			}
			continue
		}
		i := bytes.Index(f.buf, f.marker)
		if i < 0 {
			return len(p), nil
		}
		j := bytes.IndexByte(f.buf[i:], '\n')
		if j < 0 {
			return len(p), nil // the rest of the marker line is still on its way
		}
		fmt.Sscan(string(f.buf[i+len(f.marker):i+j]), &f.pgid)
		rest := f.buf[i+j+1:]
		f.buf = nil
		f.passed = true
		close(f.ready)
		if len(rest) > 0 {
			f.out.Write(rest)
		}
		return len(p), nil
	}
}

// group is the remote command's process group, once known.
func (f *sudoFilter) group() int {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pgid
}

// flush keeps what sudo said before the command ran (its error, when it refused) for the error.
func (f *sudoFilter) flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.passed && len(f.buf) > 0 {
		f.tail.Write(f.buf)
		f.buf = nil
	}
}
