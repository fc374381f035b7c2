package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kforge/kforge/inventory"
)

type named string

func (n named) Name() string { return string(n) }

func TestEachWrapsEachErrorWithItsHostOnce(t *testing.T) {
	hosts := []named{"m1", "w1", "w2"}
	err := Each(context.Background(), hosts, Limits{Hosts: 2}, func(ctx context.Context, h named) error {
		switch h {
		case "m1":
			return &CommandError{Host: "m1", Command: "kubeadm init", ExitCode: 3, Stderr: []byte("boom\n")}
		case "w2":
			return errors.New("disk full")
		}
		return nil
	})
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 2 {
		t.Fatalf("want 2 errors, got %#v", err)
	}
	var ce *CommandError
	if !errors.As(err, &ce) || ce.ExitCode != 3 {
		t.Fatalf("errors.As did not find the CommandError in %v", err)
	}
	if got := errs[0].Error(); strings.Count(got, "m1") != 1 {
		t.Errorf("m1 error names its host %d times: %q", strings.Count(got, "m1"), got)
	}
	if got := errs[1].Error(); got != "w2: disk full" {
		t.Errorf("w2 error = %q, want %q", got, "w2: disk full")
	}
	d := strings.Join(errs.Details(), "\n")
	for _, want := range []string{"2 hosts failed:", `m1: command "kubeadm init" exited with status 3`, "    boom", "w2: disk full"} {
		if !strings.Contains(d, want) {
			t.Errorf("details lack %q:\n%s", want, d)
		}
	}
}

