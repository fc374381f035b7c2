package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/release"
)

// BenchmarkUpgradeVsKubeadm is issue 13's benchmark: one minor (the newest two of the
// catalogue), 1 master + 2 workers, each side on a fresh lab of its own, under the same load
// (Deployment web of 2 replicas with a PodDisruptionBudget behind a Service, a prober pod on the
// master, API probes from the workstation). Timed from the start of the upgrade to every node
// Ready at the new version:
//
//	script: kubeadm's documented procedure over OpenSSH ssh/scp on a kubeadm cluster: the new
//	        release's binaries and images staged on every host in parallel; on the master
//	        kubeadm upgrade apply, drain, the new kubelet and kubectl, restart, uncordon; then
//	        each worker in turn: drain, kubeadm upgrade node, the new kubelet, restart, uncordon
//	kforge: the inventory's kubernetesVersion raised, one `kforge apply`
//
// It prints both times, their ratio (target: kforge/script <= 0.5) and each side's failed
// Service requests and API probes.
func BenchmarkUpgradeVsKubeadm(b *testing.B) {
	testenv.Require(b, lab.Prerequisites())
	all := release.All()
	if len(all) < 2 {
		b.Skip("one minor in the catalogue")
	}
	from, to := all[len(all)-2].Kubernetes, all[len(all)-1].Kubernetes
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	dir := b.TempDir()
	kforge := buildKforge(b, dir)
	fromBundle := buildBundle(context.Background(), b, filepath.Join(dir, "from"), from)
	toBundle := buildBundle(context.Background(), b, filepath.Join(dir, "to"), to)
	bothBundle := buildBundle(context.Background(), b, filepath.Join(dir, "both"), from, to)
	agent := buildAgentImage(b, dir)
	id := os.Getpid() % 100000

	b.ResetTimer()
	script := scriptedUpgrade(ctx, b, fromBundle, toBundle, agent, filepath.Join(dir, "script-side"), fmt.Sprintf("bus%d", id), from, to)
	kf := kforgeUpgrade(ctx, b, kforge, bothBundle, agent, filepath.Join(dir, "kforge-side"), fmt.Sprintf("buk%d", id), from, to)
	b.StopTimer()

	ratio := kf.took.Seconds() / script.took.Seconds()
	b.Logf("upgrade %s -> %s of 1 master + 2 workers, until every node is Ready at %s: script %s, kforge %s, kforge/script %.2f (target <= 0.50)", from, to, to, secs(script.took), secs(kf.took), ratio)
	for _, u := range []upgradeSide{script, kf} {
		b.Logf("%s: Service prober %d answered, %d failed; API probes %d failed, longest outage %s; load average at start %s; steps: %s",
			u.name, u.ok, u.failed, u.apiFailed, u.apiLongest.Round(100*time.Millisecond), u.load, stepLine(u.steps))
	}
	if kf.failed > 0 {
		b.Errorf("kforge's upgrade: the Service prober counted %d failed requests, want 0", kf.failed)
	}
	b.ReportMetric(script.took.Seconds(), "script-s")
	b.ReportMetric(kf.took.Seconds(), "kforge-s")
	b.ReportMetric(ratio, "kforge/script")
	b.ReportMetric(float64(script.failed), "script-failed-requests")
	b.ReportMetric(float64(kf.failed), "kforge-failed-requests")
}

// upgradeSide is one side's upgrade: how long, and what the probes counted meanwhile.
type upgradeSide struct {
	name       string
	took       time.Duration
	steps      []step
	load       string
	ok, failed int // the Service prober, during the upgrade
	apiFailed  int64
	apiLongest time.Duration
}

