// Command kforge-apiproxy is the node-local API proxy of a kforge cluster without a
// controlPlaneEndpoint: it listens on 127.0.0.1 and forwards each connection, unchanged (TLS
// passes through), to a kube-apiserver that answers its health check. The proxying itself is
// github.com/inetaf/tcpproxy's, as in k3s and RKE2; this runner adds the choice of backend.
//
// It re-reads its configuration file when the file changes (kforge rewrites it when masters
// are added or removed) and keeps the connections to the backends that stay. It writes the
// backends it uses, and whether each is up, to the state file.
//
// The bundle builder embeds this directory's files and compiles them into the bundle.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/kforge/kforge/bundle/daemon"
	"log"
	"os"
	"slices"
	"time"
)

func main() {
	daemon.Main("/etc/kforge/apiproxy.json", "configuration file (JSON: listen, backends, ca)",
		"/run/kforge-apiproxy/backends.json", "where the backends in use and their health are written", run)
}

func run(ctx context.Context, config, state string) error {
	c, err := ReadConfig(config)
	if err != nil {
		return err
	}
	b := NewBalancer(ctx, c.CA, DefaultTiming, log.Printf)
	b.SetBackends(c.Backends)
	log.Printf("listening on %s for %v", c.Listen, c.Backends)
	go follow(ctx, config, state, c, b)
	return Serve(ctx, c.Listen, b)
}

// follow re-reads config when it changes and writes the state file when the backends or their
// health change, every second, until ctx ends. A new listen address needs a restart (kforge
// restarts the unit then).
func follow(ctx context.Context, config, state string, c Config, b *Balancer) {
	last, _ := os.ReadFile(config)
	var written []byte
	for {
		if data, err := os.ReadFile(config); err == nil && !bytes.Equal(data, last) {
			last = data
			switch n, err := ReadConfig(config); {
			case err != nil:
				log.Printf("keeping the backends: %v", err)
			case n.Listen != c.Listen:
				log.Printf("%s: listen %s is not %s: restart to listen there; keeping the backends", config, n.Listen, c.Listen)
			case !slices.Equal(n.Backends, c.Backends):
				log.Printf("backends now %v", n.Backends)
				b.SetBackends(n.Backends)
				c = n
			}
		}
		if data, err := json.Marshal(map[string]any{"listen": c.Listen, "backends": b.Backends()}); err == nil && !bytes.Equal(data, written) {
			if daemon.WriteAtomic(state, data) == nil {
				written = data
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}
