// Package etcd talks to one member of a stacked etcd cluster (its client port on a master,
// reached through that master's SSH connection) with etcd's own Go client,
// go.etcd.io/etcd/client/v3: membership (list, add, remove, wait for a new member to start),
// the member's status, and snapshots.
//
// Every error is an *Error naming the master and the operation, saying what was seen and, in
// its Details, what to do. The package never prints: etcd's client logs to zap.NewNop and gRPC's
// logger is silenced.
package etcd

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/grpclog"
)

// gRPC logs through a process-wide logger that writes errors to stderr by default; kforge
// never prints from packages, and this package is kforge's only gRPC user. Set at init, before
// any gRPC activity, as grpclog requires.
func init() {
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, io.Discard))
}

// DefaultEndpoint is where a stacked etcd member serves clients on its master.
const DefaultEndpoint = "127.0.0.1:2379"

// DefaultDialTimeout bounds New: opening the connection and the first answer.
const DefaultDialTimeout = 10 * time.Second

// serverName is the name the member's server certificate is checked against: kforge's
// etcd-server certificate names localhost, 127.0.0.1, the master's IP and its name, and
// localhost is the one that is right whichever master is reached.
const serverName = "localhost"

// Dialer opens TCP connections from where it stands (an SSH connection to a master:
// *remote.SSH is one).
type Dialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// Config says which member to reach, through what, and with which credentials.
type Config struct {
	// Host is the master's name; every error names it.
	Host string
	// Dialer opens the connection to Endpoint. nil: a plain net.Dialer (tests).
	Dialer Dialer
	// Endpoint is the host:port dialled through Dialer, a literal address that is never
	// resolved elsewhere. Empty: DefaultEndpoint.
	Endpoint string
	// CA is the etcd CA; it verifies the member's server certificate.
	CA *x509.Certificate
	// MoreCAs are also trusted: the other etcd CA while it is rotated.
	MoreCAs []*x509.Certificate
	// Cert and Key are the client certificate etcd accepts (kforge uses
	// apiserver-etcd-client, signed by the etcd CA).
	Cert *x509.Certificate
	Key  crypto.Signer
	// DialTimeout bounds New. Zero: DefaultDialTimeout.
	DialTimeout time.Duration
}

// withDefaults returns c with its empty fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Dialer == nil {
		c.Dialer = &net.Dialer{}
	}
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	return c
}

// tlsConfig checks the credentials and builds the client's TLS configuration.
func (c Config) tlsConfig() (*tls.Config, error) {
	switch {
	case c.CA == nil:
		return nil, errors.New("no etcd CA certificate given (Config.CA)")
	case c.Cert == nil || c.Key == nil:
		return nil, errors.New("no client certificate and key given (Config.Cert, Config.Key)")
	}
	pub, ok := c.Key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(c.Cert.PublicKey) {
		return nil, fmt.Errorf("the client key does not belong to the client certificate (CN %q)", c.Cert.Subject.CommonName)
	}
	roots := x509.NewCertPool()
	roots.AddCert(c.CA)
	for _, ca := range c.MoreCAs {
		roots.AddCert(ca)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{c.Cert.Raw}, PrivateKey: c.Key, Leaf: c.Cert}},
		RootCAs:      roots,
		ServerName:   serverName,
		MinVersion:   tls.VersionTLS12,
	}, nil
}

// Client is a connection to one etcd member. Close it.
type Client struct {
	host     string
	endpoint string
	cli      *clientv3.Client
	maint    clientv3.Maintenance
}

