package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"github.com/kforge/kforge/bundle/daemon"
	"log"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/inetaf/tcpproxy"
)

// Config is the runner's configuration file, written by kforge (JSON).
type Config struct {
	// Listen is the address the proxy accepts on, e.g. 127.0.0.1:6444.
	Listen string `json:"listen"`
	// Backends are the API servers, host:port, one per master.
	Backends []string `json:"backends"`
	// CA is the file of the certificates the API servers' serving certificates chain to; the
	// health check verifies them.
	CA string `json:"ca"`
}

// ReadConfig reads and checks a configuration file.
func ReadConfig(file string) (Config, error) {
	var c Config
	if err := daemon.ReadJSON(file, &c); err != nil {
		return c, err
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return c, fmt.Errorf("%s: listen: %w", file, err)
	}
	if len(c.Backends) == 0 {
		return c, fmt.Errorf("%s: no backends", file)
	}
	for _, b := range c.Backends {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return c, fmt.Errorf("%s: backend: %w", file, err)
		}
	}
	return c, nil
}

// Timing is how the balancer checks its backends and dials them.
type Timing struct {
	Interval    time.Duration // between health checks of a backend
	Timeout     time.Duration // of one health check, and of one dial
	FailAfter   int           // consecutive failed checks that make a backend down
	DialTimeout time.Duration // for a client's connection, trying every backend
}

// DefaultTiming: a backend that stops answering is down within about 3 s, and its clients'
// connections are closed then, so that they reconnect through a backend that answers.
var DefaultTiming = Timing{Interval: time.Second, Timeout: 2 * time.Second, FailAfter: 2, DialTimeout: 8 * time.Second}

// backend is one API server: its health and the connections proxied to it.
type backend struct {
	addr  string
	up    bool
	fails int
	conns map[net.Conn]struct{}
	stop  context.CancelFunc
}

// Balancer spreads connections over the backends that answer their health check (GET /readyz),
// in turn; when none answers it tries them all. A backend found down has its connections
// closed. SetBackends changes the backends without touching the connections of those kept.
type Balancer struct {
	timing Timing
	ca     *trust
	logf   func(format string, args ...any)

	mu       sync.Mutex
	backends map[string]*backend
	order    []string // the configured order
	next     int
	ctx      context.Context
}

// NewBalancer checks backends, trusting the certificates of caFile, until ctx ends.
func NewBalancer(ctx context.Context, caFile string, timing Timing, logf func(string, ...any)) *Balancer {
	return &Balancer{timing: timing, ca: &trust{file: caFile, timeout: timing.Timeout}, logf: logf, backends: map[string]*backend{}, ctx: ctx}
}

// trust is the health check's HTTPS client, trusting the certificates of file as they are now:
// kforge rewrites the file when it rotates the cluster CA (both CAs, then the new one).
type trust struct {
	file    string
	timeout time.Duration

	mu     sync.Mutex
	pem    []byte
	client *http.Client
}

// get is the client for the file's current certificates.
func (t *trust) get() (*http.Client, error) {
	pem, err := os.ReadFile(t.file)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.client != nil && bytes.Equal(pem, t.pem) {
		return t.client, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", t.file)
	}
	t.pem, t.client = pem, &http.Client{Timeout: t.timeout, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		DisableKeepAlives: true,
	}}
	return t.client, nil
}

// SetBackends makes addrs the backends: new ones start being checked (and are used once they
// answer), removed ones stop being used and their connections are closed.
func (b *Balancer) SetBackends(addrs []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for addr, be := range b.backends {
		if !slices.Contains(addrs, addr) {
			be.stop()
			b.closeConns(be)
			delete(b.backends, addr)
			b.logf("backend %s removed", addr)
		}
	}
	for _, addr := range addrs {
		if _, ok := b.backends[addr]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(b.ctx)
		be := &backend{addr: addr, conns: map[net.Conn]struct{}{}, stop: cancel}
		b.backends[addr] = be
		b.logf("backend %s added", addr)
		go b.watch(ctx, be)
	}
	b.order = slices.Clone(addrs)
}

