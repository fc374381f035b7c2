package tasks

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/scripts"
	"github.com/kforge/kforge/templates"
)

// CertsRenew is one `kforge certs renew`: the leaf certificates re-issued centrally, pushed to
// the masters, and exactly the static pods that use them restarted, one master at a time,
// each healthy before the next. It reaches the hosts over SSH only, so it works when the
// certificates have already expired and the API server refuses everyone; it talks to the API
// only to see the restarted pods Ready. Kubelets whose client certificate expired (they can no
// longer rotate it) get a new one signed by the cluster CA.
//
// When a certificate it replaces has already expired, the control plane is down anyway (and
// stacked etcd members with expired peer certificates cannot form a quorum until most are
// renewed), so every master is renewed at once instead.
type CertsRenew struct {
	x *credentials
	// Renewed are the certificates re-issued: the state dir's, then the kubelets'.
	Renewed []string
}

// credentials are what certs renew and rotate-ca share: the run context, the masters' files at
// the inventory's version, and what their common first steps (credentialSteps) find. Both
// commands call its steps; neither is built from the other.
type credentials struct {
	rc     *runContext
	target *hop
	renew  func(key string) bool // the leaves pki re-issues, by request key

	etcd      etcdPlan             // etcd-members
	hostCerts map[string]hostCerts // inspect: each host's certificates by path
	expired   []string             // inspect: certificates this run replaces that have expired, "host: name"
	kubelets  map[string]string    // inspect: nodes whose kubelet client certificate expired, and when
	serving   map[string]bool      // inspect: nodes whose kubelet serving certificate expired
	changes   []pki.Change         // pki: what is re-issued
	mu        sync.Mutex           // renewed, which the kubelets step appends to from every host
	renewed   []string             // pki, kubelets: the certificates re-issued
	// kubeletClient says, by master, how its kube-apiserver came to use its new kubelet client
	// certificate (masters: loadKubeletClient); reset for each rollout.
	kubeletClient map[string]string
}

func newCredentials(c *inventory.Cluster, o Options, renew func(key string) bool) *credentials {
	rc := newRunContext(c, c.Hosts(), o)
	return &credentials{rc: rc, target: newHop(rc), renew: renew, kubelets: map[string]string{}, serving: map[string]bool{}}
}

// noteRenewed adds a certificate to those re-issued; safe for concurrent use.
func (x *credentials) noteRenewed(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.renewed = append(x.renewed, key)
}

// NewCertsRenew prepares a renewal of the leaves of c that renew selects by key
// ("apiserver@m1", "admin.conf"; see RenewSelector).
func NewCertsRenew(c *inventory.Cluster, o Options, renew func(key string) bool) *CertsRenew {
	return &CertsRenew{x: newCredentials(c, o, renew)}
}

// Close ends every connection.
func (cr *CertsRenew) Close() { cr.x.rc.fleet.Close() }

// RenewSelector turns `certs renew` arguments into a selector of request keys: every leaf with
// all, else the named rows (kubeadm's names: apiserver, etcd-server, admin.conf, …), on every
// master. An unknown name is an error listing the known ones.
func RenewSelector(names []string, all bool) (func(key string) bool, error) {
	if all == (len(names) > 0) {
		return nil, errors.New("name the certificates to renew, or give --all")
	}
	var leaves []string
	for _, s := range pki.Table() {
		if !s.IsCA() {
			leaves = append(leaves, s.Name)
		}
	}
	for _, n := range names {
		if !slices.Contains(leaves, n) {
			return nil, fmt.Errorf("%q is not a certificate kforge renews; choose from %s (CAs are replaced with rotate-ca)", n, strings.Join(leaves, ", "))
		}
	}
	return func(key string) bool {
		name, _, _ := strings.Cut(key, "@")
		return all || slices.Contains(names, name)
	}, nil
}

