package tasks

import (
	"context"
	"crypto/x509"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/scripts"
)

// CertsCheck is one `kforge certs check`: every certificate the cluster depends on, in the
// state dir and on every host (each master's PKI and kubeconfigs, each kubelet's client and
// serving certificate), and the user kubeconfigs kforge issued, each with its issuer, expiry
// and drift from the inventory and the state dir. It changes nothing, and it reads no private
// key off a host: the hosts send certificates only.
type CertsCheck struct {
	inv   *inventory.Cluster
	o     Options
	fleet *fleet.Fleet

	reqs  []pki.Request                // state: the inventory's certificate requests
	alg   pki.KeyAlgorithm             // state
	state map[string]*x509.Certificate // state: the state dir's certificates by request key
	cas   map[string]*x509.Certificate // state: the state dir's CAs by name

	mu sync.Mutex
	// Report is every certificate found, state dir first, then hosts in inventory order.
	Report []pki.Inspection
	// Unreachable are the hosts that could not be read, with why.
	Unreachable map[string]string
}

// NewCertsCheck prepares a check of c's certificates.
func NewCertsCheck(c *inventory.Cluster, o Options) *CertsCheck {
	o = o.withDefaults()
	return &CertsCheck{inv: c, o: o, fleet: newFleet(c, c.Hosts(), o), Unreachable: map[string]string{}}
}

// Close ends every connection.
func (x *CertsCheck) Close() { x.fleet.Close() }

// Steps is certs check, top to bottom.
func (x *CertsCheck) Steps() []Step {
	all := x.fleet.Names("")
	var l list
	l.add("state", OnWorkstation, nil, x.readState, "read the certificates in %s and the user kubeconfigs kforge issued", x.o.State.PKI())
	l.add("connect", OnHosts, all, x.reach, "connect to %s over SSH; a host that does not answer within %s is reported, not fatal", count(len(all), "host"), etcdReachTimeout)
	l.add("hosts", OnHosts, all, x.readHosts, "read each host's certificates (PKI, kubeconfigs' client certificates, the kubelet's client and serving certificates); private keys stay on the hosts")
	return l
}

func (x *CertsCheck) readState(context.Context, progress.Reporter) error {
	p, reqs, err := pki.InventoryRequests(x.inv)
	if err != nil {
		return err
	}
	x.reqs = reqs
	x.alg = p.KeyAlgorithm
	certs, errs := pki.StateCerts(x.o.State.PKI(), x.reqs)
	x.state, x.cas = certs, pki.StateCAs(certs)
	if x.cas[pki.CA] == nil {
		return fmt.Errorf("no cluster CA in %s (%v): kforge apply creates the cluster's PKI; is --state-dir the cluster's?", x.o.State.PKI(), errs[pki.CA])
	}
	for _, r := range x.reqs {
		file := pki.StatePath(x.o.State.PKI(), r) + ".crt"
		if err := errs[r.Key()]; err != nil {
			x.Report = append(x.Report, pki.Inspection{Where: "state", Name: r.Key(), File: file, Error: err.Error()})
			continue
		}
		x.Report = append(x.Report, pki.Inspect("state", r.Key(), file, certs[r.Key()], x.cas, x.expect(r, false)))
	}
	users, err := issuedUsers(x.o.State, x.cas)
	x.Report = append(x.Report, users...)
	return err
}

// expect is what the certificate of request r should be; onHost compares it with the state
// dir's copy too.
func (x *CertsCheck) expect(r pki.Request, onHost bool) pki.Expect {
	e := pki.Expect{Request: &r, Signer: r.Spec.SignedBy, Alg: x.alg}
	if onHost {
		e.State = x.state[r.Key()]
	}
	return e
}

func (x *CertsCheck) reach(ctx context.Context, r progress.Reporter) error {
	for name, err := range x.fleet.Reach(ctx, "", etcdReachTimeout, r) {
		x.Unreachable[name] = oneLine(err.Error())
	}
	return nil
}

func (x *CertsCheck) readHosts(ctx context.Context, r progress.Reporter) error {
	first := x.inv.Masters[0].Name
	found := map[string][]pki.Inspection{}
	err := x.fleet.Each(ctx, "", func(ctx context.Context, n inventory.Node, h remote.Host) error {
		if _, ok := x.Unreachable[n.Name]; ok {
			return nil
		}
		files := hostCertFiles(x.reqs, n, n.Name == first, x.inv.ExternalEtcd())
		certs, err := readHostCerts(ctx, h, files)
		if err != nil {
			x.mu.Lock()
			x.Unreachable[n.Name] = oneLine(err.Error())
			x.mu.Unlock()
			return nil
		}
		var out []pki.Inspection
		for _, f := range files {
			c := certs.first(f.Path)
			switch {
			case c == nil && f.optional:
				continue
			case c == nil:
				out = append(out, pki.Inspection{Where: n.Name, Name: f.Name, File: f.Path, Error: "missing"})
				continue
			}
			var want pki.Expect
			switch {
			case f.req != nil:
				want = x.expect(*f.req, true)
			case f.Name == kubeletClient:
				s := pki.KubeletSubject(n.Name)
				want = pki.Expect{Subject: &s, Signer: pki.CA}
			}
			in := pki.Inspect(n.Name, f.Name, f.Path, c, x.cas, want)
			if f.Name == kubeletServing {
				in.Issuer = pki.IssuerOfChain(certs[f.Path], x.cas)
			}
			if b := len(certs[f.Path]); b > 1 && f.req != nil && f.req.Spec.IsCA() {
				in.Drift = append(in.Drift, fmt.Sprintf("trusts %d CAs (a rotation in progress: kforge certs rotate-ca finishes it)", b))
			}
			out = append(out, in)
		}
		x.mu.Lock()
		found[n.Name] = out
		x.mu.Unlock()
		r(progress.Event{Kind: progress.HostDone, Host: n.Name, Message: count(len(out), "certificate")})
		return nil
	})
	for _, n := range x.inv.Hosts() {
		x.Report = append(x.Report, found[n.Name]...)
	}
	return err
}

