package tasks

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/state"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/remote"
)

// resetLab is a lab, its inventory with the bundle, and a state dir.
type resetLab struct {
	t     *testing.T
	lab   *lab.Lab
	inv   *inventory.Cluster
	state string
}

func (r *resetLab) options() Options {
	return Options{State: state.At(r.state), Limits: remote.Limits{}, Timeout: 4 * time.Minute, Logger: slog.New(slog.DiscardHandler)}
}

// command is apply or reset.
type command interface {
	Steps() []Step
	Close()
}

// run runs steps and returns the events, failing the test on an error.
func (r *resetLab) run(ctx context.Context, what string, newCommand func(o Options) command) *recorder {
	r.t.Helper()
	a := newCommand(r.options())
	defer a.Close()
	var rec recorder
	start := time.Now()
	timings, err := Run(ctx, a.Steps(), rec.report, time.Now)
	if err != nil {
		r.t.Fatalf("%s: %v", what, err)
	}
	r.t.Logf("%s took %s: %v", what, time.Since(start).Round(10*time.Millisecond), timings)
	return &rec
}

func (r *resetLab) exec(ctx context.Context, host, script string) string {
	r.t.Helper()
	out, err := r.lab.Exec(ctx, host, "sh", "-c", script)
	if err != nil {
		r.t.Fatalf("%s: %s: %v\n%s", host, script, err, out)
	}
	return string(out)
}

// leftovers lists what apply left on host that reset must remove; empty when clean.
const leftoversScript = `pgrep -a -x kubelet
ctr -n k8s.io containers ls -q | sed 's/^/container /'
for p in /etc/kubernetes /var/lib/kubelet /var/lib/etcd /etc/systemd/system/kubelet.service /etc/systemd/system/kubelet.service.d \
         /etc/sysctl.d/99-kforge.conf /etc/cni/net.d/10-kforge.conflist /run/flannel /var/lib/cni/networks/kforge; do
  [ -e "$p" ] && echo "file $p"
done
ls /run/netns 2>/dev/null | sed 's/^/netns /'
awk '$2 ~ "^/var/lib/kubelet" {print "mount " $2}' /proc/mounts
for l in cni0 flannel.1; do ip link show dev $l >/dev/null 2>&1 && echo "link $l"; done
for t in iptables-legacy iptables-nft ip6tables-legacy ip6tables-nft; do $t-save 2>/dev/null | grep -E 'KUBE-|FLANNEL-' | sed "s/^/$t /"; done
systemctl is-enabled kubelet 2>/dev/null | sed 's/^/kubelet unit /'
true`

// keptScript prints what reset must keep: the binaries, the imported images, containerd's
// config and its running process.
const keptScript = `test -x /usr/bin/kubelet && echo kubelet-binary
test -f /etc/containerd/config.toml && echo containerd-config
echo "images $(ctr -n k8s.io images ls -q | wc -l)"
systemctl show -p MainPID --value containerd`

