package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/state"
	"github.com/kforge/kforge/tasks"
)

// Reconciler makes each KforgeCluster's cluster as its spec says, with the CLI's own step
// lists: it runs plan, runs apply when the plan is not empty, and records the outcome in the
// status (conditions Ready, Progressing, Degraded) and in events, one per step.
type Reconciler struct {
	Client client.Client
	// Kube is the management cluster's clientset (the state's Secret, ConfigMaps and Lease,
	// the credentials' Secrets).
	Kube   kubernetes.Interface
	Events events.EventRecorder
	// Identity holds the clusters' leases: the controller's pod.
	Identity string
	// WorkDir is where each run's private copies go (an emptyDir in memory).
	WorkDir string
	// Limits bound each run's fan-out over its hosts.
	Limits remote.Limits
	// Timeout bounds each of a run's waits on its cluster (apply --timeout).
	Timeout time.Duration
	// Resync is how often a cluster whose last plan was empty is planned again (drift).
	Resync time.Duration
	// Retry is how soon a cluster whose run failed, or whose state another run holds, is tried
	// again.
	Retry time.Duration
	Log   *slog.Logger
}

// Reconcile is one pass over one KforgeCluster.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var k KforgeCluster
	if err := r.Client.Get(ctx, req.NamespacedName, &k); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	log := r.Log.With("cluster", req.String())
	if !k.DeletionTimestamp.IsZero() {
		return r.delete(ctx, &k, log)
	}
	if k.Spec.DeletionPolicy == DeletionReset && !controllerutil.ContainsFinalizer(&k, Finalizer) {
		// The reconcile goes on with the updated object: the update changes no generation or
		// annotation, so the watch's predicates let no event of it through to come back here
		// (ad64961's e2e: an object with deletionPolicy Reset was never planned).
		controllerutil.AddFinalizer(&k, Finalizer)
		if err := r.Client.Update(ctx, &k); err != nil {
			return ctrl.Result{}, err
		}
	}
	if k.Annotations[PausedAnnotation] == "true" {
		r.condition(&k, ConditionProgressing, metav1.ConditionFalse, "Paused", "reconciling is paused ("+PausedAnnotation+": \"true\")")
		return ctrl.Result{}, r.status(ctx, &k)
	}

	s, err := r.open(ctx, &k)
	var locked *kube.StateLockedError
	switch {
	case errors.As(err, &locked):
		log.Info("state held by another run; trying again later", "holder", locked.Holder)
		r.condition(&k, ConditionProgressing, metav1.ConditionFalse, "StateHeld", redact(err))
		return ctrl.Result{RequeueAfter: r.Retry}, r.status(ctx, &k)
	case errors.As(err, new(*InvalidSpecError)):
		r.degraded(&k, "InvalidSpec", err)
		r.Events.Eventf(&k, nil, corev1.EventTypeWarning, "InvalidSpec", "Plan", "%s", redact(err))
		return ctrl.Result{}, r.status(ctx, &k) // until the spec or its Secrets change
	case err != nil:
		return ctrl.Result{}, err
	}
	defer func() {
		if cerr := s.close(ctx); cerr != nil {
			log.Error("state not written back", "err", redact(cerr))
		}
	}()
	if run := k.Status.LastRun; run != nil && run.End == nil {
		// This run holds the cluster's lease: the one the status names is gone (its controller
		// stopped mid-run). The plan below says what it left; apply finishes it.
		now := metav1.Now()
		run.End, run.Outcome = &now, "interrupted: its controller stopped before it ended"
		r.Events.Eventf(&k, nil, corev1.EventTypeWarning, "Interrupted", "Apply", "the %s that began at %s did not end (its controller stopped): planning again from where it was", run.Command, run.Start.UTC().Format(time.RFC3339))
	}

	diff, err := s.plan(ctx)
	if err != nil {
		r.degraded(&k, "PlanFailed", err)
		r.Events.Eventf(&k, nil, corev1.EventTypeWarning, "PlanFailed", "Plan", "%s", redact(err))
		return ctrl.Result{RequeueAfter: r.Retry}, r.status(ctx, &k)
	}
	k.Status.LastPlan = planSummary(diff)
	if diff.Changes() == 0 && diff.Complete() && len(diff.Preflight) == 0 {
		r.ready(&k, s.inv, k.Status.LastPlan)
		return ctrl.Result{RequeueAfter: r.Resync}, r.status(ctx, &k)
	}

	r.condition(&k, ConditionProgressing, metav1.ConditionTrue, "Applying", k.Status.LastPlan)
	start := metav1.Now()
	k.Status.LastRun = &RunStatus{Command: "apply", Start: start}
	if err := r.status(ctx, &k); err != nil {
		return ctrl.Result{}, err
	}
	r.Events.Eventf(&k, nil, corev1.EventTypeNormal, "Applying", "Apply", "%s", k.Status.LastPlan)
	err = s.apply(ctx, func(e progress.Event) { r.stepEvent(&k, e) })
	end := metav1.Now()
	k.Status.LastRun.End = &end
	if err != nil {
		k.Status.LastRun.Outcome = redact(err)
		r.degraded(&k, "ApplyFailed", err)
		r.Events.Eventf(&k, nil, corev1.EventTypeWarning, "ApplyFailed", "Apply", "%s", redact(err))
		return ctrl.Result{RequeueAfter: r.Retry}, r.status(ctx, &k)
	}
	k.Status.LastRun.Outcome = "ok"
	r.ready(&k, s.inv, fmt.Sprintf("applied in %s", end.Sub(start.Time).Round(time.Second)))
	r.Events.Eventf(&k, nil, corev1.EventTypeNormal, "Applied", "Apply", "cluster %s is as its spec says: %d nodes, Kubernetes %s, in %s", k.Name, len(s.inv.Nodes()), s.inv.KubernetesVersion, end.Sub(start.Time).Round(time.Second))
	return ctrl.Result{RequeueAfter: r.Resync}, r.status(ctx, &k)
}

