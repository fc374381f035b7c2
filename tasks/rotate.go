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
	x   *credentials // the steps it shares with certs renew
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
	return &RotateCA{x: newCredentials(c, o, func(string) bool { return false }), cas: cas}
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

// Close ends every connection.
func (rot *RotateCA) Close() { rot.x.rc.fleet.Close() }

// Steps is certs rotate-ca, top to bottom.
func (rot *RotateCA) Steps() []Step {
	rc := rot.x.rc
	all := rc.fleet.Names("")
	var l list
	rot.x.credentialSteps(&l, "read the state dir's PKI (nothing is written yet)")
	l.add("start", OnWorkstation, nil, rot.start, "make the new %s in %s/next, or resume the rotation in progress", strings.Join(rot.cas, ", "), rc.o.State.PKI())
	l.add("trust", OnHosts, all, rc.kubeletsSay(rot.phase(pki.PhaseTrust)), "every ca.crt and kubeconfig trusts the old and the new CA: an external etcd's hosts one at a time, then the masters one at a time (static pods restarted and Ready), then the kubelets; the addons' pods replaced one at a time once they are given both CAs")
	l.add("reissue", OnHosts, all, rc.kubeletsSay(rot.phase(pki.PhaseReissue)), "the new CA signs every leaf certificate and every kubelet's client certificate: masters one at a time, then the kubelets")
	l.add("drop", OnHosts, all, rc.kubeletsSay(rot.phase(pki.PhaseDrop)), "only the new CA is trusted: masters one at a time, then the kubelets, then the addons' pods")
	l.add("finish", OnWorkstation, nil, rot.finish, "the new CAs replace the old ones in the state dir; cluster-info and the admin kubeconfig follow")
	return l
}

func (rot *RotateCA) start(_ context.Context, r progress.Reporter) error {
	rc := rot.x.rc
	if rc.inv.PKI.ExternalCA != nil && slices.Contains(rot.cas, pki.CA) {
		return fmt.Errorf("pki.externalCA: the cluster CA is yours and its key is not kforge's; rotate the etcd and front-proxy CAs only (--ca etcd,front-proxy), or replace pki.externalCA")
	}
	p, _, err := pki.FromInventory(rc.inv)
	if err != nil {
		return err
	}
	r0, err := pki.StartRotation(rc.o.State.PKI(), rot.cas, p, rc.o.Now(), rc.o.Rand)
	if err != nil {
		return err
	}
	rot.rot = r0
	tok, _, err := currentBootstrapToken(rc.o.State, rc.o)
	if err != nil {
		return err
	}
	rc.setCredentials(rc.set, tok)
	r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("rotation of %s in phase %s (started %s)", strings.Join(r0.CAs, ", "), r0.Phase, r0.Started.Format(time.RFC3339))})
	return nil
}

