package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/release"
)

// BundleCmd groups the offline bundle commands.
type BundleCmd struct {
	Build  BundleBuildCmd  `cmd:"" help:"Build an offline bundle (Kubernetes binaries, CNI plugins, images) from Go modules with the local Go toolchain."`
	Verify BundleVerifyCmd `cmd:"" help:"Check a bundle: every sha256, and that each image archive loads."`
}

// BundleBuildCmd is `kforge bundle build`.
type BundleBuildCmd struct {
	Kubernetes []string `placeholder:"VERSION,..." help:"Kubernetes versions to bundle, vMAJOR.MINOR.PATCH, comma-separated: a bundle may hold several, e.g. the versions of an upgrade (default: the one kforge version names)."`
	Out        string   `short:"o" required:"" type:"path" placeholder:"DIR" help:"Bundle directory to write (new, empty, or an older bundle to replace)."`
	CacheDir   string   `env:"KFORGE_CACHE_DIR" type:"path" placeholder:"DIR" help:"Where built artifacts are cached (${env}; default /var/cache/kforge)."`
}

func (c *BundleBuildCmd) Help() string {
	return "Everything is built from Go modules (k8s.io/kubernetes, etcd, CoreDNS, containernetworking plugins, flannel) and cached per version: the first build takes minutes, later ones seconds. The kube-proxy and flannel images carry this machine's iptables and nft (Debian packages iptables, nftables). No registry or container engine is used."
}

func (c *BundleBuildCmd) Run(ctx context.Context, s *streams, g *Globals, log *slog.Logger) error {
	versions := c.Kubernetes
	if len(versions) == 0 {
		versions = []string{release.Default()}
	}
	// Every version is checked before anything is built.
	for _, v := range versions {
		if _, err := release.For(v); err != nil {
			return err
		}
	}
	var goOut io.Writer
	if g.Verbose > 0 {
		goOut = s.Err
	}
	p := progress.NewPrinter(s.Out, s.Err, g.Output == "json", log)
	start := time.Now()
	m, err := bundle.Build(ctx, bundle.Options{
		BuildOptions: bundle.BuildOptions{CacheDir: c.CacheDir, Report: p.Report, GoOutput: goOut},
		Versions:     versions,
		Out:          c.Out,
	})
	if err != nil {
		return err
	}
	return reportBundle(s, g, "built", c.Out, m, time.Since(start))
}

// BundleVerifyCmd is `kforge bundle verify`.
type BundleVerifyCmd struct {
	Dir string `arg:"" type:"path" placeholder:"DIR" help:"Bundle directory."`
}

func (c *BundleVerifyCmd) Run(ctx context.Context, s *streams, g *Globals) error {
	start := time.Now()
	m, err := bundle.Verify(ctx, c.Dir)
	if err != nil {
		return err
	}
	return reportBundle(s, g, "verified", c.Dir, m, time.Since(start))
}

func reportBundle(s *streams, g *Globals, what, dir string, m *bundle.Manifest, took time.Duration) error {
	var size int64
	for _, f := range m.Files {
		size += f.Size
	}
	for _, im := range m.Images {
		size += im.Size
	}
	if g.Output == "json" {
		return json.NewEncoder(s.Out).Encode(map[string]any{
			"event": what, "dir": dir, "bytes": size, "seconds": took.Seconds(), "manifest": m,
		})
	}
	_, err := fmt.Fprintf(s.Out, "bundle %s %s: Kubernetes %s, %d files, %d images, %d MB, in %s\n",
		dir, what, strings.Join(m.Kubernetes(), ", "), len(m.Files), len(m.Images), size>>20, took.Round(time.Millisecond))
	return err
}
