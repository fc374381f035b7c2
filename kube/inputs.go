package kube

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	"k8s.io/utils/ptr"

	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/release"
	"github.com/kforge/kforge/templates"
)

// Clients are the clients the functions of this package take, built from one rest.Config (for
// example admin.conf's, with a Dial through an SSH tunnel).
type Clients struct {
	Typed   kubernetes.Interface
	Dynamic dynamic.Interface
	Mapper  meta.ResettableRESTMapper
}

// NewClients builds the typed and dynamic clients and a discovery-based RESTMapper.
func NewClients(cfg *rest.Config) (Clients, error) {
	t, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Clients{}, err
	}
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return Clients{}, err
	}
	return Clients{Typed: t, Dynamic: d, Mapper: NewRESTMapper(t.Discovery())}, nil
}

const tokenChars = "0123456789abcdefghijklmnopqrstuvwxyz"

// NewBootstrapToken generates a bootstrap token (6-character ID, 16-character secret from
// [a-z0-9]) from random, with kubeadm's default usages and group.
func NewBootstrapToken(random io.Reader, ttl time.Duration) (BootstrapToken, error) {
	gen := func(n int) (string, error) {
		var b strings.Builder
		for range n {
			i, err := randIndex(random, len(tokenChars))
			if err != nil {
				return "", fmt.Errorf("generate bootstrap token: %w", err)
			}
			b.WriteByte(tokenChars[i])
		}
		return b.String(), nil
	}
	id, err := gen(6)
	if err != nil {
		return BootstrapToken{}, err
	}
	secret, err := gen(16)
	if err != nil {
		return BootstrapToken{}, err
	}
	return BootstrapToken{ID: id, Secret: secret, TTL: ttl}, nil
}

// randIndex is a uniform index below n read from random (rejection sampling on one byte).
func randIndex(random io.Reader, n int) (int, error) {
	limit := 256 - 256%n
	var b [1]byte
	for {
		if _, err := io.ReadFull(random, b[:]); err != nil {
			return 0, err
		}
		if int(b[0]) < limit {
			return int(b[0]) % n, nil
		}
	}
}

// ParseBootstrapToken parses "id.secret". The error never contains the secret.
func ParseBootstrapToken(s string, ttl time.Duration) (BootstrapToken, error) {
	s = strings.TrimSpace(s)
	if !bootstraputil.IsValidBootstrapToken(s) {
		id, _, _ := strings.Cut(s, ".")
		if len(id) > 6 {
			id = id[:6]
		}
		return BootstrapToken{}, fmt.Errorf("bootstrap token %q: want the form [a-z0-9]{6}.[a-z0-9]{16}", id+".<secret>")
	}
	id, secret, _ := strings.Cut(s, ".")
	return BootstrapToken{ID: id, Secret: secret, TTL: ttl}, nil
}

// Value is the token as kubeconfigs and `kubeadm join` carry it ("id.secret"): a credential.
func (t BootstrapToken) Value() string { return t.ID + "." + t.Secret }

// BootstrapInputFor is Bootstrap's input for the inventory's cluster: cluster-info publishes
// the cluster CA and the control-plane endpoint (as admin.conf names it).
func BootstrapInputFor(c *inventory.Cluster, set *pki.Set, token BootstrapToken, now time.Time) BootstrapInput {
	in := BootstrapInput{
		Token:  token,
		Now:    now,
		Server: pki.APIServerURL(pki.Endpoint(c)),
		CACert: set.TrustPEM(pki.CA),
	}
	if c.ControlPlaneVIP != "" {
		in.VIPLease = templates.VIPLease
	}
	return in
}

// CoreDNSInputFor is CoreDNS's input for the inventory's cluster.
func CoreDNSInputFor(c *inventory.Cluster, im release.Images) CoreDNSInput {
	return CoreDNSInput{
		Image:         im.CoreDNS,
		DNSDomain:     orDefault(c.Networking.DNSDomain, inventory.DefaultDNSDomain),
		ServiceSubnet: c.Networking.ServiceSubnets()[0],
	}
}

// KubeProxyInputFor is KubeProxy's input for the inventory's cluster, in mode (iptables or
// nftables: inventory.Cluster.ProxyMode); conntrackMaxPerCore is nil for kube-proxy's default or
// a value (0 on hosts whose conntrack table is machine-wide, such as kforge's lab).
func KubeProxyInputFor(c *inventory.Cluster, im release.Images, mode string) KubeProxyInput {
	var conntrackMaxPerCore *int32
	if v := c.KubeProxy.ConntrackMaxPerCore; v != nil {
		conntrackMaxPerCore = ptr.To(int32(*v))
	}
	return KubeProxyInput{
		Image:               im.KubeProxy,
		Server:              pki.APIServerURL(pki.NodeEndpoint(c)),
		PodSubnet:           strings.Join(c.Networking.PodSubnets(), ","),
		Mode:                mode,
		ConntrackMaxPerCore: conntrackMaxPerCore,
	}
}

// FlannelInputFor is Flannel's input for the inventory's cluster, its rules in nftables when
// kube-proxy's mode is.
func FlannelInputFor(c *inventory.Cluster, im release.Images, proxyMode string) FlannelInput {
	return FlannelInput{
		Image:      im.Flannel,
		PodSubnets: c.Networking.PodSubnets(),
		Endpoint:   pki.NodeEndpoint(c),
		NFTables:   proxyMode == inventory.ProxyModeNftables,
	}
}

// NetworkPolicyInputFor is what the inventory asks of the NetworkPolicy agent.
func NetworkPolicyInputFor(c *inventory.Cluster, im release.Images) NetworkPolicyInput {
	return NetworkPolicyInput{
		Enforce:  c.Networking.NetworkPolicy != inventory.NetworkPolicyOff,
		Image:    im.NetworkPolicy,
		Endpoint: pki.NodeEndpoint(c),
		Admin:    c.Networking.AdminNetworkPolicy,
	}
}

// ManifestsFor reads the inventory's addon manifests (paths relative to invDir), in order.
func ManifestsFor(c *inventory.Cluster, invDir string) ([]Manifest, error) {
	var out []Manifest
	for i, a := range c.Addons {
		p := a.Path
		if !filepath.IsAbs(p) {
			p = filepath.Join(invDir, p)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("addons[%d]: %w (paths are relative to the inventory file)", i, err)
		}
		out = append(out, Manifest{Path: p, Data: data})
	}
	return out, nil
}
