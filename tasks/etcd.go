package tasks

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/templates"
)

// A master whose /var/lib/etcd is empty while another master's is not joins a running stacked
// etcd cluster: its member is added (kubeadm join --control-plane's way) right before its
// kubelet starts, and its etcd starts with the running members and state "existing". Masters of
// a new cluster start together instead (see templates.ControlPlaneFor).

// etcdMember is one member as etcd's JSON gateway reports it.
type etcdMember struct {
	ID       string   `json:"ID"`
	Name     string   `json:"name"`
	PeerURLs []string `json:"peerURLs"`
}

// etcdClient talks to one master's etcd (its client port on 127.0.0.1, reached through the
// master's SSH connection) through etcd's gRPC gateway, as kube-apiserver-etcd-client.
type etcdClient struct {
	http *http.Client
	base string
}

func newEtcdClient(f *fleet.Fleet, set *pki.Set, master string) (*etcdClient, error) {
	d, err := f.Dialer(master)
	if err != nil {
		return nil, err
	}
	kp := set.Get("apiserver-etcd-client", "")
	if kp == nil {
		return nil, fmt.Errorf("no apiserver-etcd-client certificate in the PKI set")
	}
	key, err := pki.EncodeKey(kp.Key)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(pki.EncodeCert(kp.Cert), key)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(set.CAs[pki.EtcdCA].Cert)
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots, ServerName: "localhost"},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, "127.0.0.1:2379")
		},
	}
	return &etcdClient{http: &http.Client{Transport: tr, Timeout: 15 * time.Second}, base: "https://localhost:2379"}, nil
}

