package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kforge/kforge/kube"
)

// TestControllerAgainstARealAPIServer runs kforge controller (leader election on) against
// envtest's kube-apiserver, with KforgeClusters it cannot make real, and checks what it says:
// a spec whose credentials Secret is missing, or that the inventory refuses, is Degraded
// (InvalidSpec) and said so in an event; a cluster whose state another run holds waits
// (StateHeld); a cluster whose host does not answer fails its plan (PlanFailed, every step an
// event), with deletionPolicy Reset too (its finalizer added in the same pass); a paused one is
// left alone; and the credentials' values appear in no status and no
// event. Making clusters is the end-to-end test's.
func TestControllerAgainstARealAPIServer(t *testing.T) {
	cfg, c := startAPIServer(t)
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, Options{Clusters: 5, Hosts: 5, Namespace: "default", Identity: "controller-1", WorkDir: t.TempDir(),
			Timeout: time.Minute, Resync: time.Hour, Retry: 2 * time.Second, MetricsAddr: "0", ProbeAddr: "0", LeaderElection: true,
			Log: slog.New(slog.NewTextHandler(testLog{t}, nil))})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	})

	const secret = "hunter2-sudo-password"
	if _, err := k.CoreV1().Secrets("default").Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		Data:       map[string][]byte{"SUDO_PASSWORD": []byte(secret), "id_test": []byte("not a key")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A host that refuses SSH at once: a closed port on loopback.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	spec := func(creds string) string {
		return fmt.Sprintf(`{"ssh":{"user":"kforge","port":%d,"identityFile":"id_test","agent":false,"sudo":"password","sudoPasswordEnv":"SUDO_PASSWORD"},
			"masters":[{"name":"m1","address":"127.0.0.1"}],"credentialsFrom":[{"name":%q}]}`, port, creds)
	}
	create := func(name, specJSON string, annotations map[string]string) {
		t.Helper()
		obj := &KforgeCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: annotations}}
		if err := json.Unmarshal([]byte(specJSON), &obj.Spec); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(context.Background(), obj); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// A lease another run holds, as the CLI would.
	holder, secs, now := "kforge on a laptop (pid 1)", int32(3600), metav1.NewMicroTime(time.Now())
	if _, err := k.CoordinationV1().Leases("default").Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: kube.StateLeaseName("held")},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &now},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	create("no-secret", spec("missing"), nil)
	create("invalid", `{"masters":[{"name":"M_1","address":"127.0.0.1"}]}`, nil)
	create("held", spec("creds"), nil)
	create("unreachable", spec("creds"), nil)
	create("paused", spec("creds"), map[string]string{PausedAnnotation: "true"})
	// deletionPolicy Reset: the finalizer is added, and the same pass goes on to plan.
	create("reset-policy", strings.Replace(spec("creds"), `"credentialsFrom"`, `"deletionPolicy":"Reset","credentialsFrom"`, 1), nil)

	for name, want := range map[string]struct{ typ, status, reason, message string }{
		"no-secret":    {ConditionDegraded, "True", "InvalidSpec", "Secret default/missing not found"},
		"invalid":      {ConditionDegraded, "True", "InvalidSpec", "M_1"},
		"held":         {ConditionProgressing, "False", "StateHeld", "in use by " + holder},
		"unreachable":  {ConditionDegraded, "True", "ApplyFailed", "m1: SSH identity file"},
		"paused":       {ConditionProgressing, "False", "Paused", PausedAnnotation},
		"reset-policy": {ConditionDegraded, "True", "ApplyFailed", "m1: SSH identity file"},
	} {
		var got *metav1.Condition
		var obj KforgeCluster
		err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &obj); err != nil {
				return false, err
			}
			got = meta.FindStatusCondition(obj.Status.Conditions, want.typ)
			return got != nil && got.Reason == want.reason, nil
		})
		if err != nil || string(got.Status) != want.status || !strings.Contains(got.Message, want.message) || obj.Status.ObservedGeneration != obj.Generation {
			t.Errorf("%s: condition %s %+v (observed generation %d of %d), %v; want %s %s naming %q", name, want.typ, got, obj.Status.ObservedGeneration, obj.Generation, err, want.status, want.reason, want.message)
		}
	}
	var reset KforgeCluster
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "reset-policy"}, &reset); err != nil || !slices.Contains(reset.Finalizers, Finalizer) {
		t.Errorf("reset-policy: finalizers %v, %v; want %s", reset.Finalizers, err, Finalizer)
	}
	if l, err := k.CoordinationV1().Leases("default").Get(context.Background(), kube.StateLeaseName("held"), metav1.GetOptions{}); err != nil || *l.Spec.HolderIdentity != holder {
		t.Errorf("the held cluster's lease: %v; want it still held by %s", err, holder)
	}
	// The unreachable cluster's lease was given up after its plan, and its state written (the
	// plan made the PKI in its private copy: nothing of it is pushed, so nothing is kept).
	if l, err := k.CoordinationV1().Leases("default").Get(context.Background(), kube.StateLeaseName("unreachable"), metav1.GetOptions{}); err != nil || (l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "controller-1" && l.Spec.RenewTime != nil) {
		t.Errorf("the unreachable cluster's lease after its plan: %v %v; want given up", err, holderOf(l))
	}

	// Events: the invalid spec and the failed plan said, and no credential anywhere.
	var evs *eventsv1.EventList
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err = k.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		reasons := map[string]bool{}
		for _, e := range evs.Items {
			reasons[e.Regarding.Name+"/"+e.Reason] = true
		}
		return reasons["no-secret/InvalidSpec"] && reasons["unreachable/ApplyFailed"], nil
	})
	if err != nil {
		core, cerr := k.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
		t.Errorf("events.k8s.io events %v: want InvalidSpec for no-secret and ApplyFailed for unreachable (core events: %v %v)", evs, core, cerr)
	}
	var list KforgeClusterList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(list)
	e, _ := json.Marshal(evs)
	if strings.Contains(string(b)+string(e), secret) {
		t.Errorf("the sudo password is in a status or an event")
	}
}

func holderOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

type testLog struct{ t testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
