package templates

import (
	"encoding/base64"
	"path"

	"github.com/kforge/kforge/hostpath"
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
}

// hostsTOML is hosts.toml's template input.
type hostsTOML struct {
	Server        string
	Mirrors       []string
	CA            string // path on the host
	Authorization string
}

// registryServer is the registry's own URL: docker.io's API lives at registry-1.docker.io.
func registryServer(host string) string {
	if host == "docker.io" {
		return "https://registry-1.docker.io"
	}
	return "https://" + host
}

// RegistryFiles are a registry's files under containerd's config_path: hosts.toml (0600, it may
// hold credentials) and the CA it names.
func RegistryFiles(r Registry) ([]File, error) {
	dir := path.Join(hostpath.RegistryConfigDir, r.Host)
	in := hostsTOML{Server: registryServer(r.Host), Mirrors: r.Mirrors}
	var files []File
	if r.CA != nil {
		in.CA = path.Join(dir, "ca.crt")
		files = append(files, File{Path: in.CA, Mode: 0o644, Data: r.CA})
	}
	if r.Username != "" {
		in.Authorization = "Basic " + base64.StdEncoding.EncodeToString([]byte(r.Username+":"+r.Password))
	}
	data, err := render("hosts.toml.tmpl", in)
	if err != nil {
		return nil, err
	}
	return append(files, File{Path: path.Join(dir, "hosts.toml"), Mode: 0o600, Data: data}), nil
}