// underLoad starts the workload on a cluster of c.lab (the agent image imported everywhere),
// runs upgrade with the probes counting, waits until every node is Ready at version, and
// returns the counts.
func underLoad(ctx context.Context, b *testing.B, c *cluster, k kubernetes.Interface, agent, name, version string, upgrade func(t *timer)) upgradeSide {
	b.Helper()
	for _, h := range c.lab.Hosts {
		c.importImage(ctx, h.Name, agent)
	}
	ok0, failed0 := startLoad(ctx, b, k, c.lab.Hosts[0].Name)
	api := probeAPI(ctx, k)
	res := upgradeSide{name: name, load: loadAvg()}
	t := &timer{last: time.Now()}
	start := t.last
	upgrade(t)
	for !atVersion(ctx, k, len(c.lab.Hosts), version) {
		sleep(ctx, b, 200*time.Millisecond, "every node Ready at "+version)
	}
	t.lap("until-all-at-" + version)
	res.took = time.Since(start)
	res.apiFailed, _ = api.stop()
	res.apiLongest = api.longestOutage()
	ok, failed := proberCounts(ctx, b, k)
	res.ok, res.failed, res.steps = ok-ok0, failed-failed0, t.steps
	return res
}

// atVersion says whether want nodes exist, all Ready and schedulable, their kubelets at version.
func atVersion(ctx context.Context, k kubernetes.Interface, want int, version string) bool {
	nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != want {
		return false
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if !nodeReady(n) || n.Spec.Unschedulable || n.Status.NodeInfo.KubeletVersion != version {
			return false
		}
	}
	return true
}

// scriptedUpgrade builds a kubeadm cluster at from (untimed) and upgrades it to to by kubeadm's
// documented procedure (kubernetes.io, "Upgrading kubeadm clusters"), scripted over OpenSSH.
func scriptedUpgrade(ctx context.Context, b *testing.B, fromBundle, toBundle, agent, dir, name, from, to string) upgradeSide {
	b.Helper()
	b.StopTimer()
	l, down := benchLab(ctx, b, name, false, 3)
	defer down()
	_, admin := kubeadmCluster(ctx, b, l, fromBundle, dir, from)
	k := clientFor(b, admin)
	c := &cluster{t: b, lab: l}
	s := newOpenSSH(l)
	master, workers := l.Hosts[0], l.Hosts[1:]
	kubectl := "kubectl --kubeconfig /etc/kubernetes/admin.conf "
	// As a careful script would: each kubectl call retried for up to 3 minutes, because the new
	// kubelet on the master replaces the static pods once more after the node is Ready, and
	// the API server is away (refused, then RBAC not warm) meanwhile.
	retried := func(cmd string) string {
		return "(for i in $(seq 90); do " + cmd + " && exit 0; sleep 2; done; exit 1)"
	}
	drain := func(node string) error {
		_, err := s.run(ctx, master.Address, retried(kubectl+"drain "+node+" --ignore-daemonsets --delete-emptydir-data --timeout 5m --pod-selector "+proberLabel+"!=prober"))
		return err
	}
	restart := "install -m 0755 /root/upgrade/kubelet /root/upgrade/kubectl /usr/local/bin/ && systemctl daemon-reload && systemctl restart kubelet"
	b.StartTimer()
	return underLoad(ctx, b, c, k, agent, "script", to, func(t *timer) {
		fail := func(step string, err error) {
			b.Helper()
			diag, _ := s.run(ctx, master.Address, kubectl+"get pods -A -o wide; "+kubectl+"get events -A --sort-by=.lastTimestamp | tail -n 40")
			b.Fatalf("script, %s: %v\nthe cluster then:\n%s", step, err, diag)
		}
		// 1. The new release's kubeadm, kubelet, kubectl and images on every host, in parallel;
		// kubeadm installed first, as the procedure says.
		errs := make([]error, len(l.Hosts))
		var wg sync.WaitGroup
		for i, h := range l.Hosts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = stageUpgrade(ctx, s, h, i == 0, toBundle)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			fail("stage", err)
		}
		t.lap("stage")
		// 2. The master: kubeadm upgrade apply, drain, kubelet and kubectl, restart, uncordon.
		if _, err := s.run(ctx, master.Address, "kubeadm upgrade apply "+to+" --yes --ignore-preflight-errors=SystemVerification"); err != nil {
			fail("kubeadm upgrade apply", err)
		}
		t.lap("kubeadm-upgrade-apply")
		if err := drain(master.Name); err != nil {
			fail("drain "+master.Name, err)
		}
		if _, err := s.run(ctx, master.Address, restart); err != nil {
			fail("kubelet on "+master.Name, err)
		}
		// "Verify the status of the cluster" before going on, as the procedure says: the new
		// kubelet restarts the static pods, and until the API server is back (its RBAC cache
		// warm) kubectl is refused ("kubernetes-admin cannot list pods").
		waitNodeAt(ctx, b, k, master.Name, to)
		if _, err := s.run(ctx, master.Address, retried(kubectl+"uncordon "+master.Name)); err != nil {
			fail("uncordon "+master.Name, err)
		}
		t.lap("master-kubelet")
		// 3. Each worker in turn.
		for _, w := range workers {
			if err := drain(w.Name); err != nil {
				fail("drain "+w.Name, err)
			}
			if _, err := s.run(ctx, w.Address, retried("kubeadm upgrade node --ignore-preflight-errors=SystemVerification")+" && "+restart); err != nil {
				fail("kubeadm upgrade node on "+w.Name, err)
			}
			if _, err := s.run(ctx, master.Address, retried(kubectl+"uncordon "+w.Name)); err != nil {
				fail("uncordon "+w.Name, err)
			}
			t.lap(w.Name)
		}
	})
}

