package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/controller"
)

// ControllerCmd is kforge controller: KforgeCluster objects reconciled in a management cluster.
type ControllerCmd struct {
	Run       ControllerRunCmd       `cmd:"" default:"withargs" help:"Reconcile the KforgeCluster objects of the cluster this runs in (or $$KUBECONFIG's cluster): plan, then apply when the plan is not empty (run as the Deployment that kforge controller manifests prints)."`
	Image     ControllerImageCmd     `cmd:"" help:"Write kforge's container image (this very binary, which must be statically linked: make build) as an image archive, for ctr images import or a registry."`
	Manifests ControllerManifestsCmd `cmd:"" help:"Print the manifests that install kforge controller into a cluster: the KforgeCluster CRD, its namespace, RBAC and Deployment (kubectl apply --server-side -f -)."`
}

// ControllerRunCmd runs the controller.
type ControllerRunCmd struct {
	Namespace  string        `default:"kforge-system" help:"The controller's own namespace (its leader election's Lease)."`
	Identity   string        `placeholder:"NAME" help:"This controller's name in leases (default: the host name)."`
	Clusters   int           `default:"5" help:"How many clusters are worked on at once; each cluster's runs go one at a time."`
	WorkDir    string        `placeholder:"DIR" help:"Where runs keep their private copies of state and credentials (default: the temporary directory; in a pod, an emptyDir in memory)."`
	Timeout    time.Duration `default:"10m" help:"As apply's --timeout, for each run."`
	Resync     time.Duration `default:"10m" help:"How often a cluster whose last plan was empty is planned again."`
	Retry      time.Duration `default:"30s" help:"How soon a cluster whose run failed, or whose state another run holds, is tried again."`
	Metrics    string        `default:":8080" help:"Address of the metrics endpoint ('0': none)."`
	Probes     string        `default:":8081" help:"Address of the health probes ('0': none)."`
	NoElection bool          `help:"Run without leader election (one replica only)."`
}

func (c *ControllerRunCmd) Run(ctx context.Context, g *Globals, log *slog.Logger, dl *debugLog) error {
	dl.Off() // it runs for good: its log is stderr (-v for info, -vv for debug)
	cfg, err := config.GetConfig()
	if err != nil {
		return err
	}
	id := c.Identity
	if id == "" {
		id, _ = os.Hostname()
	}
	return controller.Run(ctx, cfg, controller.Options{
		Clusters: c.Clusters, Hosts: g.Concurrency, Namespace: c.Namespace, Identity: id, WorkDir: c.WorkDir,
		Timeout: c.Timeout, Resync: c.Resync, Retry: c.Retry, MetricsAddr: c.Metrics, ProbeAddr: c.Probes,
		LeaderElection: !c.NoElection, Log: log,
	})
}

// ControllerManifestsCmd prints the controller's manifests.
type ControllerManifestsCmd struct {
	Namespace  string `default:"kforge-system" help:"The namespace the controller runs in."`
	Image      string `placeholder:"REF" help:"kforge's container image (default: kforge.dev/kforge:<this kforge's version>, as kforge controller image names it)."`
	Clusters   int    `default:"5" help:"How many clusters the controller works on at once."`
	BundlePath string `placeholder:"DIR" help:"A directory on every node of the management cluster holding kforge's offline bundle, mounted at /bundle (spec.bundle: /bundle)."`
}

func (c *ControllerManifestsCmd) Run(s *streams) error {
	image := c.Image
	if image == "" {
		image = bundle.KforgeImageName(version)
	}
	b, err := controller.Manifests(controller.ManifestOptions{Namespace: c.Namespace, Image: image, Clusters: c.Clusters, BundleHostPath: c.BundlePath})
	if err != nil {
		return err
	}
	_, err = s.Out.Write(b)
	return err
}

// ControllerImageCmd writes kforge's image.
type ControllerImageCmd struct {
	Out string `short:"o" required:"" placeholder:"FILE" help:"The image archive to write (OCI layout and docker-archive in one tar)."`
}

func (c *ControllerImageCmd) Run(s *streams) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	name := bundle.KforgeImageName(version)
	a, err := bundle.WriteKforgeImage(self, name, c.Out)
	if err != nil {
		return err
	}
	fmt.Fprintf(s.Err, "wrote %s (%s) to %s\n", name, a.Digest, c.Out)
	return nil
}
