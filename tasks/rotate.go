package tasks

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/templates"
)

// RotateCA is one `kforge certs rotate-ca`: CAs replaced without downtime, in the phases of
// pki.Phases, each rolled over every host before the next starts:
//
//   - trust: every ca.crt and kubeconfig trusts the old and the new CA; the masters' static pods
//     restart one at a time (each Ready before the next), then every kubelet; once
//     kube-controller-manager publishes both CAs to the pods (kube-root-ca.crt), the addons that
//     read it once at start (kube-proxy, CoreDNS, flannel) are replaced one pod at a time.
//   - reissue: the new CA signs every leaf and every kubelet's client certificate; the same
//     rolling order.
//   - drop: only the new CA is trusted; the same rolling order, addons again.
//
// then the new CAs replace the old ones in the state dir. The phase is recorded in the state
// dir after each is done everywhere, so an interrupted rotation is finished by running it
// again. Service-account tokens stay valid throughout: they are signed with sa.key, which a CA
// rotation does not touch.
type RotateCA struct {
	*CertsRenew
	cas []string
	rot *pki.Rotation // start
	// Restarted are the addon pods replaced to trust the new CA.
	Restarted []string
	// Retired are the SPKI pins of the CAs replaced, by name.
	Retired map[string]string
	// StaleUsers are the user kubeconfigs signed by the old cluster CA: they need replacing.
	StaleUsers []string
}

// NewRotateCA prepares the rotation of c's CAs named cas (pki.CA, pki.EtcdCA, pki.FrontProxyCA).
func NewRotateCA(c *inventory.Cluster, o Options, cas []string) *RotateCA {
	return &RotateCA{CertsRenew: NewCertsRenew(c, o, func(string) bool { return false }), cas: cas}
}

// CAsFlag turns --ca (cluster, etcd, front-proxy or all; comma-separated) into CA names.
func CAsFlag(v string) ([]string, error) {
	names := map[string]string{"cluster": pki.CA, "etcd": pki.EtcdCA, "front-proxy": pki.FrontProxyCA}
	var out []string
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "all" {
			return []string{pki.CA, pki.FrontProxyCA, pki.EtcdCA}, nil
		}
		n, ok := names[f]
		if !ok {
			return nil, fmt.Errorf("--ca %q: choose cluster, etcd, front-proxy or all (comma-separated for several)", f)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	// Table order, so that a resumed rotation names the same CAs the same way.
	var ordered []string
	for _, s := range pki.Table() {
		if slices.Contains(out, s.Name) {
			ordered = append(ordered, s.Name)
		}
	}
	return ordered, nil
}

// Steps is certs rotate-ca, top to bottom.
func (x *RotateCA) Steps() []Step {
	c, f := x.inv, x.fleet
	all, masters := f.Names(""), f.Names(inventory.RoleMaster)
	var l list
	l.add("connect", OnHosts, all, f.Connect, "connect to %s over SSH (host keys verified) and gather facts in one round trip each", count(len(all), "host"))
	if c.Bundle != "" {
		l.add("bundle", OnWorkstation, nil, x.readBundle, "read the bundle's manifest of Kubernetes %s (the images the static pods run)", c.KubernetesVersion)
	}
	l.add("inspect", OnHosts, all, x.inspect, "read every host's certificates; refuse when a host trusts another CA than the state dir's (or the new one of this rotation)")
	l.add("etcd-members", OnHosts, masters, x.planEtcd, "read how each etcd member started (its manifest), so that only credentials change")
	l.add("pki", OnWorkstation, nil, x.issue, "read the state dir's PKI (nothing is written yet)")
	l.add("render", OnWorkstation, nil, x.render, "render the masters' files as they are now")
	l.add("same-manifests", OnHosts, masters, x.sameManifests, "refuse when a master's static pods would change in more than their credentials (kforge apply changes those)")
	l.add("start", OnWorkstation, nil, x.start, "make the new %s in %s/next, or resume the rotation in progress", strings.Join(x.cas, ", "), x.o.State.PKI())
	l.add("trust", OnHosts, all, x.kubeletsSay(x.phase(pki.PhaseTrust)), "every ca.crt and kubeconfig trusts the old and the new CA: masters one at a time (static pods restarted and Ready), then the kubelets; the addons' pods replaced one at a time once they are given both CAs")
	l.add("reissue", OnHosts, all, x.kubeletsSay(x.phase(pki.PhaseReissue)), "the new CA signs every leaf certificate and every kubelet's client certificate: masters one at a time, then the kubelets")
	l.add("drop", OnHosts, all, x.kubeletsSay(x.phase(pki.PhaseDrop)), "only the new CA is trusted: masters one at a time, then the kubelets, then the addons' pods")
	l.add("finish", OnWorkstation, nil, x.finish, "the new CAs replace the old ones in the state dir; cluster-info and the admin kubeconfig follow")
	return l
}

func (x *RotateCA) start(_ context.Context, r progress.Reporter) error {
	if x.inv.PKI.ExternalCA != nil && slices.Contains(x.cas, pki.CA) {
		return fmt.Errorf("pki.externalCA: the cluster CA is yours and its key is not kforge's; rotate the etcd and front-proxy CAs only (--ca etcd,front-proxy), or replace pki.externalCA")
	}
	p, _, err := pki.FromInventory(x.inv)
	if err != nil {
		return err
	}
	rot, err := pki.StartRotation(x.o.State.PKI(), x.cas, p, x.o.Now(), x.o.Rand)
	if err != nil {
		return err
	}
	x.rot = rot
	if x.token, _, err = currentBootstrapToken(x.o.State, x.o); err != nil {
		return err
	}
	r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("rotation of %s in phase %s (started %s)", strings.Join(rot.CAs, ", "), rot.Phase, rot.Started.Format(time.RFC3339))})
	return nil
}

