package kube

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStateKeys(t *testing.T) {
	for _, rel := range []string{"pki/etcd/ca.key", "admin.conf", "pki/nodes/w-1/kubelet-server.crt", "snapshots/etcd-20261128-101010.json"} {
		key, err := stateKey(rel)
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if back, err := stateFile(key); err != nil || back != rel {
			t.Errorf("%s → %s → %s, %v", rel, key, back, err)
		}
	}
	for _, rel := range []string{"pki/a__b", "pki/ä"} {
		if key, err := stateKey(rel); err == nil {
			t.Errorf("%s became key %s; want an error", rel, key)
		}
	}
	for _, key := range []string{"__..__etc__passwd", "..", "a/b"} {
		if rel, err := stateFile(key); err == nil {
			t.Errorf("key %s became file %s; want an error", key, rel)
		}
	}
}

// TestStateStoreAgainstARealAPIServer keeps a state dir in a real kube-apiserver: what one run
// writes, the next reads; the lease keeps a second run out while the first holds it, is taken
// over once its holder stops renewing (time really passes), and a run whose lease is taken
// learns it through its Context.
func TestStateStoreAgainstARealAPIServer(t *testing.T) {
	cp := startControlPlane(t, integrationCluster(), t.TempDir())
	cp.waitUp(t)
	k := cp.client(t, cp.superAdmin)
	ctx := context.Background()
	const ns, name = "default", "edge"

	a, err := OpenState(ctx, k, ns, name, StateOptions{Identity: "run-a", Lock: true})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"pki/ca.crt":                          "CA",
		"pki/etcd/ca.key":                     "KEY",
		"admin.conf":                          "ADMIN",
		"snapshots/etcd-20261128-101010.json": `{"size":1}`,
		"snapshots/etcd-20261128-101010.db":   "a snapshot too large for a Secret",
		"logs/20261128-apply.log":             "debug",
	}
	for i := range StateRunsKept + 1 {
		files[fmt.Sprintf("runs/20261128-1010%02d.000-apply.json", i)] = fmt.Sprintf(`{"run":%d}`, i)
	}
	for rel, data := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(a.Dir(), rel)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(a.Dir(), rel), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	sec, err := k.CoreV1().Secrets(ns).Get(ctx, StateSecretName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range sec.Data {
			if !yield(k) {
				return
			}
		}
	})
	if want := []string{"admin.conf", "pki__ca.crt", "pki__etcd__ca.key", "snapshots__etcd-20261128-101010.json"}; !slices.Equal(keys, want) {
		t.Errorf("state Secret keys %v, want %v", keys, want)
	}
	if string(sec.Data["pki__etcd__ca.key"]) != "KEY" || sec.Type != "kforge.dev/state" {
		t.Errorf("state Secret: type %s, pki/etcd/ca.key %q", sec.Type, sec.Data["pki__etcd__ca.key"])
	}
	cms, err := k.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: stateLabel + "=" + name})
	if err != nil {
		t.Fatal(err)
	}
	if len(cms.Items) != StateRunsKept {
		t.Errorf("%d run records kept, want the newest %d", len(cms.Items), StateRunsKept)
	}
	for _, cm := range cms.Items {
		if cm.Name == stateRunName(name, "20261128-101000.000-apply.json") {
			t.Errorf("the oldest run record %s is still there", cm.Name)
		}
	}

	// A second run is refused while the first holds the lease; a reader is not.
	_, err = OpenState(ctx, k, ns, name, StateOptions{Identity: "run-b", Lock: true})
	var locked *StateLockedError
	if !errors.As(err, &locked) || locked.Holder != "run-a" || !strings.Contains(err.Error(), "in use by run-a") {
		t.Fatalf("second run while run-a holds the state: %v; want a StateLockedError naming run-a", err)
	}
	r, err := OpenState(ctx, k, ns, name, StateOptions{Identity: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]string{"pki/etcd/ca.key": "KEY", "admin.conf": "ADMIN", "runs/20261128-101020.000-apply.json": `{"run":20}`} {
		if got, err := os.ReadFile(filepath.Join(r.Dir(), rel)); err != nil || string(got) != want {
			t.Errorf("the reader's %s: %q, %v; want %q", rel, got, err, want)
		}
	}
	for _, rel := range []string{"snapshots/etcd-20261128-101010.db", "logs/20261128-apply.log", "runs/20261128-101000.000-apply.json"} {
		if _, err := os.Stat(filepath.Join(r.Dir(), rel)); err == nil {
			t.Errorf("the reader has %s, which is not kept", rel)
		}
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// A removed file goes from the Secret; Close removes the copy and frees the lease.
	if err := os.Remove(filepath.Join(a.Dir(), "admin.conf")); err != nil {
		t.Fatal(err)
	}
	dir := a.Dir()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("the private copy %s is still there after Close", dir)
	}
	if sec, err := k.CoreV1().Secrets(ns).Get(ctx, StateSecretName(name), metav1.GetOptions{}); err != nil || sec.Data["admin.conf"] != nil || sec.Data["pki__ca.crt"] == nil {
		t.Errorf("after admin.conf was removed: %v, keys %v", err, sec.Data)
	}

	// A holder that died (it stopped renewing) loses the lease once its duration has passed.
	l, err := k.CoordinationV1().Leases(ns).Get(ctx, StateLeaseName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dead := "dead-run"
	renewed := metav1.NewMicroTime(time.Now().Add(-StateLeaseDuration + 3*time.Second))
	l.Spec.HolderIdentity, l.Spec.RenewTime = &dead, &renewed
	if _, err := k.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenState(ctx, k, ns, name, StateOptions{Identity: "run-c", Lock: true}); !errors.As(err, &locked) || locked.Holder != dead {
		t.Fatalf("while dead-run's lease runs: %v; want it refused", err)
	}
	time.Sleep(time.Until(renewed.Add(StateLeaseDuration)) + 100*time.Millisecond)
	c, err := OpenState(ctx, k, ns, name, StateOptions{Identity: "run-c", Lock: true})
	if err != nil {
		t.Fatalf("after dead-run's lease ran out: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(c.Dir(), "pki/etcd/ca.key")); err != nil || string(got) != "KEY" {
		t.Errorf("run-c's pki/etcd/ca.key: %q, %v", got, err)
	}

	// A run whose lease another takes learns it at its next renewal.
	l, err = k.CoordinationV1().Leases(ns).Get(ctx, StateLeaseName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	thief := "run-d"
	l.Spec.HolderIdentity = &thief
	if _, err := k.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Context().Done():
		if cause := context.Cause(c.Context()); !errors.As(cause, &locked) || locked.Holder != thief {
			t.Errorf("run-c's context ended with %v; want the lease held by %s", cause, thief)
		}
	case <-time.After(StateLeaseRenew + 5*time.Second):
		t.Errorf("run-c's context not cancelled %s after its lease was taken", StateLeaseRenew+5*time.Second)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err := k.CoordinationV1().Leases(ns).Get(ctx, StateLeaseName(name), metav1.GetOptions{}); err != nil || *l.Spec.HolderIdentity != thief {
		t.Errorf("run-c's Close gave up a lease it no longer held: %v %v", err, holderOf(l))
	}

	// DeleteState leaves nothing of the cluster's state, and a second call is no error.
	for range 2 {
		if err := DeleteState(ctx, k, ns, name); err != nil {
			t.Fatal(err)
		}
	}
	cms, err = k.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: stateLabel + "=" + name})
	_, serr := k.CoreV1().Secrets(ns).Get(ctx, StateSecretName(name), metav1.GetOptions{})
	_, lerr := k.CoordinationV1().Leases(ns).Get(ctx, StateLeaseName(name), metav1.GetOptions{})
	if err != nil || len(cms.Items) > 0 || !apierrors.IsNotFound(serr) || !apierrors.IsNotFound(lerr) {
		t.Errorf("after DeleteState: %v, %d run records, Secret %v, lease %v", err, len(cms.Items), serr, lerr)
	}
}

func holderOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
