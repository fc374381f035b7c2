package templates

import (
	"encoding/base64"
	"hash/fnv"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
)

// Registry is one registry's containerd configuration, as the inventory's
// containerRuntime.registries entry says, with its CA and credentials read (by apply; never
// from here).
type Registry struct {
	Host     string
	Mirrors  []string
	CA       []byte // PEM; nil: the system's roots
	Username string // basic auth; empty: none
	Password string // a secret: lands in hosts.toml (0600) only
	// MasterMirrors are the masters' registries (https://ip:port, MasterRegistries), tried
	// first: they hold the bundle's images under /v2/<Host>/ and are trusted through the
	// cluster CA.
	MasterMirrors []string
}

// hostsTOML is hosts.toml's template input: the registry's own settings when it has no
// mirrors of the inventory's, then the mirrors in the order containerd tries them.
type hostsTOML struct {
	Server        string
	CA            string // path on the host
	Authorization string
	Mirrors       []registryMirror
}

// registryServer is the registry's own URL: docker.io's API lives at registry-1.docker.io.
func registryServer(host string) string {
	if host == "docker.io" {
		return "https://registry-1.docker.io"
	}
	return "https://" + host
}

// RegistryFiles are a registry's files under containerd's config_path: hosts.toml (0600, it may
// hold credentials) and the CA it names. The masters' registries come first, then the
// inventory's mirrors, then the registry itself.
func RegistryFiles(r Registry) ([]File, error) {
	dir := path.Join(hostpath.RegistryConfigDir, r.Host)
	var files []File
	ca, auth := "", ""
	if r.CA != nil {
		ca = path.Join(dir, "ca.crt")
		files = append(files, File{Path: ca, Mode: 0o644, Data: r.CA})
	}
	if r.Username != "" {
		auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(r.Username+":"+r.Password))
	}
	in := hostsTOML{Server: registryServer(r.Host)}
	if len(r.Mirrors) == 0 {
		in.CA, in.Authorization = ca, auth
	}
	for _, u := range r.MasterMirrors {
		in.Mirrors = append(in.Mirrors, registryMirror{URL: strings.TrimSuffix(u, "/") + "/v2/" + r.Host, CA: hostpath.CACert, OverridePath: true})
	}
	for _, u := range r.Mirrors {
		in.Mirrors = append(in.Mirrors, registryMirror{URL: u, CA: ca, Authorization: auth})
	}
	data, err := render("hosts.toml.tmpl", in)
	if err != nil {
		return nil, err
	}
	return append(files, File{Path: path.Join(dir, "hosts.toml"), Mode: 0o600, Data: data}), nil
}

// registryMirror is one mirror of hosts.toml.
type registryMirror struct {
	URL           string
	CA            string // path on the host; empty: the system's roots
	Authorization string
	OverridePath  bool // URL is the API's root (containerd does not add /v2)
}

// MasterRegistryFiles are master m's registry files: its unit, its read-only configuration
// (TLS on the master's node IP) and the configuration of the writable instance, on loopback
// only, through which kforge fills it. None when the masters do not serve the bundle.
func MasterRegistryFiles(c *inventory.Cluster, m inventory.Host) ([]File, error) {
	if !c.BundleFromMasters() {
		return nil, nil
	}
	unit, err := render("kforge-registry.service.tmpl", struct{ Binary, Config string }{hostpath.RegistryPath, hostpath.RegistryConfig})
	if err != nil {
		return nil, err
	}
	type config struct {
		Purpose, Dir, Addr, Cert, Key string
		ReadOnly                      bool
	}
	serve, err := render("registry.yml.tmpl", config{
		Purpose: "this master's registry (" + hostpath.RegistryUnit + "), from which the cluster's nodes\n# take the bundle. Read-only: kforge fills it through " + hostpath.RegistryFillConfig + ".",
		Dir:     hostpath.RegistryDir, Addr: net.JoinHostPort(m.NodeIP(), strconv.Itoa(hostpath.RegistryPort)),
		Cert: hostpath.RegistryCertPath, Key: hostpath.RegistryKeyPath, ReadOnly: true,
	})
	if err != nil {
		return nil, err
	}
	fill, err := render("registry.yml.tmpl", config{
		Purpose: "the writable instance of this master's registry, on loopback only, which kforge\n# runs while it fills the registry from this master's containerd and binaries.",
		Dir:     hostpath.RegistryDir, Addr: hostpath.RegistryFillAddr,
	})
	if err != nil {
		return nil, err
	}
	return []File{
		{Path: hostpath.RegistryUnitPath, Mode: 0o644, Data: unit},
		{Path: hostpath.RegistryConfig, Mode: 0o644, Data: serve},
		{Path: hostpath.RegistryFillConfig, Mode: 0o644, Data: fill},
	}, nil
}

// MasterRegistries are the URLs of the masters' registries in the order node n tries them:
// every master, starting at one chosen by the node's name, so that a fleet's pulls spread over
// the masters and a node's order does not change when other nodes come or go. None when the
// masters do not serve the bundle.
func MasterRegistries(c *inventory.Cluster, n inventory.Node) []string {
	// An etcd host's images come from the workstation: it starts before the masters' API
	// servers, which need it.
	if !c.BundleFromMasters() || len(c.Masters) == 0 || n.Role == inventory.RoleEtcd {
		return nil
	}
	h := fnv.New32a()
	h.Write([]byte(n.Name))
	start := int(h.Sum32() % uint32(len(c.Masters)))
	out := make([]string, len(c.Masters))
	for i := range c.Masters {
		m := c.Masters[(start+i)%len(c.Masters)]
		out[i] = "https://" + net.JoinHostPort(m.NodeIP(), strconv.Itoa(hostpath.RegistryPort))
	}
	return out
}

// withMasterRegistries adds the masters' registries (urls) to the registries the bundle's
// images are named after (origins: registry.k8s.io, ghcr.io), before the inventory's own
// mirrors of those: the masters hold the bundle's images under /v2/<origin>/.
func withMasterRegistries(regs []Registry, origins, urls []string) []Registry {
	if len(urls) == 0 {
		return regs
	}
	out := slices.Clone(regs)
	for _, o := range origins {
		i := slices.IndexFunc(out, func(r Registry) bool { return r.Host == o })
		if i < 0 {
			out = append(out, Registry{Host: o})
			i = len(out) - 1
		}
		out[i].MasterMirrors = urls
	}
	return out
}

// ImageOrigin is the registry host an image is named after: registry.k8s.io of
// registry.k8s.io/pause:3.10, docker.io of a short name.
func ImageOrigin(image string) string {
	first, _, ok := strings.Cut(image, "/")
	if !ok || !strings.ContainsAny(first, ".:") && first != "localhost" {
		return "docker.io"
	}
	return first
}