func TestEachRespectsConcurrencyLimit(t *testing.T) {
	var hosts []named
	for i := range 40 {
		hosts = append(hosts, named(fmt.Sprint("h", i)))
	}
	var cur, peak atomic.Int32
	err := Each(context.Background(), hosts, Limits{Hosts: 7}, func(ctx context.Context, h named) error {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
		cur.Add(-1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if p := peak.Load(); p > 7 || p < 2 {
		t.Errorf("peak concurrency %d, want 2..7", p)
	}
}

func TestEachStopOnErrorCancelsTheOthers(t *testing.T) {
	hosts := []named{"a", "b", "c", "d"}
	var ran atomic.Int32
	err := Each(context.Background(), hosts, Limits{Hosts: 1, StopOnError: true}, func(ctx context.Context, h named) error {
		ran.Add(1)
		if h == "a" {
			return errors.New("bad")
		}
		return nil
	})
	if err == nil || err.Error() != "a: bad" {
		t.Fatalf("err = %v, want a: bad", err)
	}
	if ran.Load() != 1 {
		t.Errorf("%d hosts ran after the first failed, want only the first", ran.Load())
	}
	// Without StopOnError every host runs.
	ran.Store(0)
	_ = Each(context.Background(), hosts, Limits{Hosts: 1}, func(ctx context.Context, h named) error {
		ran.Add(1)
		return errors.New("bad")
	})
	if ran.Load() != 4 {
		t.Errorf("%d hosts ran, want 4", ran.Load())
	}
}

func TestLargeUploadSlotsAreSharedAcrossHosts(t *testing.T) {
	var hosts []named
	for i := range 10 {
		hosts = append(hosts, named(fmt.Sprint("h", i)))
	}
	var cur, peak atomic.Int32
	var mu sync.Mutex
	err := Each(context.Background(), hosts, Limits{Hosts: 10, LargeUploads: 2}, func(ctx context.Context, h named) error {
		small, err := acquireUploadSlot(ctx, 1000)
		if err != nil {
			return err
		}
		small()
		release, err := acquireUploadSlot(ctx, LargeFile)
		if err != nil {
			return err
		}
		defer release()
		n := cur.Add(1)
		mu.Lock()
		if n > peak.Load() {
			peak.Store(n)
		}
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		cur.Add(-1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if peak.Load() != 2 {
		t.Errorf("peak large uploads %d, want 2", peak.Load())
	}
}

func TestWithHostDoesNotDoubleWrap(t *testing.T) {
	inner := &DialError{Host: "n1", Addr: "10.0.0.1:22", Err: errors.New("connection refused"), Hint: "check sshd"}
	if got := WithHost("n1", inner); got != error(inner) {
		t.Errorf("typed error for the same host was wrapped: %v", got)
	}
	w := WithHost("n2", errors.New("x"))
	if WithHost("n2", w) != w {
		t.Error("HostError wrapped twice")
	}
	if WithHost("n1", nil) != nil {
		t.Error("nil became non-nil")
	}
	d := WithHost("n3", fmt.Errorf("step: %w", inner)).(interface{ Details() []string }).Details()
	if d[0] != "n3: n1: cannot connect to 10.0.0.1:22: connection refused" || d[1] != "  hint: check sshd" {
		t.Errorf("details %q", d)
	}
}

func TestCommandErrorDetails(t *testing.T) {
	long := "kubeadm init --config /etc/kforge/kubeadm.yaml --upload-certs --skip-phases=addon/kube-proxy --v=5 --ignore-preflight-errors=all"
	e := &CommandError{Host: "m1", Command: long, ExitCode: 1, Stderr: []byte("line1\nline2\n"), Hint: "run journalctl -u kubelet on m1"}
	d := e.Details()
	if !strings.HasPrefix(d[0], `m1: command "kubeadm init`) || !strings.HasSuffix(d[0], `..." exited with status 1`) {
		t.Errorf("headline %q", d[0])
	}
	want := []string{"  command: " + long, "  stderr (last lines):", "    line1", "    line2", "  hint: run journalctl -u kubelet on m1"}
	if strings.Join(d[1:], "\n") != strings.Join(want, "\n") {
		t.Errorf("details:\n%s\nwant:\n%s", strings.Join(d[1:], "\n"), strings.Join(want, "\n"))
	}
}

func TestTailBufferKeepsLastLines(t *testing.T) {
	tb := &tailBuffer{max: 64}
	for i := range 100 {
		fmt.Fprintf(tb, "line %d\n", i)
	}
	got := string(tb.Bytes())
	if !strings.HasSuffix(got, "line 99\n") || strings.Contains(got, "line 1\n") || !strings.HasPrefix(got, "line ") {
		t.Errorf("tail = %q", got)
	}
	if len(got) > 64 {
		t.Errorf("tail longer than max: %d", len(got))
	}
	tb = &tailBuffer{max: 4096}
	for i := range 30 {
		fmt.Fprintf(tb, "l%d\n", i)
	}
	if got := string(tb.Bytes()); !strings.HasPrefix(got, "l10\n") || strings.Count(got, "\n") != 20 {
		t.Errorf("20-line tail = %q", got)
	}
}

func TestQuoteRoundTripsThroughSh(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	for _, s := range []string{"", "plain", "a b", "it's", `"$HOME" $(id) ; rm -rf / ` + "`x`", "tab\there\nnewline", "/etc/kubernetes/pki/ca.crt", "-n"} {
		out, err := exec.Command(sh, "-c", "printf %s "+Quote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("Quote(%q) = %s; sh printed %q, %v", s, Quote(s), out, err)
		}
	}
	if Quote("/usr/bin/kubelet") != "/usr/bin/kubelet" {
		t.Error("safe strings should stay unquoted")
	}
}

func TestSecretsNeverReachTheLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	pw := Secret("hunter2")
	log.Info("sudo", "password", pw, "cfg", Config{Name: "n1", PasswordEnv: "PW"})
	fmt.Fprintf(&buf, "%v %s %#v", pw, pw, pw)
	if strings.Contains(buf.String(), "hunter2") {
		t.Errorf("secret leaked: %s", buf.String())
	}
	if got := Redact("echo hunter2 | sudo -S", "hunter2", ""); got != "echo [redacted] | sudo -S" {
		t.Errorf("Redact = %q", got)
	}
}

func TestConfigForMapsInventoryNode(t *testing.T) {
	no := false
	n := inventory.Node{
		Host: inventory.Host{Name: "w1", Address: "198.51.100.7"},
		Role: inventory.RoleWorker,
		SSH: inventory.SSH{User: "kforge", Port: 2222, IdentityFile: "~/.ssh/id_k", PassphraseEnv: "PP", PasswordEnv: "PW",
			Agent: &no, KnownHostsFile: "/kh", HostKey: "ssh-ed25519 AAAA", Sudo: "password", SudoPasswordEnv: "SPW",
			Bastions: []inventory.Bastion{{Address: "bastion:2200", User: "jump", IdentityFile: "/k2", HostKey: "ssh-rsa BBBB"}}},
	}
	c := ConfigFor(n)
	want := Config{Name: "w1", Address: "198.51.100.7", Port: 2222, User: "kforge", IdentityFile: "~/.ssh/id_k", PassphraseEnv: "PP",
		PasswordEnv: "PW", Agent: false, KnownHostsFile: "/kh", HostKey: "ssh-ed25519 AAAA", Sudo: SudoPassword, SudoPasswordEnv: "SPW",
		Bastions: []Bastion{{Address: "bastion:2200", User: "jump", IdentityFile: "/k2", HostKey: "ssh-rsa BBBB"}}}
	if fmt.Sprintf("%#v", c) != fmt.Sprintf("%#v", want) {
		t.Errorf("got  %#v\nwant %#v", c, want)
	}
	n.SSH.Agent = nil
	if !ConfigFor(n).Agent {
		t.Error("agent should default to on")
	}
}

// TestSharedLimitsHoldAcrossFanOuts: two fan-outs running at once (a fleet's background staging
// of workers and its foreground staging of masters) share one large-upload limit.
func TestSharedLimitsHoldAcrossFanOuts(t *testing.T) {
	lim := Limits{Hosts: 10, LargeUploads: 2}.Shared()
	var cur, peak atomic.Int32
	upload := func(ctx context.Context, h named) error {
		release, err := acquireUploadSlot(ctx, LargeFile)
		if err != nil {
			return err
		}
		defer release()
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
		cur.Add(-1)
		return nil
	}
	hosts := []named{"a", "b", "c", "d"}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = Each(context.Background(), hosts, lim, upload) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if peak.Load() != 2 {
		t.Errorf("peak large uploads across two fan-outs %d, want 2", peak.Load())
	}
}