// credentialSteps are the first steps of certs renew and rotate-ca: read the hosts and
// render the masters' files from the state dir's PKI (pki says what it issues), refusing
// anything that is not a change of credentials. Nothing is changed yet.
func (x *credentials) credentialSteps(l *list, pkiWhat string) {
	rc, t := x.rc, x.target
	c, f := rc.inv, rc.fleet
	all, masters, members := f.Names(""), f.Names(inventory.RoleMaster), f.Names(c.EtcdRole())
	l.add("connect", OnHosts, all, f.Connect, "connect to %s over SSH (host keys verified) and gather facts in one round trip each", count(len(all), "host"))
	if c.Bundle != "" {
		l.add("bundle", OnWorkstation, nil, t.readBundle, "read the bundle's manifest of Kubernetes %s (the images the static pods run)", c.KubernetesVersion)
	}
	l.add("inspect", OnHosts, all, x.inspect, "read every host's certificates (private keys stay on the hosts); refuse when a host trusts another CA than the state dir's (or the new one of a rotation in progress)")
	l.add("etcd-members", OnHosts, members, func(ctx context.Context, r progress.Reporter) (err error) {
		x.etcd, err = planEtcd(ctx, rc, r)
		return err
	}, "read how each etcd member started (its manifest), so that only credentials change")
	l.add("pki", OnWorkstation, nil, x.issue, "%s", pkiWhat)
	l.add("render", OnWorkstation, nil, func(context.Context, progress.Reporter) error { return t.render(x.etcd, 0) }, "render the %s certificates, kubeconfigs and static-pod manifests", renderedFor(c))
	l.add("same-manifests", OnHosts, append(masters, f.Names(inventory.RoleEtcd)...), x.sameManifests, "refuse when a static pod would change in more than its credentials (kforge apply changes those)")
}

// Steps is certs renew, top to bottom.
func (cr *CertsRenew) Steps() []Step {
	x := cr.x
	rc := x.rc
	all, masters := rc.fleet.Names(""), rc.fleet.Names(inventory.RoleMaster)
	var l list
	x.credentialSteps(&l, "re-issue the certificates asked for, in memory, from the state dir's CAs")
	l.add("save", OnWorkstation, nil, x.save, "keep the new certificates in %s", rc.o.State.PKI())
	l.add("kubelets", OnHosts, all, x.renewKubelets, "give the kubelets whose client certificate expired a new one signed by the cluster CA, and restart them; a kubelet whose own serving certificate expired makes a new one")
	if etcdHosts := rc.fleet.Names(inventory.RoleEtcd); len(etcdHosts) > 0 {
		l.add("etcd-hosts", OnHosts, etcdHosts, x.pushEtcdHosts, "one etcd host at a time: push its member's certificates (etcd reads its serving and peer certificates at every handshake, no restart) and wait until the member answers its readiness check")
	}
	l.add("masters", OnHosts, masters, rc.kubeletsSay(x.pushMasters), "one master at a time (all at once when certificates have expired: the control plane is down): push its certificates and kubeconfigs; kubelet restarts the static pods that read a renewed file only when they start (kube-controller-manager, kube-scheduler), while etcd and kube-apiserver load their new certificates themselves; wait until the restarted pods are Ready and the new certificates are served")
	l.add("kubeconfig", OnWorkstation, nil, rc.writeKubeconfig, "write the admin kubeconfig to the state dir")
	l.add("wait-ready", ThroughAPI, nil, func(ctx context.Context, r progress.Reporter) error {
		err := rc.kubeletsSay(rc.waitReady)(ctx, r)
		cr.Renewed = x.renewed
		return err
	}, "wait until every node is Ready")
	return l
}

