// Package pki is kforge's certificate set: the certificates kubeadm v1.36 creates, as one table
// of rows (Table) plus pure functions that turn a row into a certificate request and sign it.
// Issuing touches no disk and takes its clock and randomness from the caller; the state layer
// (state.go) keeps material in the state directory and decides what to re-issue.
package pki

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"
)

// Names of the three CAs, as kubeadm names them.
const (
	CA           = "ca"
	FrontProxyCA = "front-proxy-ca"
	EtcdCA       = "etcd-ca"
)

// Kubeadm's fixed subjects.
const (
	ClusterAdminsGroup = "kubeadm:cluster-admins"
	MastersGroup       = "system:masters"
	NodesGroup         = "system:nodes"
	NodeUserPrefix     = "system:node:"
)

// Backdate is subtracted from "now" for every NotBefore, as kubeadm does
// (constants.CertificateBackdate), so a host whose clock lags a little accepts new certificates.
const Backdate = 5 * time.Minute

// Params are the cluster-wide inputs certificates are computed from.
type Params struct {
	ClusterName string
	DNSDomain   string
	// ServiceSubnet's first address is the kubernetes Service IP, a SAN of the apiserver cert.
	ServiceSubnet string
	// ControlPlaneEndpoint is host:port; its host is a SAN of the apiserver certificate.
	ControlPlaneEndpoint string
	// APIServerCertSANs are extra DNS names or IPs for the apiserver certificate.
	APIServerCertSANs []string
	KeyAlgorithm      KeyAlgorithm
	CertValidity      time.Duration
	CAValidity        time.Duration
	// MastersServeBundle issues the masters' registry certificates (RegistryCert): a cluster
	// whose masters serve the bundle to the other nodes (inventory BundleFromMasters).
	MastersServeBundle bool
}

// Master is one control-plane node: its node name, the IP it advertises and, when different,
// the address kforge reaches it at (an IP or DNS name users may also point kubectl at).
type Master struct {
	Name    string
	IP      string
	IPv6    string // a dual-stack cluster's node's IPv6 address, else empty
	Address string
}

// Hosts are the hosts certificates are issued for, by role.
type Hosts struct {
	Masters []Master
	// Workers get the PerNode rows (their kubelets' serving certificates).
	Workers []Master
	// Etcd are the etcd group's hosts (external etcd); none when the masters run etcd.
	Etcd []Master
}

// EtcdMembers are the hosts of the etcd members: the etcd group's, or the masters'.
func (h Hosts) EtcdMembers() []Master {
	if len(h.Etcd) > 0 {
		return h.Etcd
	}
	return h.Masters
}

// Scope says how many times a row is issued.
type Scope int

const (
	// Cluster rows are issued once.
	Cluster Scope = iota
	// PerMaster rows are issued once per master, keyed by the master's name.
	PerMaster
	// PerNode rows are issued once per node, master or worker, keyed by the node's name.
	PerNode
	// PerEtcd rows are issued once per etcd member, keyed by its host's name: every master
	// with stacked etcd, every host of the etcd group with external etcd.
	PerEtcd
)

// Spec is one row of the certificate table. Rows are values built by Table and never mutated.
type Spec struct {
	// Name is kubeadm's name for the certificate ("apiserver", "etcd-server", "admin.conf").
	Name string
	// BaseName is the file name without extension under /etc/kubernetes/pki ("etcd/server");
	// empty for certificates that live only inside a kubeconfig.
	BaseName string
	// Kubeconfig is the file under /etc/kubernetes whose client certificate this is, if any.
	Kubeconfig string
	// SignedBy names the signing CA; empty for a self-signed CA.
	SignedBy string
	Scope    Scope
	// Subject returns CN and O for a master (the zero Master for Cluster rows).
	Subject func(m Master) (cn string, org []string)
	// ExtKeyUsage is empty for CAs.
	ExtKeyUsage []x509.ExtKeyUsage
	// SANs returns DNS names and IPs; nil for rows without SANs.
	SANs func(p Params, m Master) ([]string, []net.IP, error)
}

