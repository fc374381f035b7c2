package remote

import (
	"net"
	"sync/atomic"
)

// Traffic counts the bytes the workstation's own TCP connections sent and received: to each
// host dialled directly, and to the outermost bastion (whatever goes through it). Bytes are
// counted as the network sees them, SSH's encryption and framing included. The zero value is
// ready to use; it is safe for concurrent use.
type Traffic struct {
	sent, received atomic.Int64
}

// Sent is the bytes written to the workstation's connections so far.
func (t *Traffic) Sent() int64 { return t.sent.Load() }

// Received is the bytes read from them so far.
func (t *Traffic) Received() int64 { return t.received.Load() }

// counted is a connection whose bytes go to a Traffic.
type counted struct {
	net.Conn
	t *Traffic
}

func (c counted) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.t.received.Add(int64(n))
	return n, err
}

func (c counted) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.t.sent.Add(int64(n))
	return n, err
}

// count wraps conn so that t counts its bytes; conn itself when t is nil.
func (t *Traffic) count(conn net.Conn) net.Conn {
	if t == nil {
		return conn
	}
	return counted{conn, t}
}
