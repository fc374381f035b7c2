package controller

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/kforge/kforge/remote"
)

// Options are kforge controller's settings (its flags).
type Options struct {
	// Clusters is how many clusters are worked on at once; each cluster's runs go one at a
	// time.
	Clusters int
	// Hosts bounds each run's fan-out over its hosts.
	Hosts int
	// Namespace is where the leader election's Lease is; the pod's own.
	Namespace string
	// Identity names this controller in leases: the pod's name.
	Identity string
	// WorkDir is where runs keep their private copies (an emptyDir in memory).
	WorkDir string
	// Timeout, Resync and Retry: Reconciler's.
	Timeout, Resync, Retry time.Duration
	// MetricsAddr and ProbeAddr are where the metrics and the health probes are served
	// ("0" for none).
	MetricsAddr, ProbeAddr string
	// LeaderElection makes one replica at a time reconcile.
	LeaderElection bool
	Log            *slog.Logger
}

// Run runs the controller on cfg's cluster until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, o Options) error {
	ctrl.SetLogger(logr.FromSlogHandler(o.Log.Handler()))
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return err
	}
	if err := AddToScheme(s); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  s,
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        "kforge-controller",
		LeaderElectionNamespace: o.Namespace,
		// Let the next leader start at once when this one stops (a rollout), not after the
		// lease's 15 s: the clusters' own leases keep their runs apart.
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:        o.ProbeAddr,
	})
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if o.WorkDir == "" {
		o.WorkDir = os.TempDir()
	}
	r := &Reconciler{
		Client: mgr.GetClient(), Kube: k, Events: mgr.GetEventRecorder("kforge-controller"),
		Identity: o.Identity, WorkDir: o.WorkDir, Limits: remote.Limits{Hosts: o.Hosts},
		Timeout: o.Timeout, Resync: o.Resync, Retry: o.Retry, Log: o.Log,
	}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&KforgeCluster{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: max(1, o.Clusters)}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	if o.ProbeAddr != "0" && o.ProbeAddr != "" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return err
		}
	}
	return mgr.Start(ctx)
}