// phase returns the step that rolls phase ph over every host; a phase an earlier run finished
// is skipped.
func (rot *RotateCA) phase(ph pki.Phase) func(context.Context, progress.Reporter) error {
	rc := rot.x.rc
	return func(ctx context.Context, r progress.Reporter) error {
		if slices.Index(pki.Phases, rot.rot.Phase) > slices.Index(pki.Phases, ph) {
			r(progress.Event{Kind: progress.Info, Message: "done by an earlier run"})
			return nil
		}
		set, changes, err := pki.EnsureCluster(rc.inv, rc.o.InventoryDir, rc.o.State.PKI(), rc.o.Now(), rc.o.Rand)
		if err != nil {
			return fmt.Errorf("PKI in %s: %w", rc.o.State.PKI(), err)
		}
		rc.setCredentials(set, rc.token)
		if n := countIssued(changes); n > 0 {
			r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("%d certificates issued by the new CA", n)})
		}
		rot.x.target.files, rot.x.kubeletClient = newHostFiles(), nil // this phase's files, and their reloads
		if err := rot.x.target.render(rot.x.etcd, 0); err != nil {
			return err
		}
		// An external etcd's hosts first, one at a time, each member ready before the next: in
		// each phase the members trust (or are signed by) what the API servers then present.
		if err := rot.x.pushEtcdHosts(ctx, r); err != nil {
			return err
		}
		masters := rc.fleet.Nodes(inventory.RoleMaster)
		for i, n := range masters {
			h := rc.fleet.Host(n.Name)
			if err := pushEtcdFirst(ctx, rc, rot.x.target.files, n, h, isCredential, false, r); err != nil {
				return err
			}
			if err := restartRegistry(ctx, rot.x.target.files, h); err != nil {
				return err
			}
			if err := push(ctx, rot.x.target.files, h, isKubeletServing); err != nil { // kubelet reads it itself
				return err
			}
			if err := rot.x.waitMasters(ctx, r, []inventory.Node{n}, masters[(i+1)%len(masters)]); err != nil {
				return err
			}
			if ph == pki.PhaseDrop { // kube-controller-manager signs with ca.crt again
				if err := h.Run(ctx, remote.Cmd{Command: "rm -f " + path.Join(hostpath.PKIDir, templates.SigningCertFile)}); err != nil {
					return err
				}
			}
			if err := rot.rollKubelet(ctx, r, n, h, ph); err != nil {
				return err
			}
		}
		if err := rc.fleet.Each(ctx, inventory.RoleWorker, func(ctx context.Context, n inventory.Node, h remote.Host) error {
			if err := push(ctx, rot.x.target.files, h, func(p string) bool { return p == hostpath.CACert || isKubeletServing(p) }); err != nil {
				return err
			}
			return rot.rollKubelet(ctx, r, n, h, ph)
		}); err != nil {
			return err
		}
		api, err := rc.clients()
		if err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, rc.o.Timeout)
		defer cancel()
		if err := kube.WaitForReady(wctx, api.Typed, kube.WaitReadyInput{Nodes: rc.fleet.Names(inventory.AnyNode), Namespaces: []string{"kube-system"}}); err != nil {
			return err
		}
		if ph != pki.PhaseReissue && slices.Contains(rot.rot.CAs, pki.CA) {
			if err := rot.restartAddons(ctx, r); err != nil {
				return err
			}
		}
		// The user's admin kubeconfig follows each phase: it trusts what the API servers present
		// and carries a certificate they accept.
		if err := rc.writeKubeconfig(ctx, r); err != nil {
			return err
		}
		if ph == pki.PhaseDrop {
			return nil // finish ends the rotation
		}
		return pki.AdvanceRotation(rc.o.State.PKI(), rot.rot)
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
func (rot *RotateCA) rollKubelet(ctx context.Context, r progress.Reporter, n inventory.Node, h remote.Host, ph pki.Phase) error {
	rc := rot.x.rc
	var what []string
	if n.Role == inventory.RoleWorker && slices.Contains(rot.rot.CAs, pki.CA) {
		changed, err := setKubeconfigCA(ctx, h, hostpath.KubeletKubeconfig, rc.set.TrustPEM(pki.CA))
		if err != nil {
			return err
		}
		if changed {
			what = append(what, "kubelet.conf trusts "+count(len(rc.set.Trust[pki.CA]), "CA"))
		}
	}
	if ph == pki.PhaseReissue && slices.Contains(rot.rot.CAs, pki.CA) && !rot.kubeletSigned(n.Name) {
		c, err := newKubeletClientCert(ctx, h, rc.set, rc.o)
		if err != nil {
			return err
		}
		what = append(what, "client certificate from the new CA until "+c.NotAfter.UTC().Format(time.RFC3339))
	}
	if len(what) == 0 && !rot.x.target.files.wrote(n.Name, isKubeletInput) {
		r(progress.Event{Kind: progress.HostDone, Host: n.Name, Message: "kubelet unchanged"})
		return nil
	}
	if err := h.Run(ctx, remote.Cmd{Command: "systemctl restart kubelet"}); err != nil {
		return err
	}
	if rot.x.target.files.wrote(n.Name, func(p string) bool { return p == hostpath.CACert }) {
		what = append([]string{"ca.crt trusts " + count(len(rc.set.Trust[pki.CA]), "CA")}, what...)
	}
	r(progress.Event{Kind: progress.HostDone, Host: n.Name, Message: strings.Join(what, "; ") + "; kubelet restarted"})
	return nil
}

// kubeletSigned says whether node's kubelet client certificate, as inspect read it, is signed
// by the set's cluster CA already (a resumed reissue phase).
func (rot *RotateCA) kubeletSigned(node string) bool {
	rc := rot.x.rc
	c := rot.x.hostCerts[node].first(hostpath.KubeletClientCert)
	return c != nil && pki.SignedBy(c, rc.set.CAs[pki.CA].Cert)
}

// restartAddons waits until kube-controller-manager publishes the phase's cluster CAs to the
// pods (kube-root-ca.crt) and replaces the addons' pods one at a time, so that those reading
// their CA once at start trust what the API server presents next.
func (rot *RotateCA) restartAddons(ctx context.Context, r progress.Reporter) error {
	rc := rot.x.rc
	var want []string
	for _, c := range rc.set.Trust[pki.CA] {
		want = append(want, strings.TrimSpace(string(pki.EncodeCert(c))))
	}
	ns := addonNamespaces(rc.inv)
	api, err := rc.clients()
	if err != nil {
		return err
	}
	for _, n := range ns {
		if err := kube.ConfigMapHolds(ctx, api.Typed, n, "kube-root-ca.crt", "ca.crt", want, true, rc.o.Timeout); err != nil {
			return err
		}
	}
	done, err := kube.RestartPods(ctx, api.Typed, ns, rc.o.Timeout)
	rot.Restarted = append(rot.Restarted, done...)
	r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("replaced %s, one at a time per DaemonSet or Deployment: %s", count(len(done), "addon pod"), strings.Join(done, ", "))})
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
func (rot *RotateCA) finish(ctx context.Context, r progress.Reporter) error {
	rc := rot.x.rc
	if err := pki.FinishRotation(rc.o.State.PKI(), rot.rot); err != nil {
		return err
	}
	rot.Retired = rot.rot.Old
	if err := rc.ensurePKI(ctx, r); err != nil {
		return err
	}
	if err := rc.bootstrap(ctx, r); err != nil {
		return err
	}
	if err := rc.writeKubeconfig(ctx, r); err != nil {
		return err
	}
	users, err := issuedUsers(rc.o.State, map[string]*x509.Certificate{pki.CA: rc.set.CAs[pki.CA].Cert})
	if err != nil {
		return err
	}
	for _, u := range users {
		if len(u.Drift) > 0 {
			rot.StaleUsers = append(rot.StaleUsers, strings.TrimPrefix(u.Name, "user:"))
		}
	}
	if len(rot.StaleUsers) > 0 {
		r(progress.Event{Kind: progress.Info, Message: "user kubeconfigs signed by the old CA, to replace (kforge kubeconfig --user NAME): " + strings.Join(rot.StaleUsers, ", ")})
	}
	return nil
}