// TestResetLabCluster: on a fresh lab, reset finds nothing to do; after apply (1 master, 1
// worker, the bundle, a pod on the worker) reset leaves no kubelet, container, kforge file,
// mount, network namespace, pod-network link or KUBE-/FLANNEL- iptables rule, keeps binaries,
// images and containerd's config; a second reset changes nothing (containerd not even
// restarted); apply then brings the cluster back.
func TestResetLabCluster(t *testing.T) {
	testenv.Require(t, lab.Prerequisites())
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	dir := t.TempDir()
	b := filepath.Join(dir, "bundle")
	if _, err := bundle.Build(ctx, bundle.Options{BuildOptions: bundle.BuildOptions{Version: "v1.36.3"}, Out: b}); err != nil {
		t.Fatalf("bundle build: %v", err)
	}
	l, err := lab.Up(ctx, lab.Options{Name: fmt.Sprintf("rs%d", os.Getpid()%100000), Hosts: 2})
	if err != nil {
		t.Fatalf("lab up: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Down(context.Background()); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	data, err := os.ReadFile(l.InventoryFile)
	if err != nil {
		t.Fatal(err)
	}
	invFile := filepath.Join(dir, "kforge.yaml")
	if err := os.WriteFile(invFile, append(data, []byte("bundle: "+b+"\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.Load(invFile)
	if err != nil {
		t.Fatal(err)
	}
	r := &resetLab{t: t, lab: l, inv: inv, state: filepath.Join(dir, "state")}
	master, worker := l.Hosts[0].Name, l.Hosts[1].Name
	hosts := []string{master, worker}
	reset := func(o Options) command { return NewReset(r.inv, o) }
	apply := func(o Options) command { return NewApply(r.inv, o) }
	clean := map[string]string{"stop-kubelet": "kubelet not running", "containers": "no containers", "unmount": "nothing mounted", "files": "no files left", "network": "nothing left"}
	assertNothingDone := func(what string, rec *recorder) {
		t.Helper()
		for task, byHost := range rec.hostLines() {
			if want, ok := clean[task]; ok {
				for host, msg := range byHost {
					if msg != want {
						t.Errorf("%s, %s on %s: %q, want %q", what, task, host, msg, want)
					}
				}
			}
		}
	}

	// 1. Hosts apply never touched: nothing to do.
	assertNothingDone("reset of fresh hosts", r.run(ctx, "reset of fresh hosts", reset))

	// 2. A cluster, with a pod on every host so each has cni0, a network namespace and mounts
	// (where CoreDNS lands is the scheduler's choice, so the test does not count on it).
	r.run(ctx, "apply", apply)
	cfg, err := clientcmd.BuildConfigFromFlags("", state.At(r.state).AdminKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pause := "registry.k8s.io/pause:3.10.2"
	for _, h := range hosts {
		if _, err := k.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "sleeper-" + h},
			Spec: corev1.PodSpec{
				NodeName:    h,
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
				Containers: []corev1.Container{{
					Name: "pause", Image: pause, ImagePullPolicy: corev1.PullNever,
				}},
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, h := range hosts {
		for {
			p, err := k.CoreV1().Pods("default").Get(ctx, "sleeper-"+h, metav1.GetOptions{})
			if err == nil && p.Status.Phase == corev1.PodRunning {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod on %s not running: %v %+v", h, err, p.Status)
			}
			time.Sleep(time.Second)
		}
	}
	kept := map[string]string{}
	for _, h := range hosts {
		left := r.exec(ctx, h, leftoversScript)
		for _, want := range []string{"kubelet", "container ", "file /etc/kubernetes", "mount /var/lib/kubelet/", "link cni0", "link flannel.1", "iptables-nft -A KUBE-", "netns cni-"} {
			if !strings.Contains(left, want) {
				t.Errorf("%s before reset: no %q, so reset would not be tested on it:\n%s", h, want, left)
			}
		}
		kept[h] = r.exec(ctx, h, keptScript)
	}

	// 3. Reset: every host clean, what must stay stayed.
	r.run(ctx, "reset", reset)
	for _, h := range hosts {
		if left := r.exec(ctx, h, leftoversScript); left != "" {
			t.Errorf("%s after reset, left:\n%s", h, left)
		}
		now := r.exec(ctx, h, keptScript)
		for _, want := range []string{"kubelet-binary", "containerd-config"} {
			if !strings.Contains(now, want) {
				t.Errorf("%s: reset removed %s:\n%s", h, want, now)
			}
		}
		if imagesLine(now) != imagesLine(kept[h]) {
			t.Errorf("%s: images before reset %q, after %q", h, imagesLine(kept[h]), imagesLine(now))
		}
		kept[h] = now
	}
	for _, f := range []string{"admin.conf", "bootstrap-token"} {
		if _, err := os.Stat(filepath.Join(r.state, f)); !os.IsNotExist(err) {
			t.Errorf("state %s still there: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(r.state, "pki", "ca.key")); err != nil {
		t.Errorf("PKI not kept: %v", err)
	}

	// 4. Reset again: nothing to do, nothing restarted.
	assertNothingDone("second reset", r.run(ctx, "second reset", reset))
	for _, h := range hosts {
		if now := r.exec(ctx, h, keptScript); now != kept[h] {
			t.Errorf("%s: second reset changed what it keeps (containerd restarted?):\nbefore %q\nafter  %q", h, kept[h], now)
		}
	}

	// 5. A host whose containerd is down (apply stopped before it ran): reset still succeeds.
	r.exec(ctx, worker, "systemctl stop containerd")
	if msg := r.run(ctx, "reset with containerd stopped", reset).hostLines()["containers"][worker]; msg != "containerd not running: no containers to remove" {
		t.Errorf("reset with containerd stopped on %s: %q", worker, msg)
	}
	r.exec(ctx, worker, "systemctl start containerd")

	// 6. Apply again: the cluster comes back on the same CA, nothing to ship.
	ca, err := os.ReadFile(filepath.Join(r.state, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	r.run(ctx, "apply after reset", apply)
	if again, err := os.ReadFile(filepath.Join(r.state, "pki", "ca.crt")); err != nil || string(again) != string(ca) {
		t.Errorf("apply after reset did not reuse the CA (%v)", err)
	}
	for _, h := range hosts {
		if out := r.exec(ctx, h, "systemctl is-active kubelet"); strings.TrimSpace(out) != "active" {
			t.Errorf("%s: kubelet %q after the second apply", h, out)
		}
	}
	nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("cluster after apply again: %v", err)
	}
	var names []string
	for _, n := range nodes.Items {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, hosts) {
		t.Errorf("nodes %v after apply again, want %v", names, hosts)
	}
}

func imagesLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "images ") {
			return l
		}
	}
	return ""
}