// phase returns the step that rolls phase ph over every host; a phase an earlier run finished
// is skipped.
func (x *RotateCA) phase(ph pki.Phase) func(context.Context, progress.Reporter) error {
	return func(ctx context.Context, r progress.Reporter) error {
		if slices.Index(pki.Phases, x.rot.Phase) > slices.Index(pki.Phases, ph) {
			r(progress.Event{Kind: progress.Info, Message: "done by an earlier run"})
			return nil
		}
		set, changes, err := pki.EnsureCluster(x.inv, x.o.InventoryDir, x.o.State.PKI(), x.o.Now(), x.o.Rand)
		if err != nil {
			return fmt.Errorf("PKI in %s: %w", x.o.State.PKI(), err)
		}
		x.set = set
		if n := countIssued(changes); n > 0 {
			r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("%d certificates issued by the new CA", n)})
		}
		x.files, x.kubeletClient = newHostFiles(), nil // this phase's files, and their reloads
		if err := x.render(ctx, r); err != nil {
			return err
		}
		masters := x.fleet.Nodes(inventory.RoleMaster)
		for i, n := range masters {
			h := x.fleet.Host(n.Name)
			if err := pushCredentials(ctx, x.files, h); err != nil {
				return err
			}
			if err := x.waitMasters(ctx, r, []inventory.Node{n}, masters[(i+1)%len(masters)]); err != nil {
				return err
			}
			if ph == pki.PhaseDrop { // kube-controller-manager signs with ca.crt again
				if err := h.Run(ctx, remote.Cmd{Command: "rm -f " + path.Join(hostpath.PKIDir, templates.SigningCertFile)}); err != nil {
					return err
				}
			}
			if err := x.rollKubelet(ctx, r, n, h, ph); err != nil {
				return err
			}
		}
		if err := x.fleet.Each(ctx, inventory.RoleWorker, func(ctx context.Context, n inventory.Node, h remote.Host) error {
			if err := push(ctx, x.files, h, func(p string) bool { return p == hostpath.CACert }); err != nil {
				return err
			}
			return x.rollKubelet(ctx, r, n, h, ph)
		}); err != nil {
			return err
		}
		api, err := dialAPIClients(x.inv, x.set, x.fleet, false)
		if err != nil {
			return err
		}
		x.api = api
		wctx, cancel := context.WithTimeout(ctx, x.o.Timeout)
		defer cancel()
		if err := kube.WaitForReady(wctx, x.api.Typed, kube.WaitReadyInput{Nodes: x.fleet.Names(""), Namespaces: []string{"kube-system"}}); err != nil {
			return err
		}
		if ph != pki.PhaseReissue && slices.Contains(x.rot.CAs, pki.CA) {
			if err := x.restartAddons(ctx, r); err != nil {
				return err
			}
		}
		// The user's admin kubeconfig follows each phase: it trusts what the API servers present
		// and carries a certificate they accept.
		if err := x.writeKubeconfig(ctx, r); err != nil {
			return err
		}
		if ph == pki.PhaseDrop {
			return nil // finish ends the rotation
		}
		return pki.AdvanceRotation(x.o.State.PKI(), x.rot)
	}
}

func countIssued(changes []pki.Change) int {
	n := 0
	for _, ch := range changes {
		if ch.Action == "created" || ch.Action == "renewed" {
			n++
		}
	}
	return n
}

