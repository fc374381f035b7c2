package testenv

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// SyncBuffer is a buffer several goroutines may write to (a process's stdout and stderr, a
// logger) while a test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Process is a command a test runs until it ends: then it is stopped by its PID (SIGTERM, then
// SIGKILL after 10 s) and waited for. Its output is kept and shown when the test failed.
type Process struct {
	Cmd  *exec.Cmd
	Done chan struct{} // closed when the process has exited
	out  SyncBuffer
}

// Output is what the process printed so far, at most its last maxBytes.
func (p *Process) Output(maxBytes int) string {
	s := p.out.String()
	if len(s) > maxBytes {
		s = "…" + s[len(s)-maxBytes:]
	}
	return s
}

// Start starts name with args for the rest of the test; the process dies with the test binary
// too (Pdeathsig).
func Start(t testing.TB, name string, args ...string) *Process {
	t.Helper()
	p := &Process{Cmd: exec.Command(name, args...), Done: make(chan struct{})}
	p.Cmd.Stdout, p.Cmd.Stderr = &p.out, &p.out
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.Cmd.Wait(); close(p.Done) }()
	t.Cleanup(func() {
		p.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.Done:
		case <-time.After(10 * time.Second):
			p.Cmd.Process.Kill()
			<-p.Done
		}
		if t.Failed() {
			t.Logf("%s output (tail):\n%s", filepath.Base(name), p.Output(6000))
		}
	})
	return p
}

// FreePort is a TCP port free on 127.0.0.1 right now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// A Pair is a certificate and its private key as PEM; *pki.KeyPair is one.
type Pair interface {
	PEM() (cert, key []byte, err error)
}

// WritePair writes kp as dir/base.crt and dir/base.key (0600) and returns both paths, for a
// real component started with kforge's PKI.
func WritePair(t testing.TB, dir, base string, kp Pair) (crt, key string) {
	t.Helper()
	c, k, err := kp.PEM()
	if err != nil {
		t.Fatal(err)
	}
	crt, key = filepath.Join(dir, base+".crt"), filepath.Join(dir, base+".key")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(crt, c, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, k, 0o600); err != nil {
		t.Fatal(err)
	}
	return crt, key
}