func (e *etcdClient) call(ctx context.Context, path string, in any) ([]etcdMember, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := e.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("etcd %s: HTTP %d: %s", path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	var out struct {
		Members []etcdMember `json:"members"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("etcd %s: %w", path, err)
	}
	return out.Members, nil
}

func (e *etcdClient) list(ctx context.Context) ([]etcdMember, error) {
	return e.call(ctx, "/v3/cluster/member/list", struct{}{})
}

func (e *etcdClient) add(ctx context.Context, peerURL string) error {
	_, err := e.call(ctx, "/v3/cluster/member/add", map[string][]string{"peerURLs": {peerURL}})
	return err
}

// remove removes the member named name (or with peerURL) if it is there, and reports whether
// it was.
func (e *etcdClient) remove(ctx context.Context, name, peerURL string) (bool, error) {
	members, err := e.list(ctx)
	if err != nil {
		return false, err
	}
	for _, m := range members {
		if m.Name == name || slices.Contains(m.PeerURLs, peerURL) {
			_, err := e.call(ctx, "/v3/cluster/member/remove", map[string]string{"ID": m.ID})
			return err == nil, err
		}
	}
	return false, nil
}

// etcdPlan is how each master's etcd member starts this run (planEtcd).
type etcdPlan struct {
	seed string                              // a master whose etcd runs, when masters join
	join map[string]bool                     // masters joining the running etcd cluster
	boot map[string]*templates.EtcdBootstrap // how each master's member starts, when not new
}

// planEtcd decides how each master's etcd member starts, before render: running members keep
// the bootstrap flags they started with (read from their manifest: etcd ignores them once it
// has data, and a changed manifest would restart it), masters without data join the running
// cluster when there is one, and a new cluster's masters start together.
func (a *Apply) planEtcd(ctx context.Context, r progress.Reporter) error {
	var running, joining []string
	for _, m := range a.inv.Masters {
		if len(a.fleet.Facts(m.Name).EtcdDataDir) > 0 {
			running = append(running, m.Name)
		} else {
			joining = append(joining, m.Name)
		}
	}
	if len(running) == 0 {
		return nil // a new cluster
	}
	a.etcd.boot = map[string]*templates.EtcdBootstrap{}
	for _, name := range running {
		manifest, err := remote.ReadFile(ctx, a.fleet.Host(name), path.Join(hostpath.ManifestsDir, "etcd.yaml"))
		if err != nil {
			return fmt.Errorf("%s has etcd data but its etcd manifest cannot be read: %w", name, err)
		}
		a.etcd.boot[name] = etcdBootFromManifest(manifest)
	}
	if len(joining) == 0 {
		return nil
	}
	c, err := newEtcdClient(a.fleet, a.set, running[0])
	if err != nil {
		return err
	}
	members, err := c.list(ctx)
	if err != nil {
		return fmt.Errorf("%s: list etcd members: %w", running[0], err)
	}
	a.etcd.seed = running[0]
	a.etcd.join = map[string]bool{}
	for _, name := range joining {
		m, _ := a.fleet.Node(name)
		peer := templates.EtcdPeerURL(m.NodeIP())
		var list []string
		for _, mem := range members {
			if slices.Contains(mem.PeerURLs, peer) {
				continue // added by an earlier, interrupted run
			}
			if mem.Name == "" {
				return fmt.Errorf("etcd has a member that never started (%s): remove it (etcdctl member remove %s) or start it, then run again", strings.Join(mem.PeerURLs, ","), mem.ID)
			}
			for _, u := range mem.PeerURLs {
				list = append(list, mem.Name+"="+u)
			}
		}
		// Masters join one after another: each starts with the members before it.
		for _, earlier := range joining {
			if earlier == name {
				break
			}
			e, _ := a.fleet.Node(earlier)
			list = append(list, templates.EtcdMember(earlier, e.NodeIP()))
		}
		a.etcd.join[name] = true
		a.etcd.boot[name] = &templates.EtcdBootstrap{Members: append(list, templates.EtcdMember(name, m.NodeIP())), State: "existing"}
		r(progress.Event{Kind: progress.Info, Host: name, Message: fmt.Sprintf("joins the running etcd cluster (%d members)", len(a.etcd.boot[name].Members)-1)})
	}
	return nil
}

// etcdBootFromManifest reads the bootstrap flags a running member was started with.
func etcdBootFromManifest(manifest []byte) *templates.EtcdBootstrap {
	b := &templates.EtcdBootstrap{State: "new"}
	for _, line := range strings.Split(string(manifest), "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "- --initial-cluster="); ok {
			b.Members = strings.Split(v, ",")
		}
		if v, ok := strings.CutPrefix(line, "- --initial-cluster-state="); ok {
			b.State = v
		}
	}
	return b
}

// addEtcdMember adds a joining master's etcd member right before its kubelet starts it: the
// cluster waits for the new member from then on.
func (a *Apply) addEtcdMember(ctx context.Context, n inventory.Node) error {
	if !a.etcd.join[n.Name] {
		return nil
	}
	c, err := newEtcdClient(a.fleet, a.set, a.etcd.seed)
	if err != nil {
		return err
	}
	members, err := c.list(ctx)
	if err != nil {
		return fmt.Errorf("%s: list etcd members: %w", a.etcd.seed, err)
	}
	peer := templates.EtcdPeerURL(n.NodeIP())
	for _, m := range members {
		if slices.Contains(m.PeerURLs, peer) {
			return nil
		}
	}
	// etcd refuses a new member until every member has been connected for a few seconds
	// ("unhealthy cluster"): right after an earlier master joined, that is expected; wait.
	deadline := time.Now().Add(a.o.Timeout)
	for {
		err := c.add(ctx, peer)
		if err == nil {
			return nil
		}
		if !strings.Contains(err.Error(), "unhealthy cluster") || time.Now().After(deadline) {
			return fmt.Errorf("add %s's etcd member through %s: %w", n.Name, a.etcd.seed, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// waitEtcdMember waits until a joining master's etcd member has started (etcd then knows its
// name).
func (a *Apply) waitEtcdMember(ctx context.Context, n inventory.Node) error {
	if !a.etcd.join[n.Name] {
		return nil
	}
	c, err := newEtcdClient(a.fleet, a.set, a.etcd.seed)
	if err != nil {
		return err
	}
	peer := templates.EtcdPeerURL(n.NodeIP())
	ctx, cancel := context.WithTimeout(ctx, a.o.Timeout)
	defer cancel()
	var last error
	for {
		members, err := c.list(ctx)
		last = err
		for _, m := range members {
			if slices.Contains(m.PeerURLs, peer) && m.Name == n.Name {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd member of %s did not start (last answer: %v): see its etcd log with: journalctl -u kubelet; crictl logs (or ctr) on %s", n.Name, last, n.Name)
		case <-time.After(time.Second):
		}
	}
}