// rollKubelet brings node n's kubelet to the phase: on a worker its kubelet.conf (which its
// kubelet wrote at TLS bootstrap) trusts the phase's CAs; in the reissue phase it gets a client
// certificate signed by the new CA; it restarts when any of that, or its ca.crt, changed.
func (x *RotateCA) rollKubelet(ctx context.Context, r progress.Reporter, n inventory.Node, h remote.Host, ph pki.Phase) error {
	var what []string
	if n.Role == inventory.RoleWorker && slices.Contains(x.rot.CAs, pki.CA) {
		changed, err := setKubeconfigCA(ctx, h, hostpath.KubeletKubeconfig, x.set.TrustPEM(pki.CA))
		if err != nil {
			return err
		}
		if changed {
			what = append(what, "kubelet.conf trusts "+count(len(x.set.Trust[pki.CA]), "CA"))
		}
	}
	if ph == pki.PhaseReissue && slices.Contains(x.rot.CAs, pki.CA) && !x.kubeletSigned(n.Name) {
		c, err := newKubeletClientCert(ctx, h, x.set, x.o)
		if err != nil {
			return err
		}
		what = append(what, "client certificate from the new CA until "+c.NotAfter.UTC().Format(time.RFC3339))
	}
	if len(what) == 0 && !x.files.wrote(n.Name, isKubeletInput) {
		r(progress.Event{Kind: progress.HostDone, Host: n.Name, Message: "kubelet unchanged"})
		return nil
	}
	if err := h.Run(ctx, remote.Cmd{Command: "systemctl restart kubelet"}); err != nil {
		return err
	}
	if x.files.wrote(n.Name, func(p string) bool { return p == hostpath.CACert }) {
		what = append([]string{"ca.crt trusts " + count(len(x.set.Trust[pki.CA]), "CA")}, what...)
	}
	r(progress.Event{Kind: progress.HostDone, Host: n.Name, Message: strings.Join(what, "; ") + "; kubelet restarted"})
	return nil
}

// kubeletSigned says whether node's kubelet client certificate, as inspect read it, is signed
// by the set's cluster CA already (a resumed reissue phase).
func (x *RotateCA) kubeletSigned(node string) bool {
	c := x.hostCerts[node].first(hostpath.KubeletClientCert)
	return c != nil && pki.SignedBy(c, x.set.CAs[pki.CA].Cert)
}

// restartAddons waits until kube-controller-manager publishes the phase's cluster CAs to the
// pods (kube-root-ca.crt) and replaces the addons' pods one at a time, so that those reading
// their CA once at start trust what the API server presents next.
func (x *RotateCA) restartAddons(ctx context.Context, r progress.Reporter) error {
	var want []string
	for _, c := range x.set.Trust[pki.CA] {
		want = append(want, strings.TrimSpace(string(pki.EncodeCert(c))))
	}
	ns := []string{"kube-system"}
	if x.inv.Networking.Plugin == "flannel" {
		ns = append(ns, "kube-flannel")
	}
	for _, n := range ns {
		if err := kube.ConfigMapHolds(ctx, x.api.Typed, n, "kube-root-ca.crt", "ca.crt", want, true, x.o.Timeout); err != nil {
			return err
		}
	}
	done, err := kube.RestartPods(ctx, x.api.Typed, ns, x.o.Timeout)
	x.Restarted = append(x.Restarted, done...)
	r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("replaced %s one at a time: %s", count(len(done), "addon pod"), strings.Join(done, ", "))})
	return err
}

// setKubeconfigCA sets the CA data of every cluster of the kubeconfig at p on h to caPEM, and
// says whether that changed it. It is for kubeconfigs that hold no key (a worker's kubelet.conf
// names its certificate files).
func setKubeconfigCA(ctx context.Context, h remote.Host, p string, caPEM []byte) (bool, error) {
	data, err := remote.ReadFile(ctx, h, p)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", p, err)
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return false, fmt.Errorf("%s: %w", p, err)
	}
	changed := false
	for _, c := range cfg.Clusters {
		if !bytes.Equal(c.CertificateAuthorityData, caPEM) {
			c.CertificateAuthorityData, changed = caPEM, true
		}
	}
	if !changed {
		return false, nil
	}
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return false, err
	}
	return true, h.Upload(ctx, remote.Bytes(p, out, 0o600))
}

// finish makes the new CAs the state dir's, publishes the cluster CA in cluster-info (as apply
// does), writes the admin kubeconfig and lists the user kubeconfigs of the old CA.
func (x *RotateCA) finish(ctx context.Context, r progress.Reporter) error {
	if err := pki.FinishRotation(x.o.State.PKI(), x.rot); err != nil {
		return err
	}
	x.Retired = x.rot.Old
	if err := x.ensurePKI(ctx, r); err != nil {
		return err
	}
	api, err := dialAPIClients(x.inv, x.set, x.fleet, false)
	if err != nil {
		return err
	}
	x.api = api
	if err := x.bootstrap(ctx, r); err != nil {
		return err
	}
	if err := x.writeKubeconfig(ctx, r); err != nil {
		return err
	}
	users, err := issuedUsers(x.o.State, map[string]*x509.Certificate{pki.CA: x.set.CAs[pki.CA].Cert})
	if err != nil {
		return err
	}
	for _, u := range users {
		if len(u.Drift) > 0 {
			x.StaleUsers = append(x.StaleUsers, strings.TrimPrefix(u.Name, "user:"))
		}
	}
	if len(x.StaleUsers) > 0 {
		r(progress.Event{Kind: progress.Info, Message: "user kubeconfigs signed by the old CA, to replace (kforge kubeconfig --user NAME): " + strings.Join(x.StaleUsers, ", ")})
	}
	return nil
}