// EtcdMember says whether the row is one of an etcd member's own certificates: its serving and
// peer certificates and the health-check client's, which an external etcd's hosts hold and its
// masters do not.
func (s Spec) EtcdMember() bool { return s.Scope == PerEtcd || s.Name == "etcd-healthcheck-client" }

// IsCA reports whether the row is a certificate authority.
func (s Spec) IsCA() bool { return s.SignedBy == "" }

// KeyUsage is what kubeadm sets: digital signature and key encipherment on every certificate
// (whatever the key type), plus certificate signing on CAs.
func (s Spec) KeyUsage() x509.KeyUsage {
	u := x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	if s.IsCA() {
		u |= x509.KeyUsageCertSign
	}
	return u
}

func fixed(cn string, org ...string) func(Master) (string, []string) {
	return func(Master) (string, []string) { return cn, org }
}

var (
	serverAuth = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	clientAuth = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	bothAuth   = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
)

// Table returns kubeadm v1.36's certificate set (phases/certs/certlist.go and the client
// certificates of phases/kubeconfig), CAs first, plus kforge's one row of its own
// (RegistryCert). Each call returns fresh rows.
func Table() []Spec {
	return []Spec{
		{Name: CA, BaseName: "ca", Subject: fixed("kubernetes"), SANs: caSANs("kubernetes")},
		{Name: FrontProxyCA, BaseName: "front-proxy-ca", Subject: fixed("front-proxy-ca"), SANs: caSANs("front-proxy-ca")},
		{Name: EtcdCA, BaseName: "etcd/ca", Subject: fixed("etcd-ca"), SANs: caSANs("etcd-ca")},

		{Name: "apiserver", BaseName: "apiserver", SignedBy: CA, Scope: PerMaster,
			Subject: fixed("kube-apiserver"), ExtKeyUsage: serverAuth, SANs: apiserverSANs},
		{Name: "apiserver-kubelet-client", BaseName: "apiserver-kubelet-client", SignedBy: CA,
			Subject: fixed("kube-apiserver-kubelet-client"), ExtKeyUsage: clientAuth},
		{Name: "front-proxy-client", BaseName: "front-proxy-client", SignedBy: FrontProxyCA,
			Subject: fixed("front-proxy-client"), ExtKeyUsage: clientAuth},
		{Name: "etcd-server", BaseName: "etcd/server", SignedBy: EtcdCA, Scope: PerEtcd,
			Subject: nodeCN, ExtKeyUsage: bothAuth, SANs: etcdSANs},
		{Name: "etcd-peer", BaseName: "etcd/peer", SignedBy: EtcdCA, Scope: PerEtcd,
			Subject: nodeCN, ExtKeyUsage: bothAuth, SANs: etcdSANs},
		{Name: "etcd-healthcheck-client", BaseName: "etcd/healthcheck-client", SignedBy: EtcdCA,
			Subject: fixed("kube-etcd-healthcheck-client"), ExtKeyUsage: clientAuth},
		{Name: "apiserver-etcd-client", BaseName: "apiserver-etcd-client", SignedBy: EtcdCA,
			Subject: fixed("kube-apiserver-etcd-client"), ExtKeyUsage: clientAuth},
		// kforge's own: the masters' registry serves the bundle to the other nodes with it.
		{Name: RegistryCert, BaseName: RegistryCert, SignedBy: CA, Scope: PerMaster,
			Subject: fixed(RegistryCert), ExtKeyUsage: serverAuth, SANs: nodeSANs},

		{Name: "admin.conf", Kubeconfig: "admin.conf", SignedBy: CA,
			Subject: fixed("kubernetes-admin", ClusterAdminsGroup), ExtKeyUsage: clientAuth},
		{Name: "super-admin.conf", Kubeconfig: "super-admin.conf", SignedBy: CA,
			Subject: fixed("kubernetes-super-admin", MastersGroup), ExtKeyUsage: clientAuth},
		{Name: "controller-manager.conf", Kubeconfig: "controller-manager.conf", SignedBy: CA,
			Subject: fixed("system:kube-controller-manager"), ExtKeyUsage: clientAuth},
		{Name: "scheduler.conf", Kubeconfig: "scheduler.conf", SignedBy: CA,
			Subject: fixed("system:kube-scheduler"), ExtKeyUsage: clientAuth},
		{Name: "kubelet.conf", Kubeconfig: "kubelet.conf", SignedBy: CA, Scope: PerMaster,
			Subject:     func(m Master) (string, []string) { return NodeUserPrefix + m.Name, []string{NodesGroup} },
			ExtKeyUsage: clientAuth},
		// kforge's own: every kubelet serves with a certificate of the cluster CA, for its
		// node's name and addresses, so the API server verifies the kubelets it reaches
		// (--kubelet-certificate-authority). kubeadm leaves kubelets their self-signed ones.
		{Name: KubeletServerCert, BaseName: KubeletServerCert, SignedBy: CA, Scope: PerNode,
			Subject:     func(m Master) (string, []string) { return NodeUserPrefix + m.Name, []string{NodesGroup} },
			ExtKeyUsage: serverAuth, SANs: nodeSANs},
	}
}