// waitNodeAt waits until the API server is ready and node is Ready with its kubelet at version.
func waitNodeAt(ctx context.Context, b *testing.B, k kubernetes.Interface, node, version string) {
	b.Helper()
	for {
		if _, err := k.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err == nil {
			n, err := k.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err == nil && nodeReady(n) && n.Status.NodeInfo.KubeletVersion == version {
				return
			}
		}
		sleep(ctx, b, 500*time.Millisecond, node+" Ready at "+version)
	}
}

// stageUpgrade copies the new release's binaries and images to h (the master gets every image,
// a worker those it runs), installs kubeadm and imports the images.
func stageUpgrade(ctx context.Context, s openSSH, h lab.Host, master bool, bundleDir string) error {
	target := "root@" + h.Address
	if _, err := s.run(ctx, h.Address, "mkdir -p /root/upgrade/images"); err != nil {
		return err
	}
	var bins []string
	for _, f := range []string{"kubeadm", "kubelet", "kubectl"} {
		bins = append(bins, filepath.Join(bundleDir, "bin", f))
	}
	if err := s.copy(ctx, append(bins, target+":/root/upgrade/")...); err != nil {
		return err
	}
	ents, err := os.ReadDir(filepath.Join(bundleDir, "images"))
	if err != nil {
		return err
	}
	var images []string
	for _, e := range ents {
		if master || slices.Contains(workerImages, strings.TrimSuffix(e.Name(), ".tar")) {
			images = append(images, filepath.Join(bundleDir, "images", e.Name()))
		}
	}
	if err := s.copy(ctx, append(images, target+":/root/upgrade/images/")...); err != nil {
		return err
	}
	_, err = s.run(ctx, h.Address, "set -e; install -m 0755 /root/upgrade/kubeadm /usr/local/bin/kubeadm; for t in /root/upgrade/images/*.tar; do ctr -n k8s.io images import $t >/dev/null; done")
	return err
}

// kforgeUpgrade applies a cluster at from with kforge (untimed), then raises the inventory's
// kubernetesVersion to to and times one apply.
func kforgeUpgrade(ctx context.Context, b *testing.B, kforge, bundleDir, agent, dir, name, from, to string) upgradeSide {
	b.Helper()
	b.StopTimer()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	l, down := benchLab(ctx, b, name, true, 3)
	defer down()
	c := &cluster{t: b, lab: l, kforge: kforge, bundle: bundleDir, version: from, state: filepath.Join(dir, "state"), inventory: filepath.Join(dir, "kforge.yaml")}
	c.writeInventory(l.Hosts[:1], l.Hosts[1:])
	if out, err := c.run("apply", "--timeout", "4m"); err != nil {
		b.Fatalf("kforge apply at %s: %v\n%s", from, err, tailLines(out, 40))
	}
	k := c.client()
	c.version = to
	c.writeInventory(l.Hosts[:1], l.Hosts[1:])
	b.StartTimer()
	return underLoad(ctx, b, c, k, agent, "kforge", to, func(t *timer) {
		out, err := c.run("apply", "--timeout", "5m")
		if err != nil {
			b.Fatalf("kforge apply %s -> %s: %v\n%s", from, to, err, tailLines(out, 40))
		}
		keep(b, "kforge-upgrade.txt", []byte(out))
		t.lap("apply")
	})
}
