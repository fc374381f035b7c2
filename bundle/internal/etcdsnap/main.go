// Command kforge-etcd-snapshot takes one verified snapshot of its master's etcd member and
// keeps the newest: what the timer of etcdSnapshots runs on every master.
//
// It asks the member for its status first and refuses one without a leader (it may be behind
// the others), streams the member's snapshot into a hidden file of the snapshot directory,
// verifies it with etcdutl's library as `kforge etcd snapshot` does (kforge's etcd package:
// the sha256 etcd appends, bbolt's integrity, revision and keys), and only then gives it its
// final name, NAME.db, with its record beside it, NAME.json (the state dir's record format).
// Then it deletes all but the newest snapshots the configuration keeps, and what an earlier,
// interrupted run left. Every line it prints lands in the journal of its unit.
//
// The bundle builder embeds this directory's files and compiles them into the bundle.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/kforge/kforge/bundle/daemon"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func main() {
	daemon.Main("/etc/kforge/etcd-snapshot.json", "configuration file (JSON: endpoint, ca, cert, key, member, kubernetes, keep)",
		"/var/lib/kforge/etcd-snapshots", "the directory the snapshots and their records are kept in", run)
}

// runTimeout bounds one run: a snapshot of etcd's largest database (8 GiB) at disk speed.
const runTimeout = 30 * time.Minute

func run(ctx context.Context, config, dir string) error {
	var c Config
	if err := daemon.ReadJSON(config, &c); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return fmt.Errorf("%s: %w", config, err)
	}
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	src, err := dial(c)
	if err != nil {
		return err
	}
	defer src.Close()
	rec, err := Take(ctx, src, dir, c, time.Now())
	if err != nil {
		return err
	}
	log.Printf("%s: %d bytes from etcd %s, revision %d, %d keys, sha256 %s", rec.Name, rec.Size, rec.Etcd, rec.Revision, rec.TotalKeys, rec.SHA256)
	gone, err := Prune(dir, c.Keep)
	for _, g := range gone {
		log.Printf("deleted %s", g)
	}
	return err
}

// etcdSource is the member at the configuration's endpoint, reached with its client
// certificate.
type etcdSource struct {
	cli      *clientv3.Client
	endpoint string
}

func dial(c Config) (*etcdSource, error) {
	ca, err := os.ReadFile(c.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s: no certificate in it", c.CA)
	}
	pair, err := tls.LoadX509KeyPair(c.Cert, c.Key)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{c.Endpoint},
		TLS:         &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, err
	}
	return &etcdSource{cli: cli, endpoint: c.Endpoint}, nil
}

func (s *etcdSource) Close() error { return s.cli.Close() }

// Status is the member's version, or why it must not be snapshotted.
func (s *etcdSource) Status(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := s.cli.Status(ctx, s.endpoint)
	if err != nil {
		return "", fmt.Errorf("etcd at %s: %w", s.endpoint, err)
	}
	switch {
	case len(st.Errors) > 0:
		return "", fmt.Errorf("etcd at %s reports errors: %v", s.endpoint, st.Errors)
	case st.Leader == 0:
		return "", errors.New("etcd at " + s.endpoint + " has no leader: a member cut off from the others may be behind them, so no snapshot is taken")
	case st.IsLearner:
		return "", errors.New("etcd at " + s.endpoint + " is a learner, still catching up: no snapshot is taken")
	}
	return st.Version, nil
}

func (s *etcdSource) Snapshot(ctx context.Context) (io.ReadCloser, error) {
	return s.cli.Snapshot(ctx)
}