// KubeletServerCert is the row of the kubelets' serving certificates, which live on each node
// under /var/lib/kubelet/pki (hostpath.KubeletServerCert), not under /etc/kubernetes/pki.
const KubeletServerCert = "kubelet-server"

// nodeSANs are a node's name, its IPs and the address kforge reaches it at: how the API server
// reaches its kubelet, and the other nodes a master's registry.
func nodeSANs(_ Params, m Master) ([]string, []net.IP, error) {
	ip := net.ParseIP(m.IP)
	if ip == nil {
		return nil, nil, fmt.Errorf("node %s: address %q is not an IP", m.Name, m.IP)
	}
	dns, ips := []string{m.Name}, append([]net.IP{ip}, m.ipv6()...)
	if m.Address != "" && m.Address != m.IP {
		if a := net.ParseIP(m.Address); a != nil {
			ips = append(ips, a)
		} else {
			dns = append(dns, m.Address)
		}
	}
	return dns, ips, nil
}

// ipv6 is m's IPv6 address as a SAN, when it has one: nodes of a dual-stack cluster are reached
// in both families.
func (m Master) ipv6() []net.IP {
	if ip := net.ParseIP(m.IPv6); ip != nil {
		return []net.IP{ip}
	}
	return nil
}

// Lookup returns the row named name.
func Lookup(name string) (Spec, bool) {
	for _, s := range Table() {
		if s.Name == name {
			return s, true
		}
	}
	return Spec{}, false
}

func nodeCN(m Master) (string, []string) { return m.Name, nil }

// kubeadm's NewSelfSignedCACert puts the CA's common name in its DNS SANs.
func caSANs(cn string) func(Params, Master) ([]string, []net.IP, error) {
	return func(Params, Master) ([]string, []net.IP, error) { return []string{cn}, nil, nil }
}

// apiserverSANs follows pkiutil.GetAPIServerAltNames.
func apiserverSANs(p Params, m Master) ([]string, []net.IP, error) {
	adv := net.ParseIP(m.IP)
	if adv == nil {
		return nil, nil, fmt.Errorf("master %s: address %q is not an IP", m.Name, m.IP)
	}
	svc, err := FirstServiceIP(p.ServiceSubnet)
	if err != nil {
		return nil, nil, err
	}
	dns := []string{m.Name, "kubernetes", "kubernetes.default", "kubernetes.default.svc"}
	if p.DNSDomain != "" {
		dns = append(dns, "kubernetes.default.svc."+p.DNSDomain)
	}
	ips := append([]net.IP{svc, adv}, m.ipv6()...)
	if m.Address != "" && m.Address != m.IP {
		if ip := net.ParseIP(m.Address); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, m.Address)
		}
	}
	if p.ControlPlaneEndpoint != "" {
		host, _, err := net.SplitHostPort(p.ControlPlaneEndpoint)
		if err != nil {
			return nil, nil, fmt.Errorf("controlPlaneEndpoint %q: %v", p.ControlPlaneEndpoint, err)
		}
		if ip := net.ParseIP(host); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, host)
		}
	}
	for _, s := range p.APIServerCertSANs {
		if ip := net.ParseIP(s); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, s)
		}
	}
	return dns, ips, nil
}