// New connects to the member and checks that it answers (its status), within c.DialTimeout and
// ctx, so that a wrong CA, a refused certificate or a member that is not running is reported
// here, naming c.Host.
//
// The connection is made through c.Dialer to the literal c.Endpoint only: endpoints are never
// synchronised from the member list (etcd's members advertise addresses kforge may not reach).
// Calls fail fast when the connection is down instead of waiting for it until their deadline,
// so that their errors say why it is down.
func New(ctx context.Context, c Config) (*Client, error) {
	c = c.withDefaults()
	if c.Host == "" {
		return nil, errors.New("etcd: Config.Host is empty: name the master whose etcd is reached, errors show it")
	}
	tc, err := c.tlsConfig()
	if err != nil {
		return nil, &Error{Host: c.Host, Op: "connect to " + c.Endpoint, Err: err,
			Hint: "the etcd CA and the apiserver-etcd-client certificate come from kforge's PKI state"}
	}
	dial := c.Dialer
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:        []string{c.Endpoint},
		AutoSyncInterval: 0, // never replace Endpoint by the members' advertised client URLs
		DialTimeout:      c.DialTimeout,
		TLS:              tc,
		Logger:           zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				return dial.DialContext(ctx, "tcp", addr)
			}),
			grpc.WithNoProxy(), // the dialer decides the path; $HTTPS_PROXY must not
			grpc.WithChainUnaryInterceptor(failFastUnary),
			grpc.WithChainStreamInterceptor(failFastStream),
		},
	})
	if err != nil {
		return nil, newError(c.Host, c.Endpoint, "connect to "+c.Endpoint, err)
	}
	cl := &Client{
		host: c.Host, endpoint: c.Endpoint, cli: cli,
		// Maintenance calls on the client's own connection: clientv3's Maintenance opens a
		// new connection for each Status.
		maint: clientv3.NewMaintenanceFromMaintenanceClient(pb.NewMaintenanceClient(cli.ActiveConnection()), cli),
	}
	ctx, cancel := context.WithTimeout(ctx, c.DialTimeout)
	defer cancel()
	if _, err := cl.maint.Status(ctx, c.Endpoint); err != nil {
		cli.Close()
		if refused := probeTLS(ctx, c.Dialer, c.Endpoint, tc, err); refused != nil {
			err = fmt.Errorf("%w (gRPC saw: %v)", refused, message(err))
		}
		return nil, newError(c.Host, c.Endpoint, "connect to "+c.Endpoint, err)
	}
	return cl, nil
}

// probeTLS looks again when the connection broke after the TLS handshake seemed done ("broken
// pipe", "connection reset", no HTTP/2 preface): with TLS 1.3 the server checks the client's
// certificate after the client has finished its handshake, so a refused certificate shows up
// only as a connection cut under gRPC. It makes one TLS connection of its own and reads: a
// server that refused the certificate sends its alert ("remote error: tls: bad certificate"),
// which is returned; anything else returns nil.
func probeTLS(ctx context.Context, d Dialer, endpoint string, tc *tls.Config, seen error) error {
	text := seen.Error()
	if !strings.Contains(text, "broken pipe") && !strings.Contains(text, "connection reset") && !strings.Contains(text, "server preface") {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	raw, err := d.DialContext(ctx, "tcp", endpoint)
	if err != nil {
		return nil
	}
	defer raw.Close()
	probe := tc.Clone()
	probe.NextProtos = []string{"h2"}
	conn := tls.Client(raw, probe)
	if err := conn.HandshakeContext(ctx); err != nil {
		return err
	}
	deadline, _ := ctx.Deadline()
	conn.SetReadDeadline(deadline)
	var b [1]byte
	_, err = conn.Read(b[:])
	if err != nil && strings.Contains(err.Error(), "remote error: tls:") {
		return err
	}
	return nil
}

// failFastUnary and failFastStream make calls fail at once, with the connection's last error,
// when the connection cannot be made (clientv3 makes every call wait for a connection until its
// deadline and then reports only "context deadline exceeded"). clientv3's retries on
// "unavailable" still apply around them.
func failFastUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(ctx, method, req, reply, cc, append(opts, grpc.WaitForReady(false))...)
}

func failFastStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(ctx, desc, cc, method, append(opts, grpc.WaitForReady(false))...)
}

// Close closes the connection.
func (c *Client) Close() error {
	err := c.cli.Close()
	if err == nil || errors.Is(err, context.Canceled) {
		return nil
	}
	return newError(c.host, c.endpoint, "close", err)
}

// fail wraps err from operation op as an *Error.
func (c *Client) fail(op string, err error) error {
	return newError(c.host, c.endpoint, op, rpctypes.Error(err))
}
