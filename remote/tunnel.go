package remote

import (
	"context"
	"net"
)

// DialContext opens a TCP connection from the host to addr, through the host's SSH connection
// (a direct-tcpip channel, as `ssh -L` uses). kforge reaches a master's API server this way, so
// it works behind bastions and firewalls that only let SSH through.
func (h *SSH) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := h.client.DialContext(ctx, network, addr)
	if err != nil {
		return nil, WithHost(h.name, err)
	}
	return conn, nil
}

// Dialer is a host that can open TCP connections from where it stands: *SSH is one. kforge
// reaches a master's API server and etcd through it.
type Dialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}
