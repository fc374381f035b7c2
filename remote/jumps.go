package remote

import (
	"errors"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
)

// Jumps shares bastion connections between the hosts behind them: one SSH connection per chain
// of bastions, however many hosts are reached through it, each host a channel (direct-tcpip) of
// that connection. A bastion's sshd then sees one handshake, not one per host: its MaxStartups
// (10:30:100 by default: beyond 10 connections not yet authenticated, new ones are dropped at
// random, all of them beyond 100) would otherwise drop most of a fleet's connections when they
// all start at once. Channels are not sessions, so sshd's MaxSessions does not count them.
//
// A host's Close leaves shared connections open; Close ends them. A connection that ended (the
// bastion restarted, the network dropped it) is dialled again by the next host that needs it.
// The zero value is ready to use.
type Jumps struct {
	mu    sync.Mutex
	conns map[string]*jump
}

type jump struct {
	ready  chan struct{} // closed once the dial ended
	client *ssh.Client
	err    error
	ended  chan struct{} // closed when the connection ends
}

// get returns the shared connection for key, dialling it once for all hosts that ask at the same
// time. A failed dial is every waiting host's failure, with the error naming that host; the
// next get dials again.
func (j *Jumps) get(key, host string, dial func() (*ssh.Client, error)) (*ssh.Client, error) {
	j.mu.Lock()
	if j.conns == nil {
		j.conns = map[string]*jump{}
	}
	e := j.conns[key]
	if e != nil {
		select {
		case <-e.ready:
			if e.err != nil || closed(e.ended) {
				e = nil
			}
		default: // being dialled: wait for it below
		}
	}
	if e == nil {
		e = &jump{ready: make(chan struct{}), ended: make(chan struct{})}
		j.conns[key] = e
		j.mu.Unlock()
		e.client, e.err = dial()
		if e.err == nil {
			go func(c *ssh.Client, ended chan struct{}) { c.Wait(); close(ended) }(e.client, e.ended)
		}
		close(e.ready)
		return e.client, e.err
	}
	j.mu.Unlock()
	<-e.ready // a dial ends within its timeout
	return e.client, forHost(e.err, host)
}

// Close ends every shared connection.
func (j *Jumps) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	var errs []error
	for k, e := range j.conns {
		select {
		case <-e.ready:
			if e.client != nil {
				if err := e.client.Close(); err != nil && !closed(e.ended) {
					errs = append(errs, err)
				}
			}
		default: // still dialling: its host's Dial fails when the dial ends
		}
		delete(j.conns, k)
	}
	return errors.Join(errs...)
}

func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// jumpKey names a chain of bastion hops: who connects where, with which key, expecting which
// host key.
func jumpKey(hops []hop) string {
	var b strings.Builder
	for _, h := range hops {
		b.WriteString(h.user + "@" + h.addr + " " + h.identityFile + " " + h.hostKey + "\n")
	}
	return b.String()
}

// forHost is err, dialled for another host, as this host's error.
func forHost(err error, host string) error {
	var (
		de *DialError
		ae *AuthError
		he *HostKeyError
		te *TimeoutError
		xe *HostError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &de):
		c := *de
		c.Host = host
		return &c
	case errors.As(err, &ae):
		c := *ae
		c.Host = host
		return &c
	case errors.As(err, &he):
		c := *he
		c.Host = host
		return &c
	case errors.As(err, &te):
		c := *te
		c.Host = host
		return &c
	case errors.As(err, &xe):
		c := *xe
		c.Host = host
		return &c
	}
	return &HostError{Host: host, Err: err}
}