// inspect reads every host's certificates: a host whose CA is not the state dir's is refused
// before anything changes; expired certificates decide how masters are renewed.
func (x *credentials) inspect(ctx context.Context, r progress.Reporter) error {
	_, reqs, err := pki.InventoryRequests(x.rc.inv)
	if err != nil {
		return err
	}
	state, errs := pki.StateCerts(x.rc.o.State.PKI(), reqs)
	cas := pki.StateCAs(state)
	for _, name := range []string{pki.CA, pki.EtcdCA, pki.FrontProxyCA} {
		if cas[name] == nil {
			return fmt.Errorf("no %s certificate in %s (%v): kforge certs renew renews a cluster kforge apply created; is --state-dir the cluster's?", name, x.rc.o.State.PKI(), errs[name])
		}
	}
	for _, m := range x.rc.inv.EtcdMembers() {
		if f := x.rc.fleet.Facts(m.Name); f == nil || len(f.EtcdDataDir) == 0 {
			return fmt.Errorf("%s: not part of the cluster yet (no etcd data): run kforge apply first; nothing was renewed", m.Name)
		}
	}
	nextCAs, err := pki.NextCAs(x.rc.o.State.PKI())
	if err != nil {
		return err
	}
	now := x.rc.o.Now()
	var mu sync.Mutex
	x.hostCerts = map[string]hostCerts{}
	first := x.rc.inv.Masters[0].Name
	err = x.rc.fleet.Each(ctx, "", func(ctx context.Context, n inventory.Node, h remote.Host) error {
		files := hostCertFiles(reqs, n, n.Name == first, x.rc.inv.ExternalEtcd())
		certs, err := readHostCerts(ctx, h, files)
		if err != nil {
			return err
		}
		var expired []string
		for _, f := range files {
			c := certs.first(f.Path)
			switch {
			case c == nil:
				continue
			case f.req != nil && f.req.Spec.IsCA():
				// The first certificate of a host's CA file: the state dir's, or the new CA of
				// a rotation in progress (which puts the signer first).
				if next := nextCAs[f.req.Spec.Name]; !c.Equal(cas[f.req.Spec.Name]) && (next == nil || !c.Equal(next)) {
					return &CAMismatchError{Host: n.Name, File: f.Path, Host_: pki.SPKIPin(c), State: pki.SPKIPin(cas[f.req.Spec.Name]), StateDir: x.rc.o.State.PKI()}
				}
			case !now.Before(c.NotAfter):
				switch {
				case f.Name == kubeletClient:
					mu.Lock()
					x.kubelets[n.Name] = c.NotAfter.UTC().Format(time.RFC3339)
					mu.Unlock()
				case f.Name == kubeletServing:
					mu.Lock()
					x.serving[n.Name] = true
					mu.Unlock()
				case x.renew(f.req.Key()):
					expired = append(expired, n.Name+": "+f.Name)
				}
			}
		}
		mu.Lock()
		x.hostCerts[n.Name] = certs
		x.expired = append(x.expired, expired...)
		mu.Unlock()
		msg := count(len(certs), "certificate") + " read"
		if len(expired) > 0 {
			msg += "; expired: " + strings.Join(expired, ", ")
		}
		r(progress.Event{Kind: progress.HostDone, Host: n.Name, Message: msg})
		return nil
	})
	slices.Sort(x.expired)
	return err
}

// CAMismatchError is a host that trusts another CA than the state dir's: renewing from the
// state dir would hand it certificates it rejects.
type CAMismatchError struct {
	Host, File   string
	Host_, State string // SPKI pins
	StateDir     string
}

func (e *CAMismatchError) Error() string {
	return fmt.Sprintf("%s: %s is a different CA (%s) than the state dir's (%s in %s): is --state-dir this cluster's, or was the host given another cluster's PKI? Nothing was renewed", e.Host, e.File, e.Host_, e.State, e.StateDir)
}

// issue re-issues the asked-for leaves in memory (and any leaf apply would re-issue too).
func (x *credentials) issue(_ context.Context, r progress.Reporter) error {
	set, changes, err := pki.RenewCluster(x.rc.inv, x.rc.o.InventoryDir, x.rc.o.State.PKI(), x.rc.o.Now(), x.rc.o.Rand, x.renew)
	if err != nil {
		return fmt.Errorf("PKI in %s: %w", x.rc.o.State.PKI(), err)
	}
	for _, ch := range changes {
		if ch.Action == "created" && (ch.Key == pki.CA || ch.Key == pki.EtcdCA || ch.Key == pki.FrontProxyCA || ch.Key == "sa") {
			return fmt.Errorf("PKI in %s has no %s: kforge certs renew renews a cluster kforge apply created; is --state-dir the cluster's?", x.rc.o.State.PKI(), ch.Key)
		}
		if ch.Action == "created" || ch.Action == "renewed" {
			x.renewed = append(x.renewed, ch.Key)
		}
		r(progress.Event{Kind: progress.Info, Message: ch.String()})
	}
	x.changes = changes
	tok, _, err := currentBootstrapToken(x.rc.o.State, x.rc.o)
	x.rc.setCredentials(set, tok)
	return err
}

// inputsLine is the line of a static-pod manifest that carries templates.InputsAnnotation.
var inputsLine = regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(templates.InputsAnnotation) + `:.*\n`)