// The names certs check gives the kubelet's certificates, which are not rows of pki.Table.
const (
	kubeletClient  = "kubelet-client"
	kubeletServing = "kubelet-serving"
)

// hostCertFile is a certificate on a host: a PEM certificate file, or the client certificate
// embedded in a kubeconfig.
type hostCertFile struct {
	Name, Path string
	kubeconfig bool
	optional   bool         // not every host has it (kubelet serving certificates, two kinds)
	req        *pki.Request // the inventory's request, for certificates kforge issues
}

// hostCertFiles are the certificates node n should have: on masters every row of the table
// (super-admin.conf on the first master only, as kubeadm), on every node the cluster CA and
// the kubelet's client and serving certificates.
func hostCertFiles(reqs []pki.Request, n inventory.Node, first, externalEtcd bool) []hostCertFile {
	var out []hostCertFile
	for _, r := range reqs {
		r := r
		if r.Node != "" && r.Node != n.Name {
			continue
		}
		switch {
		case n.Role == inventory.RoleEtcd:
			// An external etcd's host: the etcd CA and its member's own, and no kubelet client.
			if r.Spec.Name == pki.EtcdCA || r.Spec.EtcdMember() {
				out = append(out, hostCertFile{Name: r.Spec.Name, Path: path.Join(hostpath.PKIDir, r.Spec.BaseName+".crt"), req: &r})
			}
			continue
		case externalEtcd && r.Spec.EtcdMember():
			continue // on the etcd hosts
		case r.Spec.Name == pki.KubeletServerCert:
			out = append(out, hostCertFile{Name: r.Spec.Name, Path: hostpath.KubeletServerCert, req: &r})
		case n.Role == inventory.RoleWorker && r.Spec.Name != pki.CA:
			continue
		case r.Spec.BaseName != "":
			out = append(out, hostCertFile{Name: r.Spec.Name, Path: path.Join(hostpath.PKIDir, r.Spec.BaseName+".crt"), req: &r})
		case r.Spec.Kubeconfig == "super-admin.conf" && !first:
			continue
		default:
			out = append(out, hostCertFile{Name: r.Spec.Name, Path: path.Join(hostpath.KubernetesDir, r.Spec.Kubeconfig), kubeconfig: true, req: &r})
		}
	}
	if n.Role == inventory.RoleEtcd { // a standalone kubelet: no client certificate
		return append(out, hostCertFile{Name: kubeletServing, Path: hostpath.KubeletPKIDir + "/kubelet.crt", optional: true})
	}
	return append(out,
		hostCertFile{Name: kubeletClient, Path: hostpath.KubeletClientCert},
		hostCertFile{Name: kubeletServing, Path: hostpath.KubeletPKIDir + "/kubelet.crt", optional: true},
		hostCertFile{Name: kubeletServing, Path: hostpath.KubeletPKIDir + "/kubelet-server-current.pem", optional: true})
}

// hostCerts are the certificates read from a host's files (readHostCerts), by path: one, or
// several in a CA bundle.
type hostCerts map[string][]*x509.Certificate

// first is the first certificate of file p (a leaf, or the signing CA of a bundle); nil when the
// file is missing or holds none.
func (hc hostCerts) first(p string) *x509.Certificate {
	if cs := hc[p]; len(cs) > 0 {
		return cs[0]
	}
	return nil
}

// readHostCerts reads files' certificates from h in one command: only the certificate blocks
// (a kubeconfig's client-certificate-data, decoded) leave the host, never a key. A file that
// is missing or holds no certificate is absent from the result.
func readHostCerts(ctx context.Context, h remote.Host, files []hostCertFile) (hostCerts, error) {
	var list []string
	for _, f := range files {
		kind := "cert"
		if f.kubeconfig {
			kind = "kubeconfig"
		}
		list = append(list, kind+" "+f.Path)
	}
	out, err := remote.Output(ctx, h, scripts.Command("read-certs", "files", scripts.Lines(list)))
	if err != nil {
		return nil, err
	}
	certs := hostCerts{}
	for _, part := range strings.Split(string(out), "==> ")[1:] {
		p, pemData, _ := strings.Cut(part, "\n")
		if cs, err := pki.ParseCerts([]byte(pemData)); err == nil && len(cs) > 0 {
			certs[p] = cs
		}
	}
	return certs, nil
}

// Expiring are the certificates of the report that expire within d of now (or have expired).
func (x *CertsCheck) Expiring(now time.Time, d time.Duration) []pki.Inspection {
	var out []pki.Inspection
	for _, in := range x.Report {
		if in.Error == "" && in.Left(now) < d {
			out = append(out, in)
		}
	}
	return out
}

// Problems are the report's certificates that are missing or unreadable.
func (x *CertsCheck) Problems() []pki.Inspection {
	return slices.DeleteFunc(slices.Clone(x.Report), func(in pki.Inspection) bool { return in.Error == "" })
}
