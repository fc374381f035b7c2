package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/templates"
)

// renderMarker marks a directory kforge render wrote, so a later render may replace it.
const renderMarker = ".kforge-render"

// RenderCmd writes every host's files to a directory for inspection and diffing.
type RenderCmd struct {
	Dir            string `name:"dir" short:"o" required:"" placeholder:"DIR" help:"Directory to write DIR/<host>/<path> trees and DIR/admin.conf into; replaced if kforge rendered it before."`
	BootstrapToken string `env:"KFORGE_BOOTSTRAP_TOKEN" placeholder:"TOKEN" help:"Bootstrap token for workers' bootstrap-kubelet.conf (${env}; default: a fresh random one, as apply would create)."`
	ResolvConf     string `placeholder:"FILE" help:"resolv.conf path kubelet gives pods (default: kubelet's own, /etc/resolv.conf)."`
	CNIBinDir      string `default:"/opt/cni/bin" placeholder:"DIR" help:"Directory of CNI plugins on the hosts, for containerd's config."`
	// kubeadm mounts whichever of its candidate CA directories exist on the host; apply
	// detects them per host, render assumes a Debian/Ubuntu host unless told otherwise.
	CACertDirs []string `name:"ca-cert-dirs" sep:"," default:"/etc/ca-certificates,/usr/local/share/ca-certificates,/usr/share/ca-certificates" placeholder:"DIRS" help:"Host CA directories mounted into the API server and controller manager (those of kubeadm's list that exist on the hosts; default: a Debian/Ubuntu host's)."`
}

// clusterStateDir is --state-dir or ~/.local/state/kforge/<cluster>.
func clusterStateDir(g *Globals, c *inventory.Cluster) (string, error) {
	if g.StateDir != "" {
		return g.StateDir, nil
	}
	if x := os.Getenv("XDG_STATE_HOME"); x != "" {
		return filepath.Join(x, "kforge", c.Name), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no state dir: set --state-dir or KFORGE_STATE_DIR (%v)", err)
	}
	return filepath.Join(home, ".local", "state", "kforge", c.Name), nil
}

func (r *RenderCmd) Run(s *streams, g *Globals) error {
	c, state, err := loadCluster(g)
	if err != nil {
		return err
	}
	set, changes, err := pki.EnsureCluster(c, filepath.Dir(g.Inventory), state, time.Now(), rand.Reader)
	if err != nil {
		return fmt.Errorf("PKI in %s: %w", filepath.Join(state, pki.StateSubdir), err)
	}
	for _, ch := range changes {
		fmt.Fprintf(s.Err, "pki: %s\n", ch)
	}
	token := r.BootstrapToken
	if token == "" && len(c.Workers) > 0 {
		if token, err = newBootstrapToken(); err != nil {
			return err
		}
	}
	caDirs := []string{}
	for _, d := range r.CACertDirs {
		if d != "" {
			caDirs = append(caDirs, d)
		}
	}
	hosts, err := templates.Tree(c, set, templates.Options{BootstrapToken: token, ResolvConf: r.ResolvConf, CNIBinDir: r.CNIBinDir, CACertDirs: caDirs})
	if err != nil {
		return err
	}
	admin, err := templates.AdminKubeconfig(c, set)
	if err != nil {
		return err
	}
	if err := r.prepare(); err != nil {
		return err
	}
	for _, h := range hosts {
		for _, f := range h.Files {
			if err := writeRendered(filepath.Join(r.Dir, h.Node.Name, filepath.FromSlash(f.Path)), f.Data, f.Mode); err != nil {
				return err
			}
		}
	}
	if err := writeRendered(filepath.Join(r.Dir, "admin.conf"), admin, 0o600); err != nil {
		return err
	}
	fmt.Fprintf(s.Err, "rendered %d hosts into %s (PKI kept in %s; CA %s)\n", len(hosts), r.Dir, filepath.Join(state, pki.StateSubdir), pki.SPKIPin(set.CAs[pki.CA].Cert))
	return nil
}

// prepare makes r.Dir an empty directory: it creates it, or empties one kforge rendered
// before; it refuses to touch any other non-empty directory.
func (r *RenderCmd) prepare() error {
	entries, err := os.ReadDir(r.Dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case len(entries) == 0:
	default:
		if _, err := os.Stat(filepath.Join(r.Dir, renderMarker)); err != nil {
			return fmt.Errorf("%s is not empty and was not written by kforge render; choose an empty or new directory", r.Dir)
		}
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(r.Dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := os.MkdirAll(r.Dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r.Dir, renderMarker), []byte("written by kforge render; the directory is replaced on the next render\n"), 0o644)
}

func writeRendered(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return pki.WriteFile(path, data, mode)
}

// newBootstrapToken makes a token in kubeadm's form [a-z0-9]{6}.[a-z0-9]{16}.
func newBootstrapToken() (string, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	var sb strings.Builder
	b := make([]byte, 1)
	for n := 0; n < 22; {
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		if b[0] >= 252 { // 252 = 7*36: reject the rest so every character is equally likely
			continue
		}
		if n == 6 {
			sb.WriteByte('.')
		}
		sb.WriteByte(alphabet[int(b[0])%len(alphabet)])
		n++
	}
	return sb.String(), nil
}