// sameManifests refuses to go on when a master's static-pod manifests would change in more than
// the hash of their credentials: a new version or setting in the inventory is apply's work,
// with its upgrade order and checks, not a certificate renewal's.
func (x *credentials) sameManifests(ctx context.Context, r progress.Reporter) error {
	return x.rc.fleet.Each(ctx, "", func(ctx context.Context, n inventory.Node, h remote.Host) error {
		for _, f := range x.target.files.get(n.Name, isManifest) {
			have, err := remote.ReadFile(ctx, h, f.Path)
			if err != nil {
				return fmt.Errorf("read %s: %w", f.Path, err)
			}
			if !bytes.Equal(inputsLine.ReplaceAll(have, nil), inputsLine.ReplaceAll(f.Data, nil)) {
				return fmt.Errorf("%s differs from what the inventory renders in more than its certificates (another version or setting): run kforge apply, which renews expiring certificates too, or put the inventory back as the cluster runs; nothing was renewed", f.Path)
			}
		}
		return nil
	})
}

func isManifest(p string) bool {
	return path.Dir(p) == hostpath.ManifestsDir && strings.HasSuffix(p, ".yaml")
}

// isCredential says whether a master's file p is one renew pushes: the PKI, the kubeconfigs and
// the static-pod manifests (whose inputs hash makes kubelet restart the pods that use a
// renewed file).
func isCredential(p string) bool {
	return strings.HasPrefix(p, hostpath.PKIDir+"/") || isManifest(p) ||
		path.Dir(p) == hostpath.KubernetesDir && strings.HasSuffix(p, ".conf") && p != hostpath.BootstrapKubeletConfig
}

func (x *credentials) save(_ context.Context, r progress.Reporter) error {
	return x.rc.set.SaveIssued(x.rc.o.State.PKI(), x.changes)
}

func isKubeletServing(p string) bool {
	return p == hostpath.KubeletServerCert || p == hostpath.KubeletServerKey
}

// renewKubelets gives each kubelet whose client certificate expired a new one
// (newKubeletClientCert) and restarts it; a kubelet whose self-signed serving certificate
// expired has it removed, and makes a new one as it restarts. Kubelets are restarted before any
// static pod is replaced, which leaves the running pods alone.
func (x *credentials) renewKubelets(ctx context.Context, r progress.Reporter) error {
	return x.rc.fleet.Each(ctx, "", func(ctx context.Context, n inventory.Node, h remote.Host) error {
		// The serving certificate kforge issues: kubelet reads a new one itself.
		if err := push(ctx, x.target.files, h, isKubeletServing); err != nil {
			return err
		}
		if x.target.files.wrote(n.Name, isKubeletServing) {
			x.noteRenewed(pki.KubeletServerCert + "@" + n.Name)
			r(progress.Event{Kind: progress.HostDone, Host: n.Name, Message: "kubelet serving certificate renewed (kubelet reads it without a restart)"})
		}
		expired, serving := x.kubelets[n.Name], x.serving[n.Name]
		if expired == "" && !serving {
			return nil
		}
		var cmds, what []string
		if expired != "" {
			c, err := newKubeletClientCert(ctx, h, x.rc.set, x.rc.o)
			if err != nil {
				return err
			}
			what = append(what, "client certificate (expired "+expired+") renewed until "+c.NotAfter.UTC().Format(time.RFC3339))
			x.noteRenewed(kubeletClient + "@" + n.Name)
		}
		if serving {
			cmds = append(cmds, "rm -f "+hostpath.KubeletPKIDir+"/kubelet.crt "+hostpath.KubeletPKIDir+"/kubelet.key")
			what = append(what, "expired serving certificate removed (kubelet makes a new one)")
			x.noteRenewed(kubeletServing + "@" + n.Name)
		}
		cmds = append(cmds, "systemctl restart kubelet")
		if err := h.Run(ctx, remote.Cmd{Command: strings.Join(cmds, " && ")}); err != nil {
			return err
		}
		r(progress.Event{Kind: progress.HostDone, Host: n.Name, Message: "kubelet " + strings.Join(what, "; ") + "; kubelet restarted"})
		return nil
	})
}