// etcdSANs follows pkiutil.getAltNames for etcd server and peer certificates.
func etcdSANs(_ Params, m Master) ([]string, []net.IP, error) {
	adv := net.ParseIP(m.IP)
	if adv == nil {
		return nil, nil, fmt.Errorf("master %s: address %q is not an IP", m.Name, m.IP)
	}
	return []string{m.Name, "localhost"}, []net.IP{adv, net.IPv4(127, 0, 0, 1).To4(), net.IPv6loopback}, nil
}

// RegistryCert is the serving certificate of the masters' registry (hostpath.RegistryCert), from
// which the other nodes take the bundle: not kubeadm's, signed by the cluster CA, which every
// node trusts.
const RegistryCert = "kforge-registry"

// FirstServiceIP is the kubernetes Service's address: the first host address of the subnet.
func FirstServiceIP(subnet string) (net.IP, error) {
	pfx, err := netip.ParsePrefix(subnet)
	if err != nil {
		return nil, fmt.Errorf("service subnet %q: %v", subnet, err)
	}
	a := pfx.Masked().Addr().Next()
	if !pfx.Contains(a) {
		return nil, fmt.Errorf("service subnet %q has no host addresses", subnet)
	}
	return net.IP(a.AsSlice()), nil
}

// Request is a row resolved for one master: everything a certificate says except keys,
// serial and validity.
type Request struct {
	Spec     Spec
	Node     string // empty for Cluster rows
	Subject  pkix.Name
	DNSNames []string // sorted, unique
	IPs      []net.IP // unique, in kubeadm's order
}

// Key identifies an issued certificate: the row name plus the node for PerMaster rows.
func (r Request) Key() string { return Key(r.Spec.Name, r.Node) }

// Key is "<name>" or "<name>@<node>".
func Key(name, node string) string {
	if node == "" {
		return name
	}
	return name + "@" + node
}

// Resolve computes the request for row s and master m (ignored for Cluster rows).
func (s Spec) Resolve(p Params, m Master) (Request, error) {
	if s.Scope == Cluster {
		m = Master{}
	}
	cn, org := s.Subject(m)
	r := Request{Spec: s, Node: m.Name, Subject: pkix.Name{CommonName: cn, Organization: org}}
	if s.SANs != nil {
		dns, ips, err := s.SANs(p, m)
		if err != nil {
			return Request{}, fmt.Errorf("certificate %s: %w", s.Name, err)
		}
		r.DNSNames, r.IPs = uniqueSANs(dns, ips)
	}
	return r, nil
}

// uniqueSANs removes duplicates the way pkiutil.RemoveDuplicateAltNames does: DNS names sorted,
// IPs in first-seen order.
func uniqueSANs(dns []string, ips []net.IP) ([]string, []net.IP) {
	d := slices.Clone(dns)
	slices.Sort(d)
	d = slices.Compact(d)
	seen := map[string]bool{}
	var out []net.IP
	for _, ip := range ips {
		if v4 := ip.To4(); v4 != nil {
			ip = v4
		}
		if !seen[ip.String()] {
			seen[ip.String()] = true
			out = append(out, ip)
		}
	}
	return d, out
}

// Requests resolves every row for the cluster: Cluster rows once, PerMaster rows per master,
// PerNode rows per master and worker, in table order; RegistryCert only when the masters serve
// the bundle.
func Requests(p Params, h Hosts) ([]Request, error) {
	var out []Request
	for _, s := range Table() {
		if s.Name == RegistryCert && !p.MastersServeBundle {
			continue
		}
		if s.Scope == Cluster {
			r, err := s.Resolve(p, Master{})
			if err != nil {
				return nil, err
			}
			out = append(out, r)
			continue
		}
		var nodes []Master
		switch s.Scope {
		case PerMaster:
			nodes = h.Masters
		case PerNode:
			nodes = append(slices.Clone(h.Masters), h.Workers...)
		case PerEtcd:
			nodes = h.EtcdMembers()
		}
		for _, m := range nodes {
			r, err := s.Resolve(p, m)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// APIServerURL turns host:port into https://host:port.
func APIServerURL(hostport string) string { return "https://" + hostport }

// LocalEndpoint is a master's own API address, ip:6443.
func LocalEndpoint(m Master) string { return net.JoinHostPort(m.IP, strconv.Itoa(APIServerPort)) }
