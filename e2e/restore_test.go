package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/release"
	"github.com/kforge/kforge/state"
)

// restoreOntoANewMaster: on 1 master + 2 workers (agentImage imported on the workers), a
// namespace, a ConfigMap and a Deployment exist when the master's timer next takes a scheduled
// snapshot, which kforge etcd snapshot --fetch --name copies to the state dir; one more
// ConfigMap is created after it. A restore while etcd is healthy is refused, and so is a
// snapshot with one flipped byte, before any host changes. Then the master's host is destroyed,
// the inventory names a new master with another address, and kforge restore --snapshot
// rebuilds the control plane there: the API answers at the new address, the first ConfigMap and
// the Deployment exist and the later ConfigMap does not, both workers are Ready again as the
// same nodes (same UIDs, no new join), the Deployment's pods run, and the lost master's node is
// gone. applyTook, the fresh apply's time, is logged beside restore's.
func (c *cluster) restoreOntoANewMaster(ctx context.Context, lost lab.Host, workers []lab.Host, newMaster lab.Host, applyTook time.Duration) {
	t := c.t.(*testing.T)
	t.Helper()
	k := c.client()
	const ns = "keep"
	if _, err := k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mkConfigMap := func(name string) {
		t.Helper()
		if _, err := k.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mkConfigMap("before-snapshot")
	// A Secret, whose value must be in the snapshot only encrypted, and readable after the
	// restore (the state dir's key).
	secretValue := "e2e-secret-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := k.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "before-snapshot"}, StringData: map[string]string{"password": secretValue}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	two := int32(2)
	labels := map[string]string{"app": "survivor"}
	if _, err := k.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "survivor"},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: agentImage, ImagePullPolicy: corev1.PullNever, Args: []string{"serve"}}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitDeployment(ctx, t, c, ns, "survivor", 2)
	workerUIDs := map[string]types.UID{}
	for _, w := range workers {
		n, err := k.CoreV1().Nodes().Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		workerUIDs[w.Name] = n.UID
	}

	// The snapshot restored is one the master's timer took (etcdSnapshots), fetched.
	written := time.Now()
	sched := c.waitScheduledSnapshotAfter(ctx, lost.Name, written)
	t.Logf("the scheduled snapshot %s came %s after the objects were written", sched.File, sched.Time.Sub(written).Round(time.Second))
	out, err := c.run("etcd", "snapshot", "--fetch", "--name", sched.File)
	if err != nil {
		t.Fatalf("kforge etcd snapshot --fetch --name %s: %v\n%s", sched.File, err, out)
	}
	snaps, err := state.At(c.state).ListSnapshots()
	if err != nil || len(snaps) == 0 || snaps[len(snaps)-1].SHA256 != sched.SHA256 {
		t.Fatalf("snapshots: %v %v; want the newest to be the scheduled %s", snaps, err, sched.File)
	}
	snap := snaps[len(snaps)-1].File
	mkConfigMap("after-snapshot")
	if db, err := os.ReadFile(snap); err != nil || bytes.Contains(db, []byte(secretValue)) || !bytes.Contains(db, []byte("k8s:enc:secretbox:v1:")) {
		t.Errorf("the snapshot holds the Secret's value in plain text %v, or no value encrypted with secretbox %v (%v)",
			bytes.Contains(db, []byte(secretValue)), bytes.Contains(db, []byte("k8s:enc:secretbox:v1:")), err)
	}

	// Refusals: etcd still has quorum; a corrupted snapshot (before anything connects).
	out, err = c.run("restore", "--snapshot", snap)
	if err == nil || !strings.Contains(out, "etcd still has quorum (") {
		t.Fatalf("restore over a healthy etcd: %v; want a refusal naming the quorum\n%s", err, out)
	}
	data, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "flipped.db")
	flipped := bytes.Clone(data)
	flipped[len(flipped)/3] ^= 0x01
	if err := os.WriteFile(bad, flipped, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = c.run("restore", "--snapshot", bad)
	if err == nil || !strings.Contains(out, "is refused: the database's sha256 is") || strings.Contains(out, "• connect") {
		t.Fatalf("restore of a corrupted snapshot: %v; want it refused before connecting to any host\n%s", err, out)
	}

	// The master is lost; a new host with another address takes its place.
	if err := c.lab.StopHost(ctx, lost.Name); err != nil {
		t.Fatal(err)
	}
	c.writeInventory([]lab.Host{newMaster}, workers)
	start := time.Now()
	out, err = c.run("restore", "--snapshot", snap, "--timeout", "5m")
	if err != nil {
		t.Fatalf("kforge restore: %v\n%s", err, out)
	}
	restoreTook := time.Since(start)
	t.Logf("restore onto %s took %s (to all nodes Ready); the fresh apply of the cluster took %s:\n%s", newMaster.Name, restoreTook.Round(time.Second), applyTook.Round(time.Second), out)
	// Restore ends converged: what it wrote is what the next apply wants (the inventory's one
	// master: no leader election, no shutdown delay), so no apply remains.
	if plan, code := c.plan(); code != 0 {
		t.Errorf("plan right after the restore: exit %d, want 0 (no changes):\n%s", code, plan)
	}

	admin, err := os.ReadFile(filepath.Join(c.state, "admin.conf"))
	if err != nil || !strings.Contains(string(admin), "server: https://"+newMaster.Address+":6443") {
		t.Errorf("admin.conf does not point at the new master %s: %v\n%s", newMaster.Address, err, admin)
	}
	k = c.client()
	if sec, err := k.CoreV1().Secrets(ns).Get(ctx, "before-snapshot", metav1.GetOptions{}); err != nil || string(sec.Data["password"]) != secretValue {
		t.Errorf("the Secret after the restore: %v (value as written: %v)", err, sec != nil && string(sec.Data["password"]) == secretValue)
	}
	if _, err := k.CoreV1().ConfigMaps(ns).Get(ctx, "before-snapshot", metav1.GetOptions{}); err != nil {
		t.Errorf("ConfigMap created before the snapshot: %v", err)
	}
	if _, err := k.CoreV1().ConfigMaps(ns).Get(ctx, "after-snapshot", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap created after the snapshot: err = %v, want not found", err)
	}
	if _, err := k.CoreV1().Nodes().Get(ctx, lost.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the lost master's node %s: err = %v, want not found", lost.Name, err)
	}
	for _, w := range workers {
		n, err := k.CoreV1().Nodes().Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.UID != workerUIDs[w.Name] || !nodeReady(n) {
			t.Errorf("worker %s: UID %s (before %s), Ready %v; want the same node, Ready", w.Name, n.UID, workerUIDs[w.Name], nodeReady(n))
		}
	}
	waitDeployment(ctx, t, c, ns, "survivor", 2)
	c.checkNodes(ctx, 3)
}

