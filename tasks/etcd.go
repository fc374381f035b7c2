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
	"slices"
	"strings"
	"time"

	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
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

func (a *Applier) etcdClient(master string) (*etcdClient, error) {
	d, ok := a.host(master).(Dialer)
	if !ok {
		return nil, fmt.Errorf("%s: cannot open a tunnel to etcd over this connection", master)
	}
	kp := a.set.Get("apiserver-etcd-client", "")
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
	roots.AddCert(a.set.CAs[pki.EtcdCA].Cert)
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

// planEtcd finds masters that join a running etcd cluster and computes the members each starts
// with. It runs after connect (facts say which masters have etcd data) and before render.
func (a *Applier) planEtcd(ctx context.Context, r Reporter) error {
	var running, joining []string
	for _, m := range a.inv.Masters {
		if len(a.facts[m.Name].EtcdDataDir) > 0 {
			running = append(running, m.Name)
		} else {
			joining = append(joining, m.Name)
		}
	}
	if len(running) == 0 || len(joining) == 0 {
		return nil // a new cluster, or nothing to add
	}
	c, err := a.etcdClient(running[0])
	if err != nil {
		return err
	}
	members, err := c.list(ctx)
	if err != nil {
		return fmt.Errorf("%s: list etcd members: %w", running[0], err)
	}
	a.etcdSeed = running[0]
	a.etcdJoining = map[string][]string{}
	for _, name := range joining {
		m := a.master(name)
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
		a.etcdJoining[name] = append(list, templates.EtcdMember(name, m.NodeIP()))
		r(Event{Kind: Progress, Host: name, Message: fmt.Sprintf("joins the running etcd cluster of %d members", len(members))})
	}
	return nil
}

// addEtcdMember adds a joining master's etcd member right before its kubelet starts it: the
// cluster waits for the new member from then on.
func (a *Applier) addEtcdMember(ctx context.Context, n inventory.Node) error {
	if _, ok := a.etcdJoining[n.Name]; !ok {
		return nil
	}
	c, err := a.etcdClient(a.etcdSeed)
	if err != nil {
		return err
	}
	members, err := c.list(ctx)
	if err != nil {
		return fmt.Errorf("%s: list etcd members: %w", a.etcdSeed, err)
	}
	peer := templates.EtcdPeerURL(n.NodeIP())
	for _, m := range members {
		if slices.Contains(m.PeerURLs, peer) {
			return nil
		}
	}
	if err := c.add(ctx, peer); err != nil {
		return fmt.Errorf("add %s's etcd member through %s: %w", n.Name, a.etcdSeed, err)
	}
	return nil
}

func (a *Applier) master(name string) inventory.Host {
	for _, m := range a.inv.Masters {
		if m.Name == name {
			return m
		}
	}
	return inventory.Host{}
}

// waitEtcdMember waits until a joining master's etcd member has started (etcd then knows its
// name).
func (a *Applier) waitEtcdMember(ctx context.Context, n inventory.Node) error {
	if _, ok := a.etcdJoining[n.Name]; !ok {
		return nil
	}
	c, err := a.etcdClient(a.etcdSeed)
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
