package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/tasks"
)

// renderMarker marks a directory kforge render wrote, so a later render may replace it.
const renderMarker = ".kforge-render"

// RenderCmd writes every host's files to a directory for inspection and diffing.
type RenderCmd struct {
	Dir            string `name:"dir" short:"o" required:"" placeholder:"DIR" help:"Directory to write DIR/<host>/<path> trees and DIR/admin.conf into; replaced if kforge rendered it before."`
	BootstrapToken string `env:"KFORGE_BOOTSTRAP_TOKEN" placeholder:"TOKEN" help:"Bootstrap token for workers' bootstrap-kubelet.conf (${env}; default: a fresh random one, as apply would create)."`
	CNIBinDir      string `default:"/opt/cni/bin" placeholder:"DIR" help:"Directory of CNI plugins on the hosts, for containerd's config."`
	// kubeadm mounts whichever of its candidate CA directories exist on the host; apply
	// detects them per host, render assumes a Debian/Ubuntu host unless told otherwise.
	CACertDirs []string `name:"ca-cert-dirs" sep:"," default:"/etc/ca-certificates,/usr/local/share/ca-certificates,/usr/share/ca-certificates" placeholder:"DIRS" help:"Host CA directories mounted into the API server and controller manager (those of kubeadm's list that exist on the hosts; default: a Debian/Ubuntu host's)."`
	ResolvConf string   `hidden:"" help:"Moved to the inventory: kubelet.resolvConf."`
}

func (r *RenderCmd) Run(ctx context.Context, s *streams, g *Globals, log *slog.Logger, dl *debugLog) (err error) {
	if err := (movedToInventory{ResolvConf: r.ResolvConf}).check(); err != nil {
		return err
	}
	run, err := startClusterRun(ctx, "render", s, g, log, dl)
	if err != nil {
		return err
	}
	defer run.close(ctx, &err)
	caDirs := []string{}
	for _, dir := range r.CACertDirs {
		if dir != "" {
			caDirs = append(caDirs, dir)
		}
	}
	out, err := tasks.Render(run.inv, run.options(g, log),
		tasks.RenderInput{BootstrapToken: r.BootstrapToken, CNIBinDir: r.CNIBinDir, CACertDirs: caDirs})
	if err != nil {
		return err
	}
	for _, ch := range out.Changes {
		fmt.Fprintf(s.Err, "pki: %s\n", ch)
	}
	if err := tasks.WriteRendered(r.Dir, out); err != nil {
		return err
	}
	fmt.Fprintf(s.Err, "rendered %d hosts into %s (PKI kept in %s; CA %s)\n", len(out.Hosts), r.Dir, run.state.PKI(), pki.SPKIPin(out.Set.CAs[pki.CA].Cert))
	return nil
}
