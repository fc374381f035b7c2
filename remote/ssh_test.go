package remote

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kforge/kforge/internal/testenv"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

// fixture is a test server, a client key it accepts and a known_hosts file that knows it.
type fixture struct {
	srv  *testServer
	dir  string
	key  string
	cfg  Config
	env  map[string]string
	logs *testenv.SyncBuffer
	opts Options
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{srv: newTestServer(t), dir: t.TempDir(), env: map[string]string{}, logs: &testenv.SyncBuffer{}}
	var signer ssh.Signer
	f.key, signer = clientKey(t, f.dir, "id_ed25519", "")
	f.srv.authorize(signer.PublicKey())
	kh := filepath.Join(f.dir, "known_hosts")
	line := knownhosts.Line([]string{knownhosts.Normalize(f.srv.addr)}, f.srv.hostKey.PublicKey())
	if err := os.WriteFile(kh, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(f.srv.addr)
	p, _ := strconv.Atoi(port)
	f.env["HOME"] = f.dir
	f.cfg = Config{Name: "n1", Address: host, Port: p, User: "root", IdentityFile: f.key, KnownHostsFile: kh, Sudo: SudoNone, KeepAlive: -1}
	f.opts = Options{Logger: slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Getenv: func(k string) string { return f.env[k] }, SSHConfigFile: "none"}
	return f
}

func (f *fixture) dial(t *testing.T) *SSH {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := Dial(ctx, f.cfg, f.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestSSHRunsCommandsOnOneConnection(t *testing.T) {
	f := newFixture(t)
	h := f.dial(t)
	ctx := ctxT(t, 20*time.Second)
	var out bytes.Buffer
	if err := h.Run(ctx, Cmd{Command: "tr a-z A-Z", Stdin: strings.NewReader("hello"), Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "HELLO" {
		t.Errorf("stdout %q", out.String())
	}
	for i := range 5 {
		if _, err := Output(ctx, h, fmt.Sprint("echo ", i)); err != nil {
			t.Fatal(err)
		}
	}
	err := h.Run(ctx, Cmd{Command: "echo first >&2; echo 'it broke' >&2; exit 42"})
	var ce *CommandError
	if !errors.As(err, &ce) || ce.ExitCode != 42 || ce.Host != "n1" || !strings.Contains(string(ce.Stderr), "it broke") {
		t.Fatalf("want exit 42 with stderr tail, got %#v", err)
	}
	if n := f.srv.conns.Load(); n != 1 {
		t.Errorf("%d TCP connections for 7 commands, want 1", n)
	}
	logs := f.logs.String()
	if !strings.Contains(logs, `msg="remote command" host=n1 command="exit 42"`) && !strings.Contains(logs, "exit=42") {
		t.Errorf("failed command not logged with its exit code:\n%s", logs)
	}
	if strings.Count(logs, `msg="remote command"`) != 7 || !strings.Contains(logs, "duration=") {
		t.Errorf("want 7 command log lines with durations:\n%s", logs)
	}
}

// TestSSHTraffic: the workstation's bytes are counted as they cross its connection: an upload
// of 1 MiB of random data adds at least 1 MiB sent, and little received.
func TestSSHTraffic(t *testing.T) {
	f := newFixture(t)
	var traffic Traffic
	f.opts.Traffic = &traffic
	h := f.dial(t)
	ctx := ctxT(t, 20*time.Second)
	if _, err := Output(ctx, h, "echo hello"); err != nil {
		t.Fatal(err)
	}
	sent0, recv0 := traffic.Sent(), traffic.Received()
	if sent0 == 0 || recv0 == 0 {
		t.Fatalf("after a handshake and a command: sent %d, received %d", sent0, recv0)
	}
	data := make([]byte, 1<<20)
	rand.Read(data)
	file := Bytes(filepath.Join(t.TempDir(), "blob"), data, 0o600)
	file.UID, file.GID = os.Getuid(), os.Getgid()
	if err := h.Upload(ctx, file); err != nil {
		t.Fatal(err)
	}
	if sent := traffic.Sent() - sent0; sent < 1<<20 || sent > 1<<20+256<<10 {
		t.Errorf("an upload of 1 MiB sent %d bytes", sent)
	}
	if recv := traffic.Received() - recv0; recv > 128<<10 {
		t.Errorf("an upload of 1 MiB received %d bytes", recv)
	}
}

func TestSSHUploadIsAtomicAndSkipsUnchangedFiles(t *testing.T) {
	f := newFixture(t)
	h := f.dial(t)
	ctx := ctxT(t, 20*time.Second)
	dst := filepath.Join(t.TempDir(), "etc", "kforge", "secret.key")
	file := Bytes(dst, []byte("key material\n"), 0o600)
	file.UID, file.GID = os.Getuid(), os.Getgid()
	if err := h.Upload(ctx, file); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(dst)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("stat %v, %v", st, err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "key material\n" {
		t.Errorf("content %q", b)
	}
	ino := st.Sys().(*syscall.Stat_t).Ino
	file = Bytes(dst, []byte("key material\n"), 0o600)
	file.UID, file.GID = os.Getuid(), os.Getgid()
	if err := h.Upload(ctx, file); err != nil {
		t.Fatal(err)
	}
	st2, _ := os.Stat(dst)
	if st2.Sys().(*syscall.Stat_t).Ino != ino || !strings.Contains(f.logs.String(), "skipped=true") {
		t.Error("unchanged file was rewritten")
	}
	// A change lands by rename: a new inode, no temporary file left behind.
	file = Bytes(dst, []byte("new key material\n"), 0o640)
	file.UID, file.GID = -1, -1
	if err := h.Upload(ctx, file); err != nil {
		t.Fatal(err)
	}
	st3, _ := os.Stat(dst)
	if st3.Sys().(*syscall.Stat_t).Ino == ino || st3.Mode().Perm() != 0o640 {
		t.Errorf("changed file not replaced by rename (mode %v)", st3.Mode())
	}
	entries, _ := os.ReadDir(filepath.Dir(dst))
	if len(entries) != 1 {
		t.Errorf("leftovers beside the target: %v", entries)
	}
}

func TestSSHUploadSurvivesDisconnectMidway(t *testing.T) {
	f := newFixture(t)
	dst := filepath.Join(t.TempDir(), "blob")
	old := bytes.Repeat([]byte("old "), 1000)
	os.WriteFile(dst, old, 0o644)
	f.srv.dropSFTPAfter = 256 << 10
	h := f.dial(t)
	big := make([]byte, 4<<20)
	rand.Read(big)
	file := Bytes(dst, big, 0o644)
	file.UID, file.GID = -1, -1
	err := h.Upload(ctxT(t, 20*time.Second), file)
	if err == nil {
		t.Fatal("upload over a connection cut midway succeeded")
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, old) {
		t.Fatalf("target changed after a failed upload: %d bytes", len(got))
	}
	f.srv.dropSFTPAfter = 0
	h2 := f.dial(t)
	file = Bytes(dst, big, 0o644)
	file.UID, file.GID = -1, -1
	if err := h2.Upload(ctxT(t, 20*time.Second), file); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, big) {
		t.Fatalf("target is neither old nor new: %d bytes", len(got))
	}
}

func TestSSHHungCommandEndsAtDeadline(t *testing.T) {
	f := newFixture(t)
	h := f.dial(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	// Long enough for the command to start even on a loaded machine (its stderr is asserted).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err := h.Run(ctx, Cmd{Command: "echo $$ > " + Quote(pidFile) + "; echo waiting >&2; exec sleep 300"})
	var te *TimeoutError
	if !errors.As(err, &te) || te.Host != "n1" || !strings.Contains(string(te.Stderr), "waiting") {
		t.Fatalf("want TimeoutError with stderr tail, got %v", err)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("returned after %s", d)
	}
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 {
		t.Fatal("no pid recorded")
	}
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("remote process %d still running after the deadline", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The connection is still usable.
	if _, err := Output(ctxT(t, 10*time.Second), h, "true"); err != nil {
		t.Fatal(err)
	}
}

func TestSSHAuthFailureIsTyped(t *testing.T) {
	f := newFixture(t)
	f.cfg.IdentityFile, _ = clientKey(t, f.dir, "other", "")
	f.cfg.DialRetry = 5 * time.Second
	_, err := Dial(ctxT(t, 20*time.Second), f.cfg, f.opts)
	var ae *AuthError
	if !errors.As(err, &ae) {
		t.Fatalf("want AuthError, got %v", err)
	}
	d := strings.Join(ae.Details(), "\n")
	if !strings.Contains(d, "authorized_keys") || !strings.Contains(d, "key "+f.cfg.IdentityFile) {
		t.Errorf("details do not say what was offered and what to do:\n%s", d)
	}
	if n := f.srv.conns.Load(); n != 1 {
		t.Errorf("auth failure retried: %d connections", n)
	}
}

func TestSSHEncryptedKeyPassphraseFromEnv(t *testing.T) {
	f := newFixture(t)
	key, s := clientKey(t, f.dir, "enc", "sesame")
	f.srv.authorize(s.PublicKey())
	f.cfg.IdentityFile, f.cfg.PassphraseEnv = key, "KEY_PASS"
	_, err := Dial(ctxT(t, 20*time.Second), f.cfg, f.opts)
	var ae *AuthError
	if !errors.As(err, &ae) || !strings.Contains(ae.Hint, "$KEY_PASS") {
		t.Fatalf("without the passphrase: want AuthError naming $KEY_PASS, got %v", err)
	}
	f.env["KEY_PASS"] = "sesame"
	f.dial(t)
	f.env["KEY_PASS"] = "wrong"
	if _, err := Dial(ctxT(t, 20*time.Second), f.cfg, f.opts); err == nil || !strings.Contains(err.Error(), "passphrase in $KEY_PASS is wrong") {
		t.Fatalf("wrong passphrase: %v", err)
	}
	if strings.Contains(f.logs.String(), "sesame") {
		t.Error("passphrase in the log")
	}
}

func TestSSHAgentOffersOnlyTheIdentityFileKey(t *testing.T) {
	f := newFixture(t)
	kr := agent.NewKeyring()
	for range 8 { // more than the server's MaxAuthTries of 6
		_, priv, _ := ed25519.GenerateKey(rand.Reader)
		kr.Add(agent.AddedKey{PrivateKey: priv})
	}
	// The wanted key is encrypted on disk (no passphrase configured) but loaded in the agent.
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	kr.Add(agent.AddedKey{PrivateKey: priv})
	pub, _ := ssh.NewPublicKey(priv.Public())
	blk, _ := ssh.MarshalPrivateKeyWithPassphrase(priv, "", []byte("x"))
	keyFile := filepath.Join(f.dir, "agent_key")
	os.WriteFile(keyFile, pemEncode(blk), 0o600)
	f.srv.authorize(pub)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go agent.ServeAgent(kr, c)
		}
	}()
	f.env["SSH_AUTH_SOCK"] = sock
	f.cfg.Agent, f.cfg.IdentityFile = true, keyFile
	f.dial(t)
	if n := f.srv.keyAttempts.Load(); n > 2 {
		t.Errorf("%d keys offered; only the identity file's key should be", n)
	}
}

func TestSSHPasswordAuthFromEnv(t *testing.T) {
	f := newFixture(t)
	f.srv.password = "pw-123"
	f.cfg.IdentityFile, f.cfg.PasswordEnv = "", "NODE_PW"
	f.env["NODE_PW"] = "pw-123"
	h := f.dial(t)
	if _, err := Output(ctxT(t, 10*time.Second), h, "true"); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(f.logs.String(), "pw-123") {
		t.Error("password in the log")
	}
}

func TestSSHCertificateAuth(t *testing.T) {
	f := newFixture(t)
	key, s := clientKey(t, f.dir, "certkey", "")
	_, caPriv, _ := ed25519.GenerateKey(rand.Reader)
	ca, _ := ssh.NewSignerFromKey(caPriv)
	cert := &ssh.Certificate{Key: s.PublicKey(), CertType: ssh.UserCert, ValidPrincipals: []string{"root"}, ValidBefore: ssh.CertTimeInfinity}
	if err := cert.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(key+"-cert.pub", ssh.MarshalAuthorizedKey(cert), 0o644)
	f.srv.authorize(cert) // only the certificate, not the bare key
	f.cfg.IdentityFile = key
	f.dial(t)
}

func TestSSHUnknownHostKeyStopsWithFingerprintAndFlag(t *testing.T) {
	f := newFixture(t)
	kh := filepath.Join(f.dir, "new_known_hosts")
	f.cfg.KnownHostsFile = kh
	_, err := Dial(ctxT(t, 20*time.Second), f.cfg, f.opts)
	var hk *HostKeyError
	if !errors.As(err, &hk) || !hk.Unknown {
		t.Fatalf("want unknown HostKeyError, got %v", err)
	}
	fp := ssh.FingerprintSHA256(f.srv.hostKey.PublicKey())
	if !strings.Contains(hk.Error(), fp) || !strings.Contains(hk.Hint, "--accept-new-host-keys") || !strings.Contains(hk.Hint, "ssh-keyscan") {
		t.Errorf("message lacks fingerprint or the flag:\n%s", strings.Join(hk.Details(), "\n"))
	}
	if _, err := os.Stat(kh); err == nil {
		t.Error("known_hosts written without --accept-new-host-keys")
	}
	f.cfg.AcceptNewHostKeys = true
	f.dial(t)
	b, _ := os.ReadFile(kh)
	if !strings.HasPrefix(string(b), knownhosts.Normalize(f.srv.addr)+" ssh-ed25519 ") {
		t.Errorf("known_hosts = %q", b)
	}
	f.cfg.AcceptNewHostKeys = false
	f.dial(t) // now known
}

func TestSSHHostKeyMismatchIsRefusedNotRetried(t *testing.T) {
	f := newFixture(t)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	op, _ := ssh.NewPublicKey(other.Public())
	os.WriteFile(f.cfg.KnownHostsFile, []byte(knownhosts.Line([]string{knownhosts.Normalize(f.srv.addr)}, op)+"\n"), 0o600)
	f.cfg.DialRetry, f.cfg.AcceptNewHostKeys = 5*time.Second, true
	_, err := Dial(ctxT(t, 20*time.Second), f.cfg, f.opts)
	var hk *HostKeyError
	if !errors.As(err, &hk) || hk.Unknown {
		t.Fatalf("want mismatch HostKeyError, got %v", err)
	}
	msg := hk.Error()
	if !strings.Contains(msg, ssh.FingerprintSHA256(op)) || !strings.Contains(msg, ssh.FingerprintSHA256(f.srv.hostKey.PublicKey())) {
		t.Errorf("message lacks both fingerprints: %s", msg)
	}
	if !strings.Contains(hk.Hint, "ssh-keygen -f") {
		t.Errorf("hint %q", hk.Hint)
	}
	if n := f.srv.conns.Load(); n != 1 {
		t.Errorf("mismatch retried: %d connections", n)
	}
	// A pinned key overrides known_hosts: the right one connects, a wrong one is refused.
	f.cfg.HostKey = string(ssh.MarshalAuthorizedKey(f.srv.hostKey.PublicKey()))
	f.dial(t)
	f.cfg.HostKey = string(ssh.MarshalAuthorizedKey(op))
	if _, err := Dial(ctxT(t, 20*time.Second), f.cfg, f.opts); !errors.As(err, &hk) || !strings.Contains(hk.Error(), "pinned") {
		t.Fatalf("wrong pinned key: %v", err)
	}
}

func TestSSHDialRetriesWhileHostBoots(t *testing.T) {
	f := newFixture(t)
	addr := f.srv.addr
	f.srv.ln.Close()
	f.cfg.DialRetry = 10 * time.Second
	go func() {
		time.Sleep(700 * time.Millisecond)
		f.srv.listen(addr)
	}()
	start := time.Now()
	f.dial(t)
	if time.Since(start) < 500*time.Millisecond {
		t.Error("connected before the server listened")
	}
	// Without a retry window, a refused connection fails at once with a hint.
	f.srv.ln.Close()
	f.cfg.DialRetry = 0
	_, err := Dial(ctxT(t, 20*time.Second), f.cfg, f.opts)
	var de *DialError
	if !errors.As(err, &de) || !strings.Contains(de.Hint, "ssh -p") {
		t.Fatalf("want DialError with hint, got %v", err)
	}
}

func TestSSHBastionChain(t *testing.T) {
	target := newFixture(t)
	b1 := newTestServer(t)
	b2 := newTestServer(t)
	bkey, bs := clientKey(t, target.dir, "bastion_key", "")
	b1.authorize(bs.PublicKey())
	b2.authorize(bs.PublicKey())
	target.cfg.Bastions = []Bastion{
		{Address: b1.addr, User: "jump", IdentityFile: bkey, HostKey: string(ssh.MarshalAuthorizedKey(b1.hostKey.PublicKey()))},
		{Address: b2.addr, User: "jump", IdentityFile: bkey, HostKey: string(ssh.MarshalAuthorizedKey(b2.hostKey.PublicKey()))},
	}
	h := target.dial(t)
	if out, err := Output(ctxT(t, 10*time.Second), h, "echo through"); err != nil || string(out) != "through\n" {
		t.Fatalf("%q %v", out, err)
	}
	if b1.conns.Load() != 1 || b2.conns.Load() != 1 || target.srv.conns.Load() != 1 {
		t.Errorf("connections: b1 %d b2 %d target %d, want one each", b1.conns.Load(), b2.conns.Load(), target.srv.conns.Load())
	}
	// The second bastion's key is checked too.
	target.cfg.Bastions[1].HostKey = string(ssh.MarshalAuthorizedKey(b1.hostKey.PublicKey()))
	_, err := Dial(ctxT(t, 20*time.Second), target.cfg, target.opts)
	var hk *HostKeyError
	if !errors.As(err, &hk) || !strings.Contains(hk.Addr, "bastion "+b2.addr) {
		t.Fatalf("want host key error for the second bastion, got %v", err)
	}
}

// TestSSHBastionShared: hosts dialled at once with one Jumps share one connection to their
// bastion (a fleet behind a bastion would otherwise start one handshake per host there, which
// sshd's MaxStartups drops); a host's Close leaves it to the others, Jumps.Close ends it, and
// the next host dials it again.
func TestSSHBastionShared(t *testing.T) {
	a, b := newFixture(t), newFixture(t)
	line := knownhosts.Line([]string{knownhosts.Normalize(b.srv.addr)}, b.srv.hostKey.PublicKey())
	kh, err := os.OpenFile(a.cfg.KnownHostsFile, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(kh, line)
	kh.Close()
	b.cfg.KnownHostsFile = a.cfg.KnownHostsFile // one inventory, one known_hosts
	bastion := newTestServer(t)
	bkey, bs := clientKey(t, a.dir, "bastion_key", "")
	bastion.authorize(bs.PublicKey())
	jumps := &Jumps{}
	t.Cleanup(func() { jumps.Close() })
	for _, f := range []*fixture{a, b} {
		f.cfg.Bastions = []Bastion{{Address: bastion.addr, User: "jump", IdentityFile: bkey, HostKey: string(ssh.MarshalAuthorizedKey(bastion.hostKey.PublicKey()))}}
		f.opts.Jumps = jumps
	}
	hosts := make([]*SSH, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, f := range []*fixture{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hosts[i], errs[i] = Dial(ctxT(t, 20*time.Second), f.cfg, f.opts)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	echo := func(h *SSH) error {
		out, err := Output(ctxT(t, 10*time.Second), h, "echo through")
		if err == nil && string(out) != "through\n" {
			err = fmt.Errorf("output %q", out)
		}
		return err
	}
	for _, h := range hosts {
		if err := echo(h); err != nil {
			t.Fatalf("%s: %v", h.Name(), err)
		}
	}
	if n := bastion.conns.Load(); n != 1 {
		t.Errorf("the bastion had %d connections for two hosts, want 1", n)
	}
	hosts[0].Close()
	if err := echo(hosts[1]); err != nil {
		t.Errorf("after the other host closed: %v", err)
	}
	jumps.Close()
	if err := echo(hosts[1]); err == nil {
		t.Errorf("a command ran after its bastion connection was closed")
	}
	hosts[1].Close()
	if err := echo(a.dial(t)); err != nil || bastion.conns.Load() != 2 {
		t.Errorf("a host dialled after Jumps.Close: %v, bastion connections %d, want a second one", err, bastion.conns.Load())
	}
}

func TestSSHSudoWithoutPassword(t *testing.T) {
	f := newFixture(t)
	f.cfg.User, f.cfg.Sudo = "kforge", SudoAuto // auto: a non-root user goes through sudo -n
	h := f.dial(t)
	ctx := ctxT(t, 20*time.Second)
	out, err := Output(ctx, h, `echo "ran=$FAKE_SUDO_RAN"; cat`)
	if err != nil || string(out) != "ran=1\n" {
		t.Fatalf("got %q, %v", out, err)
	}
	// A host that wants a password says so, with the fix.
	f.srv.sudoPassword = "s3cret"
	err = h.Run(ctx, Cmd{Command: "true"})
	var ce *CommandError
	if !errors.As(err, &ce) || !strings.Contains(ce.Hint, "ssh.sudo: password") {
		t.Fatalf("want CommandError hinting at sudo: password, got %v", err)
	}
}

func TestSSHSudoWithPassword(t *testing.T) {
	f := newFixture(t)
	f.srv.sudoPassword = "s3cret pw"
	f.cfg.User, f.cfg.Sudo, f.cfg.SudoPasswordEnv = "kforge", SudoPassword, "SUDO_PW"
	if _, err := Dial(ctxT(t, 10*time.Second), f.cfg, f.opts); err == nil || !strings.Contains(err.Error(), "$SUDO_PW") {
		t.Fatalf("unset password variable: %v", err)
	}
	f.env["SUDO_PW"] = "s3cret pw"
	h := f.dial(t)
	ctx := ctxT(t, 20*time.Second)
	var out, errb bytes.Buffer
	err := h.Run(ctx, Cmd{Command: `echo "ran=$FAKE_SUDO_RAN"; echo note >&2; cat`, Stdin: strings.NewReader("payload\n"), Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "ran=1\npayload\n" || errb.String() != "note\n" {
		t.Errorf("stdout %q stderr %q: the command must see only its own stdin, the caller only its output", out.String(), errb.String())
	}
	// NOPASSWD rules (sudo does not prompt): the password is not fed to the command.
	f.srv.sudoPassword = ""
	out.Reset()
	if err := h.Run(ctx, Cmd{Command: "cat", Stdin: strings.NewReader("x"), Stdout: &out}); err != nil || out.String() != "x" {
		t.Fatalf("without a prompt: %q, %v", out.String(), err)
	}
	// A wrong password is reported as such, quickly.
	f.srv.sudoPassword = "another"
	start := time.Now()
	err = h.Run(ctx, Cmd{Command: "true"})
	var ce *CommandError
	if !errors.As(err, &ce) || ce.Reason != "sudo rejected the password" || !strings.Contains(ce.Hint, "$SUDO_PW") {
		t.Fatalf("want rejected password error, got %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("took %s", time.Since(start))
	}
	if strings.Contains(f.logs.String(), "s3cret") || strings.Contains(strings.Join(ce.Details(), "\n"), "s3cret") {
		t.Error("sudo password leaked into the log or the error")
	}
}

func TestSSHUploadThroughSudo(t *testing.T) {
	if _, err := os.Stat("/usr/lib/openssh/sftp-server"); err != nil {
		testenv.Require(t, errors.New("OpenSSH sftp-server (Debian package openssh-sftp-server) is not installed"))
	}
	for _, pw := range []string{"", "pw"} {
		f := newFixture(t)
		f.srv.sudoPassword = pw
		f.cfg.User, f.cfg.Sudo = "kforge", SudoPasswordless
		if pw != "" {
			f.cfg.Sudo, f.cfg.SudoPasswordEnv, f.env["SPW"] = SudoPassword, "SPW", pw
		}
		h := f.dial(t)
		dst := filepath.Join(t.TempDir(), "a", "b", "file")
		file := Bytes(dst, []byte("through sudo\n"), 0o640)
		file.UID, file.GID = -1, -1
		if err := h.Upload(ctxT(t, 20*time.Second), file); err != nil {
			t.Fatalf("sudo password %q: %v", pw, err)
		}
		if b, _ := os.ReadFile(dst); string(b) != "through sudo\n" {
			t.Errorf("content %q", b)
		}
	}
}

func TestSSHHonoursSSHConfig(t *testing.T) {
	f := newFixture(t)
	host, port, _ := net.SplitHostPort(f.srv.addr)
	conf := filepath.Join(f.dir, "config")
	os.WriteFile(conf, []byte(fmt.Sprintf("Host node-alias\n  HostName %s\n  Port %s\n  User admin\n  IdentityFile %s\n", host, port, f.key)), 0o600)
	f.opts.SSHConfigFile = conf
	f.cfg.Address, f.cfg.Port, f.cfg.User, f.cfg.IdentityFile = "node-alias", 0, "", ""
	p, err := resolve(f.cfg, f.opts)
	if err != nil {
		t.Fatal(err)
	}
	if hp := p.hops[0]; hp.addr != f.srv.addr || hp.user != "admin" || hp.identityFile != f.key {
		t.Errorf("resolved %+v", hp)
	}
	f.dial(t)
	// ProxyJump turns into bastions.
	os.WriteFile(conf, []byte("Host behind\n  ProxyJump ops@jump1:2222,jump2\n"), 0o600)
	p, _ = resolve(Config{Address: "behind", User: "root"}, f.opts)
	if len(p.hops) != 3 || p.hops[0].addr != "jump1:2222" || p.hops[0].user != "ops" || p.hops[1].addr != "jump2:22" || p.hops[1].user != "root" {
		t.Errorf("hops %+v", p.hops)
	}
}

func TestSSHManyConcurrentCommandsOnOneConnection(t *testing.T) {
	f := newFixture(t)
	var cur, peak int
	var mu sync.Mutex
	f.srv.onExec = func() func() {
		mu.Lock()
		cur++
		peak = max(peak, cur)
		mu.Unlock()
		return func() { mu.Lock(); cur--; mu.Unlock() }
	}
	h := f.dial(t)
	ctx := ctxT(t, 30*time.Second)
	err := Each(ctx, make([]named, 40), Limits{Hosts: 40}, func(ctx context.Context, _ named) error {
		return h.Run(ctx, Cmd{Command: "sleep 0.05"})
	})
	if err != nil {
		t.Fatal(err)
	}
	if peak > maxCommandSessions || peak < 2 {
		t.Errorf("peak concurrent sessions %d, want 2..%d (sshd's MaxSessions is 10)", peak, maxCommandSessions)
	}
}

// freezer forwards TCP to addr until frozen, then holds every byte: a link that went down
// without a reset.
type freezer struct {
	ln     net.Listener
	frozen chan struct{}
}

func newFreezer(t *testing.T, addr string) *freezer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, frozen: make(chan struct{})}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); d.Close() })
			pipe := func(dst, src net.Conn) {
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					select {
					case <-f.frozen:
						return // drop and stop, keep both ends open
					default:
					}
					if err != nil {
						return
					}
					dst.Write(buf[:n])
				}
			}
			go pipe(d, c)
			go pipe(c, d)
		}
	}()
	return f
}

func TestSSHKeepaliveEndsADeadConnection(t *testing.T) {
	f := newFixture(t)
	fr := newFreezer(t, f.srv.addr)
	_, port, _ := net.SplitHostPort(fr.ln.Addr().String())
	f.cfg.Port, _ = strconv.Atoi(port)
	// known_hosts names the server's own port; pin the key instead.
	f.cfg.HostKey = string(ssh.MarshalAuthorizedKey(f.srv.hostKey.PublicKey()))
	f.cfg.KeepAlive = 250 * time.Millisecond
	h := f.dial(t)
	if _, err := Output(ctxT(t, 10*time.Second), h, "true"); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- h.Run(context.Background(), Cmd{Command: "sleep 2"}) }()
	time.Sleep(100 * time.Millisecond)
	close(fr.frozen)
	select {
	case err := <-errc:
		var ce *CommandError
		if !errors.As(err, &ce) || ce.ExitCode != -1 {
			t.Fatalf("want lost-connection CommandError, got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("command on a dead link hung; keepalives did not end the connection")
	}
}

func TestSSHDialTimeoutWhenTheServerNeverAnswers(t *testing.T) {
	f := newFixture(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() }) // accept and say nothing
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	f.cfg.Port, _ = strconv.Atoi(port)
	f.cfg.DialTimeout = 300 * time.Millisecond
	start := time.Now()
	_, err = Dial(ctxT(t, 10*time.Second), f.cfg, f.opts)
	var de *DialError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), "handshake did not finish within 300ms") {
		t.Fatalf("want DialError for the handshake timeout, got %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %s", d)
	}
}

func TestSSHHostCertificateFromKnownCA(t *testing.T) {
	f := newFixture(t)
	_, caPriv, _ := ed25519.GenerateKey(rand.Reader)
	ca, _ := ssh.NewSignerFromKey(caPriv)
	cert := &ssh.Certificate{Key: f.srv.hostKey.PublicKey(), CertType: ssh.HostCert, ValidPrincipals: []string{"127.0.0.1"}, ValidBefore: ssh.CertTimeInfinity}
	if err := cert.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	cs, err := ssh.NewCertSigner(cert, f.srv.hostKey)
	if err != nil {
		t.Fatal(err)
	}
	f.srv.cfg.AddHostKey(cs)
	line := "@cert-authority " + knownhosts.Normalize(f.srv.addr) + " " + string(ssh.MarshalAuthorizedKey(ca.PublicKey()))
	os.WriteFile(f.cfg.KnownHostsFile, []byte(line), 0o600)
	f.dial(t)
	// Another CA's certificate is not trusted.
	_, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	other, _ := ssh.NewSignerFromKey(otherPriv)
	os.WriteFile(f.cfg.KnownHostsFile, []byte("@cert-authority "+knownhosts.Normalize(f.srv.addr)+" "+string(ssh.MarshalAuthorizedKey(other.PublicKey()))), 0o600)
	_, err = Dial(ctxT(t, 10*time.Second), f.cfg, f.opts)
	var hk *HostKeyError
	if !errors.As(err, &hk) || !strings.Contains(hk.Got, "certified by ssh-ed25519 "+ssh.FingerprintSHA256(ca.PublicKey())) {
		t.Fatalf("a host certificate from an unknown CA: want HostKeyError naming its CA, got %v", err)
	}
}