// delete lets a deleted KforgeCluster go. With deletionPolicy Retain (no finalizer) the cluster
// runs on and its state stays (kforge -i FILE --state-dir kube://… can take it over); with
// Reset, once its hosts are reset, its state is deleted too.
func (r *Reconciler) delete(ctx context.Context, k *KforgeCluster, log *slog.Logger) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(k, Finalizer) {
		return ctrl.Result{}, nil
	}
	if k.Spec.DeletionPolicy == DeletionReset {
		s, err := r.open(ctx, k)
		if err != nil && !errors.As(err, new(*InvalidSpecError)) {
			return ctrl.Result{RequeueAfter: r.Retry}, nil
		}
		if err == nil {
			err = s.reset(ctx, func(e progress.Event) { r.stepEvent(k, e) })
			if cerr := s.close(ctx); cerr != nil {
				log.Error("state not written back", "err", redact(cerr))
			}
			if err != nil {
				r.Events.Eventf(k, nil, corev1.EventTypeWarning, "ResetFailed", "Reset", "%s", redact(err))
				return ctrl.Result{RequeueAfter: r.Retry}, nil
			}
		}
		if err := kube.DeleteState(ctx, r.Kube, k.Namespace, k.Name); err != nil {
			return ctrl.Result{}, err
		}
	}
	controllerutil.RemoveFinalizer(k, Finalizer)
	return ctrl.Result{}, r.Client.Update(ctx, k)
}

// stepEvent is an event on the object for each step done or failed.
func (r *Reconciler) stepEvent(k *KforgeCluster, e progress.Event) {
	switch e.Kind {
	case progress.Done:
		r.Events.Eventf(k, nil, corev1.EventTypeNormal, "StepDone", e.Task, "%s done in %s", e.Task, e.Duration.Round(100*time.Millisecond))
	case progress.Failed:
		r.Events.Eventf(k, nil, corev1.EventTypeWarning, "StepFailed", e.Task, "%s failed after %s: %s", e.Task, e.Duration.Round(100*time.Millisecond), progress.Redact(e.Err))
	}
}

func (r *Reconciler) condition(k *KforgeCluster, typ string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&k.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: k.Generation})
}

func (r *Reconciler) degraded(k *KforgeCluster, reason string, err error) {
	r.condition(k, ConditionDegraded, metav1.ConditionTrue, reason, redact(err))
	r.condition(k, ConditionReady, metav1.ConditionFalse, reason, redact(err))
	r.condition(k, ConditionProgressing, metav1.ConditionFalse, reason, "")
}

func (r *Reconciler) ready(k *KforgeCluster, inv *inventory.Cluster, message string) {
	k.Status.Version, k.Status.Nodes = inv.KubernetesVersion, len(inv.Nodes())
	r.condition(k, ConditionReady, metav1.ConditionTrue, "UpToDate", message)
	r.condition(k, ConditionProgressing, metav1.ConditionFalse, "UpToDate", "")
	r.condition(k, ConditionDegraded, metav1.ConditionFalse, "UpToDate", "")
}