// newKubeletClientCert writes a client certificate for h's kubelet, signed by set's cluster CA
// for the inventory's certValidity, into the kubelet's certificate store the way the kubelet
// keeps them (certificate and key in kubelet-client-<time>.pem, kubelet-client-current.pem
// pointing at it): for kubelets that can no longer rotate their own, or must move to a new CA.
// The kubelet reads it when it restarts.
func newKubeletClientCert(ctx context.Context, h remote.Host, set *pki.Set, o Options) (*x509.Certificate, error) {
	now := o.Now()
	req := pki.Request{Spec: pki.Spec{Name: kubeletClient, SignedBy: pki.CA, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, Subject: pki.KubeletSubject(h.Name())}
	kp, err := pki.Issue(req, set.CAs[pki.CA], set.Params.KeyAlgorithm, now, set.Params.CertValidity, o.Rand)
	if err != nil {
		return nil, err
	}
	key, err := pki.EncodeKey(kp.Key)
	if err != nil {
		return nil, err
	}
	file := path.Join(hostpath.KubeletPKIDir, "kubelet-client-"+now.UTC().Format("2006-01-02-15-04-05")+".pem")
	if err := h.Upload(ctx, remote.Bytes(file, append(pki.EncodeCert(kp.Cert), key...), 0o600)); err != nil {
		return nil, err
	}
	link := hostpath.KubeletClientCert
	if err := h.Run(ctx, remote.Cmd{Command: fmt.Sprintf("ln -sfn %s %s.kforge && mv -Tf %s.kforge %s", remote.Quote(file), link, link, link)}); err != nil {
		return nil, err
	}
	return kp.Cert, nil
}

// apiserverKubeletClient is kube-apiserver's client certificate for kubelets. The API server
// reads it again at its next handshake with a kubelet, or every 5 minutes (templates.Reloaded):
// renew makes it do so at once (reloadKubeletClient), so that no kubectl logs or exec of a user
// opens the connection whose handshake cuts every other. When it had expired, renew restarts
// the API server at once (restartAPIServerScript): the control plane is down anyway.
var apiserverKubeletClient = path.Join(hostpath.PKIDir, "apiserver-kubelet-client.crt")

// restartAPIServerScript kills the kube-apiserver container (its image is …/kube-apiserver:TAG);
// kubelet starts it again with the same manifest, and it reads every file anew.
var restartAPIServerScript = scripts.Command("restart-apiserver")

// pushMasters pushes each master's credentials and waits until the static pods kubelet
// restarts for them run and are Ready: one master at a time, the API watched through another
// master; all at once when certificates have expired.
func (x *credentials) pushMasters(ctx context.Context, r progress.Reporter) error {
	masters := x.rc.fleet.Nodes(inventory.RoleMaster)
	if len(x.expired) > 0 {
		r(progress.Event{Kind: progress.Info, Message: "expired: " + strings.Join(x.expired, ", ") + "; the control plane is down: every master at once"})
		if err := x.rc.fleet.Each(ctx, inventory.RoleMaster, func(ctx context.Context, n inventory.Node, h remote.Host) error {
			if err := pushCredentials(ctx, x.target.files, h); err != nil {
				return err
			}
			if !x.target.files.wrote(n.Name, func(p string) bool { return p == apiserverKubeletClient }) {
				return nil
			}
			return h.Run(ctx, remote.Cmd{Command: restartAPIServerScript})
		}); err != nil {
			return err
		}
		return x.waitMasters(ctx, r, masters, masters[0])
	}
	for i, n := range masters {
		if err := pushCredentials(ctx, x.target.files, x.rc.fleet.Host(n.Name)); err != nil {
			return err
		}
		// At once: any request to a kubelet that opens a connection through this API server
		// from now on would make it load the new certificate, and cut every other.
		if err := x.loadKubeletClient(ctx, n); err != nil {
			return err
		}
		// Watch through another master than the one restarting, when there is one.
		via := masters[(i+1)%len(masters)]
		if err := x.waitMasters(ctx, r, []inventory.Node{n}, via); err != nil {
			return err
		}
	}
	return nil
}

// pushEtcdHosts pushes each etcd host's credentials (an external etcd), one host at a time, and
// waits until its member answers its readiness check: after a restart when its manifest changed
// (a CA it reads only when it starts: certs rotate-ca; the files land under a restarted kubelet,
// pushUnderRestartedKubelet), at once otherwise.
func (x *credentials) pushEtcdHosts(ctx context.Context, r progress.Reporter) error {
	t := x.target
	for _, n := range x.rc.fleet.Nodes(inventory.RoleEtcd) {
		before := etcdStarted(ctx, x.rc, t.files, n)
		if err := pushUnderRestartedKubelet(ctx, x.rc, t.files, n, x.rc.fleet.Host(n.Name), isCredential); err != nil {
			return remote.WithHost(n.Name, err)
		}
		if err := waitEtcdRolled(ctx, x.rc, t.files, n, before); err != nil {
			return remote.WithHost(n.Name, err)
		}
		r(progress.Event{Kind: progress.HostDone, Host: n.Name, Message: fmt.Sprintf("%d files written; etcd ready", t.files.countWritten(n.Name))})
	}
	return nil
}

// renderedFor names whose files render makes for credentials, for the step's description.
func renderedFor(c *inventory.Cluster) string {
	if c.ExternalEtcd() {
		return "masters' and etcd hosts'"
	}
	return "masters'"
}

// loadKubeletClient makes master n's kube-apiserver load its new kubelet client certificate
// (reloadKubeletClient) once this run wrote one, and keeps what it took for n's report.
func (x *credentials) loadKubeletClient(ctx context.Context, n inventory.Node) error {
	if _, done := x.kubeletClient[n.Name]; done || !x.target.files.wrote(n.Name, func(p string) bool { return p == apiserverKubeletClient }) {
		return nil
	}
	t := x.rc.o.Now()
	tries, err := reloadKubeletClient(ctx, x.rc.inv, x.rc.set, x.rc.fleet, n, x.rc.o.Timeout)
	if err != nil {
		return remote.WithHost(n.Name, err)
	}
	if x.kubeletClient == nil {
		x.kubeletClient = map[string]string{}
	}
	x.kubeletClient[n.Name] = fmt.Sprintf("; kube-apiserver reaches kubelets with its new client certificate (after %s, %s)", x.rc.o.Now().Sub(t).Round(100*time.Millisecond), count(tries, "request"))
	return nil
}

// waitMasters waits, through master via's API server, until the static pods kubelet replaced
// on masters run their new manifests and are Ready, and reports each master.
func (x *credentials) waitMasters(ctx context.Context, r progress.Reporter, masters []inventory.Node, via inventory.Node) error {
	pods, err := replacedPods(x.target.files, masters)
	if err != nil {
		return err
	}
	if len(pods) > 0 {
		start := x.rc.o.Now()
		if err := waitPodsVia(ctx, x.rc, pods, via); err != nil {
			return err
		}
		r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("restarted pods ready after %s", x.rc.o.Now().Sub(start).Round(100*time.Millisecond))})
	}
	start := x.rc.o.Now()
	if err := waitServed(ctx, x.rc.fleet, x.target.files, masters, x.rc.o.Timeout); err != nil {
		return err
	}
	for _, n := range masters {
		if err := x.loadKubeletClient(ctx, n); err != nil {
			return err
		}
	}
	for _, n := range masters {
		var names []string
		for _, p := range pods {
			if p.Node == n.Name {
				names = append(names, p.Pod.Name)
			}
		}
		msg := "credentials unchanged, nothing restarted"
		if w := x.target.files.countWritten(n.Name); w > 0 {
			msg = count(w, "file") + " pushed"
			if len(names) > 0 {
				msg += "; restarted " + strings.Join(names, ", ")
			}
			if rl := servedNew(x.target.files, n.Name); len(rl) > 0 {
				msg += fmt.Sprintf("; new certificates served without a restart by %s (after %s)", strings.Join(rl, ", "), x.rc.o.Now().Sub(start).Round(100*time.Millisecond))
			}
			msg += x.kubeletClient[n.Name]
		}
		r(progress.Event{Kind: progress.HostDone, Host: n.Name, Message: msg})
	}
	return nil
}

// waitProbes waits until every pod answers its readiness probes (probeNow), asked every 250 ms
// through its master's SSH connection.
func waitProbes(ctx context.Context, rc *runContext, pods []kube.StaticPod) error {
	ctx, cancel := context.WithTimeout(ctx, rc.o.Timeout)
	defer cancel()
	for _, p := range pods {
		n, _ := rc.fleet.Node(p.Node)
		d, err := rc.fleet.Dialer(p.Node)
		if err != nil {
			return err
		}
		if why := until(ctx, func() string { return probeNow(ctx, d, n.NodeIP(), p.Pod) }); why != "" {
			return fmt.Errorf("%s: %s not ready after %s: %s", p.Node, p.Pod.Name, rc.o.Timeout, why)
		}
	}
	return nil
}
