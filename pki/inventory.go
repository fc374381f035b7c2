package pki

import (
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/kforge/kforge/inventory"
)

// APIServerPort is the port every master's API server listens on.
const APIServerPort = 6443

// FromInventory derives the certificate inputs from a loaded (defaulted, validated) inventory.
func FromInventory(c *inventory.Cluster) (Params, []Master, error) {
	alg, err := ParseKeyAlgorithm(c.PKI.KeyAlgorithm)
	if err != nil {
		return Params{}, nil, err
	}
	masters, err := asMasters(inventory.RoleMaster, c.Masters)
	if err != nil {
		return Params{}, nil, err
	}
	if len(masters) == 0 {
		return Params{}, nil, fmt.Errorf("the inventory lists no masters")
	}
	p := Params{
		ClusterName:          c.Name,
		DNSDomain:            orDefault(c.Networking.DNSDomain, inventory.DefaultDNSDomain),
		ServiceSubnet:        c.Networking.ServiceSubnets()[0], // the kubernetes Service is of the first family, as kubeadm makes it
		ControlPlaneEndpoint: NodeEndpoint(c),
		APIServerCertSANs:    apiServerSANs(c),
		KeyAlgorithm:         alg,
		CertValidity:         time.Duration(c.PKI.CertValidity),
		CAValidity:           time.Duration(c.PKI.CAValidity),
		MastersServeBundle:   c.BundleFromMasters(),
	}
	if p.CertValidity == 0 {
		p.CertValidity = time.Duration(inventory.DefaultCertValidity)
	}
	if p.CAValidity == 0 {
		p.CAValidity = time.Duration(inventory.DefaultCAValidity)
	}
	return p, masters, nil
}

// HostsOf are the inventory's hosts as the certificate rows take them.
func HostsOf(c *inventory.Cluster) (Hosts, error) {
	var h Hosts
	var err error
	if h.Masters, err = asMasters(inventory.RoleMaster, c.Masters); err != nil {
		return h, err
	}
	if h.Workers, err = asMasters(inventory.RoleWorker, c.Workers); err != nil {
		return h, err
	}
	h.Etcd, err = asMasters(inventory.RoleEtcd, c.Etcd)
	return h, err
}

// InventoryRequests are the params and every certificate request of an inventory.
func InventoryRequests(c *inventory.Cluster) (Params, []Request, error) {
	p, _, err := FromInventory(c)
	if err != nil {
		return p, nil, err
	}
	h, err := HostsOf(c)
	if err != nil {
		return p, nil, err
	}
	reqs, err := Requests(p, h)
	return p, reqs, err
}

// asMasters are hosts of one role as the certificate rows take them.
func asMasters(role inventory.Role, hosts []inventory.Host) ([]Master, error) {
	out := make([]Master, 0, len(hosts))
	for _, h := range hosts {
		ip := h.NodeIP()
		if net.ParseIP(ip) == nil {
			return nil, fmt.Errorf("%s %s: node IP %q is not an IP address; set internalAddress", role, h.Name, ip)
		}
		out = append(out, Master{Name: h.Name, IP: ip, IPv6: h.IPv6Address, Address: h.Address})
	}
	return out, nil
}

// NodeEndpoint is the API endpoint the nodes use, as host:port: their local API proxy on
// 127.0.0.1 when there are several masters and no controlPlaneEndpoint
// (inventory.Cluster.LocalAPIProxy), otherwise Endpoint. The API server certificates are
// valid for it.
func NodeEndpoint(c *inventory.Cluster) string {
	if c.LocalAPIProxy() {
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.APIProxy.Port))
	}
	return Endpoint(c)
}

// apiServerSANs are the inventory's extra API server SANs, and its virtual IP.
func apiServerSANs(c *inventory.Cluster) []string {
	if c.ControlPlaneVIP == "" {
		return c.PKI.APIServerCertSANs
	}
	return append(slices.Clone(c.PKI.APIServerCertSANs), c.ControlPlaneVIP)
}

// Endpoint is the cluster's API endpoint for clients outside the nodes (the workstation), as
// host:port: controlPlaneEndpoint, the virtual IP and port 6443, or the first master's node IP
// and port 6443.
func Endpoint(c *inventory.Cluster) string {
	if c.ControlPlaneEndpoint != "" {
		return c.ControlPlaneEndpoint
	}
	if c.ControlPlaneVIP != "" {
		return net.JoinHostPort(c.ControlPlaneVIP, strconv.Itoa(APIServerPort))
	}
	if len(c.Masters) == 0 {
		return ""
	}
	return net.JoinHostPort(c.Masters[0].NodeIP(), strconv.Itoa(APIServerPort))
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

// EnsureCluster runs Ensure for an inventory: params and masters from the inventory, the
// external CA (paths relative to invDir) when one is configured, material in dir (the state
// dir's pki/, state.Dir.PKI).
func EnsureCluster(c *inventory.Cluster, invDir, dir string, now time.Time, random io.Reader) (*Set, []Change, error) {
	return ensureCluster(c, invDir, Options{Dir: dir, Now: now, Rand: random})
}

// PlanCluster is EnsureCluster as a dry run: the same set and changes, nothing written.
func PlanCluster(c *inventory.Cluster, invDir, dir string, now time.Time, random io.Reader) (*Set, []Change, error) {
	return ensureCluster(c, invDir, Options{Dir: dir, Now: now, Rand: random, DryRun: true})
}

// RenewCluster is PlanCluster that also re-issues the leaves renew selects by Request.Key,
// whatever their state: nothing is written until Set.SaveIssued (kforge certs renew).
func RenewCluster(c *inventory.Cluster, invDir, dir string, now time.Time, random io.Reader, renew func(key string) bool) (*Set, []Change, error) {
	return ensureCluster(c, invDir, Options{Dir: dir, Now: now, Rand: random, Renew: renew, DryRun: true})
}

func ensureCluster(c *inventory.Cluster, invDir string, o Options) (*Set, []Change, error) {
	p, _, err := FromInventory(c)
	if err != nil {
		return nil, nil, err
	}
	h, err := HostsOf(c)
	if err != nil {
		return nil, nil, err
	}
	o.Params, o.Masters, o.Workers, o.Etcd = p, h.Masters, h.Workers, h.Etcd
	if e := c.PKI.ExternalCA; e != nil {
		rel := func(f string) string {
			if filepath.IsAbs(f) {
				return f
			}
			return filepath.Join(invDir, f)
		}
		kp, err := LoadPair(rel(e.Cert), rel(e.Key))
		if err != nil {
			return nil, nil, fmt.Errorf("pki.externalCA: %w", err)
		}
		o.ExternalCA = kp
	}
	return Ensure(o)
}