// status writes the status, for the generation just reconciled. An object changed meanwhile
// (the spec edited during a run) gets it all the same, still naming the generation reconciled,
// so that a run's end is never lost (the next reconcile would take it for interrupted).
func (r *Reconciler) status(ctx context.Context, k *KforgeCluster) error {
	k.Status.ObservedGeneration = k.Generation
	err := r.Client.Status().Update(ctx, k)
	if apierrors.IsConflict(err) {
		var fresh KforgeCluster
		if gerr := r.Client.Get(ctx, client.ObjectKeyFromObject(k), &fresh); gerr != nil {
			return errors.Join(err, gerr)
		}
		fresh.Status = k.Status
		if err = r.Client.Status().Update(ctx, &fresh); err == nil {
			k.ResourceVersion = fresh.ResourceVersion
		}
	}
	return err
}

// planSummary is the plan's last line ("No changes: apply would change nothing.", or "Plan: 1
// host, 0 certificates, 3 API objects to change.").
func planSummary(d tasks.Diff) string {
	lines := strings.Split(strings.TrimSpace(d.Text()), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func redact(err error) string { return progress.Redact(err.Error()) }

// session is one run on one cluster: the state held (its lease) as a private copy, the
// inventory and credentials written beside each other in a directory of their own, the
// environment the inventory names taken from the credentials.
type session struct {
	store *kube.StateStore
	w     *Workspace
	inv   *inventory.Cluster
	o     tasks.Options
}

// open takes k's state and makes its workspace (NewWorkspace); HOME is in the state, so that
// ssh's known_hosts is kept with the cluster.
func (r *Reconciler) open(ctx context.Context, k *KforgeCluster) (*session, error) {
	w, err := NewWorkspace(ctx, r.Kube, k, r.WorkDir)
	if err != nil {
		return nil, err
	}
	store, err := kube.OpenState(ctx, r.Kube, k.Namespace, k.Name, kube.StateOptions{Identity: r.Identity, Lock: true, Dir: r.WorkDir})
	if err != nil {
		return nil, errors.Join(err, w.Close())
	}
	s := &session{store: store, w: w}
	w.SetHome(filepath.Join(store.Dir(), "home"))
	if s.inv, err = w.Load(k); err != nil {
		return nil, errors.Join(err, s.close(ctx))
	}
	d := state.At(store.Dir())
	s.o = tasks.Options{State: d, InventoryDir: w.Dir, Limits: r.Limits, Timeout: r.Timeout, Prune: k.Spec.Prune,
		AcceptNewHostKeys: k.Spec.AcceptNewHostKeys, Getenv: w.Getenv, Logger: r.Log.With("cluster", k.Namespace+"/"+k.Name)}
	if s.o.Removed, err = tasks.Removed(s.inv, d); err == nil {
		s.o.EtcdFrom, err = tasks.EtcdMove(s.inv, d, k.Spec.Prune)
	}
	if err != nil {
		return nil, errors.Join(&InvalidSpecError{err}, s.close(ctx))
	}
	return s, nil
}

// plan runs kforge plan's steps.
func (s *session) plan(ctx context.Context) (tasks.Diff, error) {
	p := tasks.NewPlan(s.inv, s.o)
	defer p.Close()
	_, err := tasks.Run(ctx, p.Steps(), func(progress.Event) {}, time.Now)
	return p.Diff, err
}

// apply runs kforge apply's steps, the state written back after each, the run recorded.
func (s *session) apply(ctx context.Context, report progress.Reporter) error {
	a := tasks.NewApply(s.inv, s.o)
	defer a.Close()
	return s.run(ctx, "apply", a.Steps(), report, a.Explain)
}

// reset runs kforge reset's steps.
func (s *session) reset(ctx context.Context, report progress.Reporter) error {
	x := tasks.NewReset(s.inv, s.o)
	defer x.Close()
	return s.run(ctx, "reset", x.Steps(), report, func(err error) error { return err })
}

func (s *session) run(ctx context.Context, command string, steps []tasks.Step, report progress.Reporter, explain func(error) error) error {
	record := state.NewRun(command, time.Now())
	_, err := tasks.RunHeld(ctx, steps, record.Report(report), time.Now, s.store)
	if err != nil {
		err = explain(err)
	}
	return errors.Join(err, s.o.State.Save(record, time.Now(), err))
}

// close writes the state back and removes the private copies.
func (s *session) close(ctx context.Context) error {
	return errors.Join(s.w.Close(), s.store.Close(context.WithoutCancel(ctx)))
}
