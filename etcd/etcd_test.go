package etcd

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestConfigDefaults(t *testing.T) {
	c := Config{Host: "m1"}.withDefaults()
	if c.Endpoint != "127.0.0.1:2379" || c.DialTimeout != 10*time.Second {
		t.Errorf("defaults: endpoint %q, dial timeout %s; want 127.0.0.1:2379, 10s", c.Endpoint, c.DialTimeout)
	}
	if _, ok := c.Dialer.(*net.Dialer); !ok {
		t.Errorf("default dialer is %T, want *net.Dialer", c.Dialer)
	}
	d := &net.Dialer{Timeout: time.Second}
	c = Config{Host: "m1", Endpoint: "10.0.0.1:12379", DialTimeout: time.Minute, Dialer: d}.withDefaults()
	if c.Endpoint != "10.0.0.1:12379" || c.DialTimeout != time.Minute || c.Dialer != d {
		t.Errorf("given values were replaced: %+v", c)
	}
}

// selfSigned returns a key and a self-signed certificate for it, good enough to build a TLS
// configuration from.
func selfSigned(t *testing.T, cn string) (*ecdsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert
}

func TestTLSConfig(t *testing.T) {
	key, cert := selfSigned(t, "kube-apiserver-etcd-client")
	otherKey, _ := selfSigned(t, "other")
	_, ca := selfSigned(t, "etcd-ca")

	tc, err := Config{CA: ca, Cert: cert, Key: key}.tlsConfig()
	if err != nil {
		t.Fatal(err)
	}
	if tc.ServerName != "localhost" || len(tc.Certificates) != 1 || tc.Certificates[0].Leaf != cert {
		t.Errorf("server name %q, %d certificates; want localhost and the client certificate", tc.ServerName, len(tc.Certificates))
	}

	for name, c := range map[string]Config{
		"no CA":          {Cert: cert, Key: key},
		"no certificate": {CA: ca, Key: key},
		"no key":         {CA: ca, Cert: cert},
		"another key":    {CA: ca, Cert: cert, Key: otherKey},
	} {
		if _, err := c.tlsConfig(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	_, err = New(context.Background(), Config{Host: "m1", CA: ca, Cert: cert, Key: otherKey})
	var e *Error
	if !errors.As(err, &e) || e.Host != "m1" || !strings.Contains(err.Error(), "does not belong to the client certificate") {
		t.Errorf("New with a key of another certificate: %v; want an *Error naming m1 and the mismatch", err)
	}
	if _, err := New(context.Background(), Config{CA: ca, Cert: cert, Key: key}); err == nil || !strings.Contains(err.Error(), "Host is empty") {
		t.Errorf("New without a host: %v; want a refusal", err)
	}
}

func TestFind(t *testing.T) {
	members := []Member{
		{ID: 1, Name: "m1", PeerURLs: []string{"https://198.51.100.10:2380"}},
		{ID: 2, Name: "", PeerURLs: []string{"https://198.51.100.12:2380"}}, // added, not started
		{ID: 3, Name: "m3", PeerURLs: []string{"https://198.51.100.13:2380", "https://[2001:db8::13]:2380"}},
	}
	for _, tc := range []struct {
		name, peer string
		want       uint64 // 0: none
	}{
		{"m1", "", 1},
		{"", "https://198.51.100.12:2380", 2},
		{"", "https://[2001:db8::13]:2380", 3},
		{"m3", "https://198.51.100.10:2380", 1}, // first match wins, by either
		{"", "", 0},                             // an empty name never matches an unstarted member
		{"m2", "https://198.51.100.99:2380", 0},
		{"m1", "https://198.51.100.10", 1},
		{"", "https://198.51.100.10", 0}, // peer URLs compare whole
	} {
		m, ok := find(members, tc.name, tc.peer)
		if got := map[bool]uint64{true: m.ID}[ok]; got != tc.want {
			t.Errorf("find(%q, %q) = member %d, want %d", tc.name, tc.peer, got, tc.want)
		}
	}
	if got := members[1].String(); got != "unstarted (2, https://198.51.100.12:2380)" {
		t.Errorf("unstarted member shows as %q", got)
	}
}

func TestErrorMessages(t *testing.T) {
	tlsErr := status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`)
	for _, tc := range []struct {
		err        error
		seen, hint string
	}{
		{rpctypes.Error(status.Error(codes.Unavailable, "etcdserver: unhealthy cluster")), "refuses membership changes while the cluster is unhealthy", "etcdctl endpoint health --cluster"},
		{rpctypes.Error(status.Error(codes.Unavailable, "etcdserver: no leader")), "etcd has no leader", "start the missing members"},
		{rpctypes.Error(status.Error(codes.FailedPrecondition, "etcdserver: re-configuration failed due to not enough started members")), "too few members would be running", "start the members"},
		{tlsErr, "not signed by the etcd CA kforge holds", "/etc/kubernetes/pki/etcd/ca.crt on m1"},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate is valid for m1, not localhost"`), "does not name localhost", "server.crt"},
		{status.Error(codes.Unavailable, `connection error: desc = "error reading server preface: remote error: tls: bad certificate"`), "refused kforge's client certificate", "--trusted-ca-file"},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:2379: connect: connection refused"`), "nothing listens on 127.0.0.1:2379", "is etcd running on m1? tail -n 30 /var/log/pods/kube-system_etcd-*/etcd/*.log"},
		{context.DeadlineExceeded, "no answer before the deadline", "/var/log/pods/kube-system_etcd-*/etcd/*.log"},
	} {
		e := newError("m1", "127.0.0.1:2379", "add member https://198.51.100.12:2380", tc.err)
		msg := e.Error()
		if !strings.HasPrefix(msg, "etcd on m1: add member https://198.51.100.12:2380: ") || !strings.Contains(msg, tc.seen) {
			t.Errorf("%v:\n message %q\n want it to name m1, the operation and %q", tc.err, msg, tc.seen)
		}
		if strings.Contains(msg, "rpc error: code =") {
			t.Errorf("message keeps gRPC's wrapping: %q", msg)
		}
		if d := e.Details(); len(d) != 2 || !strings.Contains(d[1], "hint: ") || !strings.Contains(d[1], tc.hint) {
			t.Errorf("%v: details %q, want a hint with %q", tc.err, d, tc.hint)
		}
		if !errors.Is(e, tc.err) {
			t.Errorf("%v: errors.Is does not find etcd's error", tc.err)
		}
	}
}

// A member that does not listen fails New at once with what was seen (a connection that waits
// for readiness would only say "deadline exceeded" after DialTimeout), through the given dialer.
func TestNewRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	key, cert := selfSigned(t, "client")
	_, ca := selfSigned(t, "etcd-ca")
	d := &countingDialer{}
	_, err = New(context.Background(), Config{Host: "m1", Endpoint: addr, Dialer: d, CA: ca, Cert: cert, Key: key, DialTimeout: time.Minute})
	var e *Error
	if !errors.As(err, &e) || e.Host != "m1" || !strings.Contains(e.Seen, "nothing listens on "+addr) {
		t.Fatalf("New against a closed port: %v; want an *Error naming m1 and saying nothing listens on %s", err, addr)
	}
	if n, addrs := d.dials(); n == 0 || addrs[0] != addr {
		t.Errorf("dialer saw %d dials (%v), want dials to %s", n, addrs, addr)
	}
}

// The connection is made only through the dialer: one that refuses leaves New with its error,
// whatever listens at the endpoint.
func TestNewOnlyThroughDialer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	key, cert := selfSigned(t, "client")
	_, ca := selfSigned(t, "etcd-ca")
	_, err = New(context.Background(), Config{Host: "m1", Endpoint: l.Addr().String(), Dialer: refusingDialer{}, CA: ca, Cert: cert, Key: key, DialTimeout: 5 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "no tunnel to m1") || !strings.HasPrefix(err.Error(), "etcd on m1: ") {
		t.Fatalf("New through a refusing dialer: %v; want the dialer's error, naming m1", err)
	}
}

type refusingDialer struct{}

func (refusingDialer) DialContext(context.Context, string, string) (net.Conn, error) {
	return nil, fmt.Errorf("no tunnel to m1")
}

// countingDialer is a net.Dialer that records every address it dials, so a test proves the
// connection went through it.
type countingDialer struct {
	d     net.Dialer
	mu    sync.Mutex
	addrs []string
}

func (c *countingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c.mu.Lock()
	c.addrs = append(c.addrs, addr)
	c.mu.Unlock()
	return c.d.DialContext(ctx, network, addr)
}

func (c *countingDialer) dials() (int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.addrs), slices.Clone(c.addrs)
}
