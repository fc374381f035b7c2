package tasks

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"

	"github.com/kforge/kforge/facts"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/internal/fsx"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/templates"
)

// render makes every host's files at this hop from the run's PKI set and each host's facts:
// etcd members start as ep says, and the control plane's flags count retiring masters that
// still run (removed from the inventory, not yet pruned).
func (h *hop) render(ep etcdPlan, retiring int) (err error) {
	rc := h.rc
	o := templates.Options{
		BootstrapToken: rc.token.Value(), EtcdBoot: ep.boot, RetiringMasters: retiring,
		RestrictOOMScoreAdj: map[string]bool{}, CgroupV2: map[string]bool{}, HostCACertDirs: map[string][]string{}, HostResolvConf: map[string]string{},
		EtcdUser: map[string]templates.Owner{}, Hostname: map[string]string{},
	}
	for name, f := range rc.fleet.AllFacts() {
		o.RestrictOOMScoreAdj[name] = !f.HasCapSysResource()
		o.CgroupV2[name] = f.Cgroup.Version == facts.CgroupV2
		o.HostCACertDirs[name] = f.Dirs
		o.HostResolvConf[name] = f.KubeletResolvConf()
		o.Hostname[name] = f.Hostname
		if u := f.EtcdUser; u != nil {
			o.EtcdUser[name] = templates.Owner{UID: u.UID, GID: u.GID}
		}
	}
	if o.Registries, err = registries(h.inv, h.rc.o.Getenv); err != nil {
		return err
	}
	trees, err := templates.Tree(h.inv, rc.set, o)
	if err != nil {
		return err
	}
	for _, t := range trees {
		if t.Node.Role == inventory.RoleWorker && rc.joined(t.Node.Name) {
			// A joined worker's kubelet has its own credentials: the bootstrap token's
			// kubeconfig is not put back (forget-token removed it).
			t.Files = slices.DeleteFunc(t.Files, func(f templates.File) bool { return f.Path == hostpath.BootstrapKubeletConfig })
		}
		h.files.set(t.Node.Name, withHostFiles(h.inv, t))
	}
	return nil
}

// withHostFiles are the files apply pushes to one host: what templates render, kforge's sysctl
// file, and on masters and etcd hosts the marker that says which static pods kforge wrote.
func withHostFiles(c *inventory.Cluster, t templates.HostFiles) []templates.File {
	files := append(t.Files, templates.File{Path: hostpath.SysctlFile, Mode: 0o644, Data: templates.SysctlConf(c.Networking.DualStack())})
	if t.Node.Role != inventory.RoleWorker {
		var pods []string
		for _, f := range t.Files {
			if path.Dir(f.Path) == hostpath.ManifestsDir {
				pods = append(pods, path.Base(f.Path))
			}
		}
		files = append(files, templates.File{Path: hostpath.ManifestsMarkerPath, Mode: 0o600, Data: facts.ManifestsMarker(c.Name, pods)})
	}
	return files
}

func removedMasters(removed []inventory.Node) []string {
	var out []string
	for _, n := range removed {
		if n.Role == inventory.RoleMaster {
			out = append(out, n.Name)
		}
	}
	return out
}

// RenderInput are `kforge render`'s inputs besides the inventory: what apply learns from the
// hosts, given instead.
type RenderInput struct {
	// BootstrapToken for workers' bootstrap-kubelet.conf; empty: a fresh one, as apply makes.
	BootstrapToken string
	CNIBinDir      string
	CACertDirs     []string
}

// Rendered is every file apply would push, by host, and the admin kubeconfig.
type Rendered struct {
	Hosts   []templates.HostFiles
	Admin   []byte
	Set     *pki.Set
	Changes []pki.Change // what the PKI step issued into the state dir
}

// Render makes every host's files as apply would, without touching a host: the PKI is
// generated or reused in the state dir like apply's.
func Render(c *inventory.Cluster, o Options, in RenderInput) (*Rendered, error) {
	o = o.withDefaults()
	set, changes, err := ensureClusterPKI(c, o)
	if err != nil {
		return nil, err
	}
	token := in.BootstrapToken
	if token == "" && len(c.Workers) > 0 {
		t, err := kube.NewBootstrapToken(o.Rand, bootstrapTokenTTL)
		if err != nil {
			return nil, err
		}
		token = t.Value()
	}
	regs, err := registries(c, o.Getenv)
	if err != nil {
		return nil, err
	}
	hosts, err := templates.Tree(c, set, templates.Options{BootstrapToken: token, CNIBinDir: in.CNIBinDir, CACertDirs: in.CACertDirs, Registries: regs})
	if err != nil {
		return nil, err
	}
	admin, err := templates.AdminKubeconfig(c, set)
	if err != nil {
		return nil, err
	}
	return &Rendered{Hosts: hosts, Admin: admin, Set: set, Changes: changes}, nil
}

// renderMarker marks a directory kforge render wrote, so a later render may replace it.
const renderMarker = ".kforge-render"

// WriteRendered writes r into dir as dir/<host>/<path> trees and dir/admin.conf. dir must be
// new, empty, or written by an earlier render (which it replaces); any other directory is
// refused.
func WriteRendered(dir string, r *Rendered) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case len(entries) == 0:
	default:
		if _, err := os.Stat(filepath.Join(dir, renderMarker)); err != nil {
			return fmt.Errorf("%s is not empty and was not written by kforge render; choose an empty or new directory", dir)
		}
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, renderMarker), []byte("written by kforge render; the directory is replaced on the next render\n"), 0o644); err != nil {
		return err
	}
	for _, h := range r.Hosts {
		for _, f := range h.Files {
			if err := fsx.WriteFile(filepath.Join(dir, h.Node.Name, filepath.FromSlash(f.Path)), f.Data, f.Mode); err != nil {
				return err
			}
		}
	}
	return fsx.WriteFile(filepath.Join(dir, "admin.conf"), r.Admin, 0o600)
}

// registries are the inventory's containerRuntime.registries with their CA files read and their
// credentials taken from the environment (the inventory names the variables; validation made
// sure they are set).
func registries(c *inventory.Cluster, getenv func(string) string) ([]templates.Registry, error) {
	var out []templates.Registry
	for _, r := range c.ContainerRuntime.Registries {
		tr := templates.Registry{Host: r.Host, Mirrors: r.Mirrors}
		if r.CAFile != "" {
			ca, err := os.ReadFile(c.Path(r.CAFile))
			if err != nil {
				return nil, fmt.Errorf("registry %s: CA file: %w", r.Host, err)
			}
			tr.CA = ca
		}
		if r.UsernameEnv != "" {
			tr.Username, tr.Password = getenv(r.UsernameEnv), getenv(r.PasswordEnv)
		}
		out = append(out, tr)
	}
	return out, nil
}

// joined says whether a worker's kubelet has joined: connect found its kubelet.conf, which the
// kubelet writes once its client certificate is signed.
func (rc *runContext) joined(worker string) bool {
	f := rc.fleet.Facts(worker)
	return f != nil && f.Files[hostpath.KubeletKubeconfig] != ""
}
