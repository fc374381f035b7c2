package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"github.com/kforge/kforge/bundle/daemon"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// apiServer is a stand-in for kube-apiserver: TLS, /readyz answering 200 or 503, and /who
// saying which one answered.
type apiServer struct {
	*httptest.Server
	name  string
	ready atomic.Bool
}

func newAPIServer(t *testing.T, name string) *apiServer {
	s := &apiServer{name: name}
	s.ready.Store(true)
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			if !s.ready.Load() {
				http.Error(w, "not ready", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprint(w, "ok")
		case "/hold": // a watch: the response never ends
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			fmt.Fprint(w, s.name)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *apiServer) addr() string { return s.Listener.Addr().String() }

var fast = Timing{Interval: 50 * time.Millisecond, Timeout: 500 * time.Millisecond, FailAfter: 2, DialTimeout: 3 * time.Second}

// proxied is a running proxy in front of servers, and a client of it that trusts them.
type proxied struct {
	b      *Balancer
	url    string
	client *http.Client
	held   map[string]bool // backends a test holds a watch through
}

// connsTo is the number of open connections proxied to addr.
func (b *Balancer) connsTo(addr string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if be := b.backends[addr]; be != nil {
		return len(be.conns)
	}
	return 0
}

func startProxy(t *testing.T, servers ...*apiServer) proxied {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: servers[0].Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	b := NewBalancer(ctx, ca, fast, t.Logf)
	var addrs []string
	for _, s := range servers {
		addrs = append(addrs, s.addr())
	}
	b.SetBackends(addrs)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := l.Addr().String()
	l.Close()
	go func() {
		if err := Serve(ctx, listen, b); err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	client := servers[0].Client() // trusts the test certificate, valid for 127.0.0.1
	client.Transport.(*http.Transport).DisableKeepAlives = true
	p := proxied{b: b, url: "https://" + listen, client: client}
	eventually(t, "the proxy answers", func() bool { _, err := p.get("/who"); return err == nil })
	return p
}

func (p proxied) get(path string) (string, error) {
	resp, err := p.client.Get(p.url + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// who asks n times which backend answers, and counts the answers.
func (p proxied) who(t *testing.T, n int) map[string]int {
	t.Helper()
	out := map[string]int{}
	for range n {
		name, err := p.get("/who")
		if err != nil {
			t.Fatalf("through the proxy: %v", err)
		}
		out[name]++
	}
	return out
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBalancesOverReadyBackendsAndDropsADownOne: connections go to every ready backend in
// turn; one whose /readyz fails gets no new connection and its open ones are closed (a watch
// held through it ends); it is used again once ready.
func TestBalancesOverReadyBackendsAndDropsADownOne(t *testing.T) {
	a, b := newAPIServer(t, "a"), newAPIServer(t, "b")
	p := startProxy(t, a, b)
	eventually(t, "both backends up", func() bool { up := p.b.Backends(); return up[a.addr()] && up[b.addr()] })
	if got := p.who(t, 10); got["a"] != 5 || got["b"] != 5 {
		t.Errorf("10 requests over two ready backends: %v, want 5 each", got)
	}

	// Hold watches through the proxy until one lands on a.
	var held *http.Response
	for range 4 {
		resp, err := p.client.Get(p.url + "/hold")
		if err != nil {
			t.Fatal(err)
		}
		if resp.TLS != nil && p.b.connsTo(a.addr()) > 0 {
			held = resp
			break
		}
		resp.Body.Close()
	}
	if held == nil {
		t.Fatal("no watch landed on a")
	}
	a.ready.Store(false)
	eventually(t, "a down", func() bool { return !p.b.Backends()[a.addr()] })
	ended := make(chan error, 1)
	go func() { _, err := io.ReadAll(held.Body); ended <- err }()
	select {
	case <-ended:
	case <-time.After(2 * time.Second):
		t.Error("the watch through a was not closed when a went down")
	}
	if got := p.who(t, 6); got["b"] != 6 {
		t.Errorf("with a down: %v, want b alone", got)
	}
	a.ready.Store(true)
	eventually(t, "a up again", func() bool { return p.b.Backends()[a.addr()] })
	if got := p.who(t, 4); got["a"] != 2 || got["b"] != 2 {
		t.Errorf("with a back: %v, want 2 each", got)
	}
}

// TestNoReadyBackendTriesThemAll: when no backend passes its health check (the control plane
// is starting), each is tried in turn, and one that refuses connections is skipped.
func TestNoReadyBackendTriesThemAll(t *testing.T) {
	a, b := newAPIServer(t, "a"), newAPIServer(t, "b")
	p := startProxy(t, a, b)
	a.ready.Store(false)
	b.ready.Store(false)
	eventually(t, "both down", func() bool { up := p.b.Backends(); return !up[a.addr()] && !up[b.addr()] })
	if got := p.who(t, 4); got["a"] != 2 || got["b"] != 2 {
		t.Errorf("with no backend ready: %v, want both tried", got)
	}
	a.Close()
	if got := p.who(t, 4); got["b"] != 4 {
		t.Errorf("with a closed: %v, want b alone", got)
	}
}

// TestSetBackendsKeepsTheOthers: a master added is used once ready; one removed is no longer
// used and its connections are closed; the connections of one kept stay open.
func TestSetBackendsKeepsTheOthers(t *testing.T) {
	a, b, c := newAPIServer(t, "a"), newAPIServer(t, "b"), newAPIServer(t, "c")
	p := startProxy(t, a, b)
	eventually(t, "both up", func() bool { up := p.b.Backends(); return up[a.addr()] && up[b.addr()] })
	hold := func() (*http.Response, string) {
		for range 6 {
			resp, err := p.client.Get(p.url + "/hold")
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []*apiServer{a, b} {
				if p.b.connsTo(s.addr()) > 0 && !p.held[s.name] {
					p.held[s.name] = true
					return resp, s.name
				}
			}
			resp.Body.Close()
		}
		t.Fatal("no watch landed on a new backend")
		return nil, ""
	}
	p.held = map[string]bool{}
	r1, n1 := hold()
	r2, _ := hold()
	onA, onB := r1, r2
	if n1 == "b" {
		onA, onB = r2, r1
	}
	p.b.SetBackends([]string{a.addr(), c.addr()})
	eventually(t, "c up", func() bool { return p.b.Backends()[c.addr()] })
	if _, ok := p.b.Backends()[b.addr()]; ok {
		t.Error("b is still a backend")
	}
	if _, err := io.ReadAll(onB.Body); err == nil {
		t.Error("the watch through removed b did not fail")
	}
	if p.b.connsTo(a.addr()) != 1 {
		t.Errorf("the watch through kept a: %d connections, want 1", p.b.connsTo(a.addr()))
	}
	onA.Body.Close()
	if got := p.who(t, 4); got["a"] != 2 || got["c"] != 2 {
		t.Errorf("after the change: %v, want a and c", got)
	}
}

// TestFollowReloadsTheConfigFile: a rewritten configuration file changes the backends, a broken
// one keeps them, and the state file says what is in use.
func TestFollowReloadsTheConfigFile(t *testing.T) {
	a, b := newAPIServer(t, "a"), newAPIServer(t, "b")
	p := startProxy(t, a)
	dir := t.TempDir()
	config, state := filepath.Join(dir, "apiproxy.json"), filepath.Join(dir, "run", "backends.json")
	write := func(c Config) {
		data, _ := json.Marshal(c)
		if err := daemon.WriteAtomic(config, data); err != nil {
			t.Fatal(err)
		}
	}
	c := Config{Listen: strings.TrimPrefix(p.url, "https://"), Backends: []string{a.addr()}, CA: "ca.crt"}
	write(c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go follow(ctx, config, state, c, p.b)
	inState := func(addr string) bool {
		var s struct{ Backends map[string]bool }
		data, _ := os.ReadFile(state)
		return json.Unmarshal(data, &s) == nil && s.Backends[addr]
	}
	eventually(t, "a in the state file", func() bool { return inState(a.addr()) })
	write(Config{Listen: c.Listen, Backends: []string{b.addr()}, CA: "ca.crt"})
	eventually(t, "b in the state file", func() bool { return inState(b.addr()) && !inState(a.addr()) })
	if err := os.WriteFile(config, []byte(`{"listen": "`+c.Listen+`", "backends": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if got := p.who(t, 2); got["b"] != 2 {
		t.Errorf("after a broken configuration: %v, want b kept", got)
	}
}

func TestReadConfigRefusesWhatItCannotUse(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ data, want string }{
		{`{"listen": "127.0.0.1:6444", "backends": ["10.0.0.1:6443"], "ca": "/ca.crt"}`, ""},
		{`{"listen": "127.0.0.1:6444", "backends": [], "ca": "/ca.crt"}`, "no backends"},
		{`{"listen": "6444", "backends": ["10.0.0.1:6443"]}`, "listen"},
		{`{"listen": "127.0.0.1:6444", "backends": ["10.0.0.1"]}`, "backend"},
		{`{"listen": "127.0.0.1:6444", "backend": ["10.0.0.1:6443"]}`, "unknown field"},
	} {
		f := filepath.Join(dir, "c.json")
		if err := os.WriteFile(f, []byte(tc.data), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadConfig(f)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.data, err, tc.want)
		}
	}
}

// TestReadsWhatKforgeWrites: the configuration kforge renders (templates.APIProxy, its golden
// file) is one this runner reads.
func TestReadsWhatKforgeWrites(t *testing.T) {
	c, err := ReadConfig(filepath.Join("..", "..", "..", "templates", "testdata", "kforge-apiproxy.json.golden"))
	if err != nil || c.Listen != "127.0.0.1:6444" || len(c.Backends) != 3 || c.CA != "/etc/kubernetes/pki/ca.crt" {
		t.Errorf("kforge's configuration: %+v, %v", c, err)
	}
}

// TestHealthCheckFollowsTheCAFile: the health check trusts the CA file as it is now. With
// another CA in it (a rotation's last phase, seen from a backend not yet re-issued) the backend
// is down; with the right one again, up.
func TestHealthCheckFollowsTheCAFile(t *testing.T) {
	a := newAPIServer(t, "a")
	ca := filepath.Join(t.TempDir(), "ca.crt")
	right := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.Certificate().Raw})
	if err := os.WriteFile(ca, right, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := NewBalancer(ctx, ca, fast, t.Logf)
	b.SetBackends([]string{a.addr()})
	eventually(t, "a up", func() bool { return b.Backends()[a.addr()] })

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "another CA"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a down under another CA", func() bool { return !b.Backends()[a.addr()] })
	if err := os.WriteFile(ca, append(right, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a up with both CAs", func() bool { return b.Backends()[a.addr()] })
}