// Backends are the current backends and whether each is up, in the configured order.
func (b *Balancer) Backends() map[string]bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]bool{}
	for addr, be := range b.backends {
		out[addr] = be.up
	}
	return out
}

// watch checks be every interval until ctx ends.
func (b *Balancer) watch(ctx context.Context, be *backend) {
	for {
		err := b.check(ctx, be.addr)
		if ctx.Err() != nil {
			return
		}
		b.mu.Lock()
		switch {
		case err == nil:
			be.fails = 0
			if !be.up {
				be.up = true
				b.logf("backend %s up", be.addr)
			}
		default:
			be.fails++
			if be.up && be.fails >= b.timing.FailAfter {
				be.up = false
				b.logf("backend %s down: %v; closing its %d connections", be.addr, err, len(be.conns))
				b.closeConns(be)
			}
		}
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(b.timing.Interval):
		}
	}
}

// check asks the API server at addr whether it is ready.
func (b *Balancer) check(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, b.timing.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/readyz", nil)
	if err != nil {
		return err
	}
	client, err := b.ca.get()
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

// closeConns closes be's connections; b.mu is held, which Close takes, so they close in the
// background.
func (b *Balancer) closeConns(be *backend) {
	conns := make([]net.Conn, 0, len(be.conns))
	for c := range be.conns {
		conns = append(conns, c)
	}
	clear(be.conns)
	go func() {
		for _, c := range conns {
			c.Close()
		}
	}()
}

// candidates are the backends to try for a new connection: those up, starting with the next
// in turn; all of them when none is up.
func (b *Balancer) candidates() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var up []string
	for _, addr := range b.order {
		if be := b.backends[addr]; be != nil && be.up {
			up = append(up, addr)
		}
	}
	if len(up) == 0 {
		up = slices.Clone(b.order)
	}
	if len(up) == 0 {
		return nil
	}
	b.next++
	i := b.next % len(up)
	return append(up[i:], up[:i]...)
}

// DialContext dials a backend for a client's connection (tcpproxy.DialProxy's DialContext; the
// address it is given is ignored): each candidate in turn until one accepts.
func (b *Balancer) DialContext(ctx context.Context, network, _ string) (net.Conn, error) {
	var errs []string
	for _, addr := range b.candidates() {
		d := net.Dialer{Timeout: b.timing.Timeout}
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		b.mu.Lock()
		be := b.backends[addr]
		if be == nil { // removed while dialing
			b.mu.Unlock()
			c.Close()
			continue
		}
		tc := &trackedConn{Conn: c, b: b, be: be}
		be.conns[tc] = struct{}{}
		b.mu.Unlock()
		return tc, nil
	}
	if len(errs) == 0 {
		return nil, errors.New("no backend")
	}
	return nil, errors.New("no backend accepts: " + strings.Join(errs, "; "))
}

// trackedConn is a connection to a backend, forgotten by it when closed.
type trackedConn struct {
	net.Conn
	b    *Balancer
	be   *backend
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.b.mu.Lock()
		delete(c.be.conns, c)
		c.b.mu.Unlock()
	})
	return c.Conn.Close()
}

// CloseWrite lets tcpproxy half-close the connection to the backend.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// CloseRead lets tcpproxy half-close the connection to the backend.
func (c *trackedConn) CloseRead() error {
	if cr, ok := c.Conn.(interface{ CloseRead() error }); ok {
		return cr.CloseRead()
	}
	return nil
}

// Serve proxies connections on listen to the balancer's backends until ctx ends.
func Serve(ctx context.Context, listen string, b *Balancer) error {
	p := &tcpproxy.Proxy{}
	p.AddRoute(listen, &tcpproxy.DialProxy{
		DialTimeout: b.timing.DialTimeout,
		DialContext: b.DialContext,
		OnDialError: func(src net.Conn, err error) {
			log.Printf("connection from %s: %v", src.RemoteAddr(), err)
			src.Close()
		},
	})
	if err := p.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- p.Wait() }()
	select {
	case <-ctx.Done():
		p.Close()
		return nil
	case err := <-done:
		return err
	}
}