// waitDeployment waits until the Deployment has want ready replicas.
func waitDeployment(ctx context.Context, t *testing.T, c *cluster, ns, name string, want int32) {
	t.Helper()
	k := c.client()
	var d *appsv1.Deployment
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		d, err = k.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas == want, nil
	})
	if err != nil {
		t.Fatalf("deployment %s/%s: %v; status %+v", ns, name, err, d)
	}
}

// TestRestoreThreeLostMasters: 3 masters + 1 worker. With two masters down, kforge etcd status
// reports the lost quorum and names the restore route; then all three are lost, and kforge
// restore rebuilds the control plane on three new hosts with other addresses: etcd has three
// healthy members, the data of the snapshot is there (and not what came after), the worker is
// the same node, Ready, and the old masters' nodes are gone. The time from restore to all nodes
// Ready is logged.
func TestRestoreThreeLostMasters(t *testing.T) {
	testenv.Require(t, lab.Prerequisites())
	inLane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	c := newCluster(ctx, t, "rha", release.Default(), lab.Options{Hosts: 7, Masters: 3})
	h := c.lab.Hosts // h[0..2] the masters, h[3] the worker, h[4..6] the new masters
	c.endpoint = h[0].Address + ":6443"
	c.writeInventory(h[:3], h[3:4])
	if out, err := c.run("apply", "--timeout", "5m"); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	k := c.client()
	mk := func(name string) {
		t.Helper()
		if _, err := k.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("before-snapshot")
	worker, err := k.CoreV1().Nodes().Get(ctx, h[3].Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := c.run("etcd", "snapshot"); err != nil {
		t.Fatalf("kforge etcd snapshot: %v\n%s", err, out)
	}
	snaps, err := state.At(c.state).ListSnapshots()
	if err != nil || len(snaps) != 1 {
		t.Fatalf("snapshots: %v %v", snaps, err)
	}
	mk("after-snapshot")

	// Two masters down: no quorum, and status says where to go from here.
	for _, m := range h[1:3] {
		if err := c.lab.StopHost(ctx, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	out, err := c.run("etcd", "status")
	if err == nil || !strings.Contains(out, "NO QUORUM") || !strings.Contains(out, "kforge restore --snapshot") {
		t.Errorf("kforge etcd status with 2 of 3 masters down: %v; want a failure that reports no quorum and the restore route\n%s", err, out)
	}
	t.Logf("kforge etcd status with 2 of 3 masters down:\n%s", out)

	// All three lost; three new hosts take their place.
	if err := c.lab.StopHost(ctx, h[0].Name); err != nil {
		t.Fatal(err)
	}
	c.endpoint = h[4].Address + ":6443"
	c.writeInventory(h[4:7], h[3:4])
	start := time.Now()
	out, err = c.run("restore", "--snapshot", snaps[0].File, "--timeout", "6m")
	if err != nil {
		t.Fatalf("kforge restore: %v\n%s", err, out)
	}
	t.Logf("restore onto 3 new masters took %s (to all nodes Ready):\n%s", time.Since(start).Round(time.Second), out)

	out, err = c.run("etcd", "status")
	if err != nil || !strings.Contains(out, "3 of 3 voting members healthy: quorum") {
		t.Errorf("kforge etcd status after the restore: %v\n%s", err, out)
	}
	k = c.client()
	if _, err := k.CoreV1().ConfigMaps("default").Get(ctx, "before-snapshot", metav1.GetOptions{}); err != nil {
		t.Errorf("ConfigMap created before the snapshot: %v", err)
	}
	if _, err := k.CoreV1().ConfigMaps("default").Get(ctx, "after-snapshot", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap created after the snapshot: err = %v, want not found", err)
	}
	for _, m := range h[:3] {
		if _, err := k.CoreV1().Nodes().Get(ctx, m.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("lost master's node %s: err = %v, want not found", m.Name, err)
		}
	}
	w, err := k.CoreV1().Nodes().Get(ctx, h[3].Name, metav1.GetOptions{})
	if err != nil || w.UID != worker.UID || !nodeReady(w) {
		t.Errorf("worker after the restore: %v; UID %s (before %s); want the same node, Ready", err, w.UID, worker.UID)
	}
	c.checkNodes(ctx, 4)
}
