package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/release"
	"github.com/kforge/kforge/tasks"
)

// TestExternalEtcd: a cluster whose etcd runs on three hosts of its own (the inventory's etcd
// group), two masters behind the nodes' local API proxies, one worker. The nodes are Ready and
// a workload runs; the masters run no etcd and their API servers list every member; etcd
// status names the three members, healthy. One etcd host is lost: the cluster goes on writing.
// A new host replaces it in the inventory, and apply --prune removes the lost member, adds the
// new one (3 healthy members again) and rolls the API servers, none of which names the lost
// host any more. reset leaves the etcd hosts clean.
func TestExternalEtcd(t *testing.T) {
	testenv.Require(t, lab.Prerequisites())
	inLane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	c := newCluster(ctx, t, "ext", release.Default(), lab.Options{Hosts: 7, Masters: 2})
	h := c.lab.Hosts // h[0..1] masters, h[2] the worker, h[3..5] etcd hosts, h[6] the replacement
	masters, workers, replacement := h[:2], h[2:3], h[6]
	c.localProxy = true
	c.etcdHosts = h[3:6]
	k := c.client
	var workload string // the workload's pod

	c.step("apply", func(t *testing.T) {
		c.writeInventory(masters, workers)
		start := time.Now()
		out, err := c.run("apply", "--timeout", "5m")
		if err != nil {
			t.Fatalf("apply with an external etcd: %v\n%s", err, out)
		}
		t.Logf("apply of 3 etcd hosts, 2 masters and a worker took %s", time.Since(start).Round(time.Second))
	})

	c.step("checks", func(t *testing.T) {
		c.checkNodes(ctx, 3)
		c.checkExternalEtcd(ctx, masters, c.etcdHosts, "")
		// A workload on the worker.
		workload = runPause(ctx, t, k(), "on-external-etcd", workers[0].Name)
	})

	lost := c.etcdHosts[2]
	var written []string // the ConfigMaps written while an etcd host was lost
	c.step("lose-an-etcd-host", func(t *testing.T) {
		// Writes every 200 ms from 3 s before the host goes away until 30 s after: the cluster
		// goes on writing with two of three members. The writes that fail while etcd elects a
		// new leader (when the lost member led) are counted, and the longest outage measured.
		w := probeWrites(ctx, k(), "written")
		time.Sleep(3 * time.Second)
		stopped := time.Now()
		if err := c.lab.StopHost(ctx, lost.Name); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Second)
		written = w.stop()
		outage := "none"
		if w.failed > 0 {
			outage = fmt.Sprintf("%s, from %s after the loss%s", w.longest.Round(100*time.Millisecond), w.outageAt.Sub(stopped).Round(100*time.Millisecond), w.firstError)
		}
		t.Logf("writes with %s lost (every 200 ms, from 3 s before to 30 s after): %d written, %d failed; the longest outage: %s", lost.Name, len(written), w.failed, outage)
		if w.longest > 15*time.Second || w.lastFailed.After(stopped.Add(20*time.Second)) || len(written) < 100 {
			t.Errorf("with %s lost the cluster stopped writing: the longest outage %s, the last failed write %s after the loss, %d writes in 33 s; want it writing within 15 s and on", lost.Name, w.longest, w.lastFailed.Sub(stopped).Round(100*time.Millisecond), len(written))
		}
		rep, code, out := c.etcdStatus()
		if code == 0 || !rep.Quorum || rep.Healthy != 2 || rep.Voters != 3 {
			t.Errorf("etcd status with an etcd host lost: exit %d, %d of %d healthy, quorum %v; want exit 1, 2 of 3, quorum\n%s", code, rep.Healthy, rep.Voters, rep.Quorum, out)
		}
	})

	c.step("replace-the-etcd-host", func(t *testing.T) {
		c.etcdHosts = []lab.Host{c.etcdHosts[0], c.etcdHosts[1], replacement}
		c.writeInventory(masters, workers)
		start := time.Now()
		out, err := c.run("apply", "--prune", "--timeout", "5m")
		if err != nil {
			t.Fatalf("apply --prune replacing %s with %s: %v\n%s", lost.Name, replacement.Name, err, out)
		}
		t.Logf("the replacement took %s:\n%s", time.Since(start).Round(time.Second), out)
		rep := c.checkExternalEtcd(ctx, masters, c.etcdHosts, lost.Address)
		// The scheduled snapshots run on the etcd hosts: the two that were there from the start
		// (more than a minute, the first's delay, ago) have taken theirs.
		for _, m := range rep.Members[:2] {
			if s := m.Snapshots; s == nil || s.Count < 1 || s.Trouble != "" {
				t.Errorf("etcd host %s's scheduled snapshots: %+v; want one taken, no trouble", m.Master, s)
			}
		}
		for _, name := range written {
			if _, err := k().CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
				t.Errorf("ConfigMap %s, written while %s was lost: %v", name, lost.Name, err)
			}
		}
		c.checkNodes(ctx, 3)
		if uid := runPause(ctx, t, k(), "on-external-etcd", workers[0].Name); uid != workload {
			t.Errorf("the workload's pod is %s after the replacement, was %s; want it running on, untouched", uid, workload)
		}
		if plan, code := c.plan(); code != 0 {
			t.Errorf("plan after the replacement: exit %d, want 0 (no changes):\n%s", code, plan)
		}
	})

	c.step("reset", func(t *testing.T) {
		if out, err := c.run("reset", "--yes"); err != nil {
			t.Fatalf("reset: %v\n%s", err, out)
		}
		for _, e := range c.etcdHosts {
			if left := strings.TrimSpace(c.exec(ctx, e.Name, "ls -A "+hostpath.EtcdDataDir+" "+hostpath.ManifestsDir+" 2>/dev/null; systemctl is-active kubelet || true")); left != "inactive" {
				t.Errorf("etcd host %s after reset: %q; want no etcd data, no manifests, kubelet inactive", e.Name, left)
			}
		}
	})
}

// checkExternalEtcd: no master runs etcd or holds the etcd CA's key, every master's API server
// names exactly the etcd hosts' members (and not gone, an address, when set), and etcd status
// reports those members, all healthy. It returns etcd status's report.
func (c *cluster) checkExternalEtcd(ctx context.Context, masters, etcdHosts []lab.Host, gone string) tasks.EtcdReport {
	t := c.t
	t.Helper()
	var want []string
	for _, e := range etcdHosts {
		want = append(want, "https://"+e.Address+":2379")
	}
	for _, m := range masters {
		if left := strings.TrimSpace(c.exec(ctx, m.Name, "ls "+hostpath.ManifestsDir+"/etcd.yaml "+hostpath.PKIDir+"/etcd/ca.key "+hostpath.EtcdDataDir+"/member 2>/dev/null || true")); left != "" {
			t.Errorf("master %s holds %s; with an external etcd it runs no member and holds no etcd CA key", m.Name, left)
		}
		api := c.exec(ctx, m.Name, "cat "+hostpath.ManifestsDir+"/kube-apiserver.yaml")
		if !strings.Contains(api, "--etcd-servers="+strings.Join(want, ",")) || gone != "" && strings.Contains(api, gone+":2379") {
			t.Errorf("master %s's API server: want --etcd-servers=%s and not %s:\n%s", m.Name, strings.Join(want, ","), gone, grepLines(api, "etcd-servers"))
		}
	}
	var rep tasks.EtcdReport
	var code int
	var out string
	for try := 0; try < 15; try++ { // a member just started may take a moment to answer with a leader
		if rep, code, out = c.etcdStatus(); code == 0 {
			break
		}
		time.Sleep(2 * time.Second)
	}
	var names []string
	for _, m := range rep.Members {
		names = append(names, m.Master)
	}
	var wantNames []string
	for _, e := range etcdHosts {
		wantNames = append(wantNames, e.Name)
	}
	if code != 0 || rep.Healthy != len(etcdHosts) || rep.Voters != len(etcdHosts) || len(rep.Others) > 0 || strings.Join(names, ",") != strings.Join(wantNames, ",") {
		t.Errorf("etcd status: exit %d, members %v, %d of %d healthy, others %v; want %v all healthy\n%s", code, names, rep.Healthy, rep.Voters, rep.Others, wantNames, out)
	}
	return rep
}

// grepLines are the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// writeProbe creates a ConfigMap every 200 ms until stopped: which were written, how many
// failed, the longest run of failures (from its first to its last), when it began and its first
// error, and when the last failure was.
type writeProbe struct {
	done, ended chan struct{}
	written     []string
	failed      int
	longest     time.Duration
	outageAt    time.Time
	lastFailed  time.Time
	firstError  string
}

func probeWrites(ctx context.Context, k kubernetes.Interface, prefix string) *writeProbe {
	w := &writeProbe{done: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(w.ended)
		var since time.Time // the current run of failures began (zero: none)
		for i := 0; ; i++ {
			name := fmt.Sprintf("%s-%d", prefix, i)
			start := time.Now()
			wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			_, err := k.CoreV1().ConfigMaps("default").Create(wctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			cancel()
			if err == nil {
				w.written = append(w.written, name)
				since = time.Time{}
			} else {
				w.failed++
				w.lastFailed = time.Now()
				if since.IsZero() {
					since = start
				}
				if d := time.Since(since); d > w.longest {
					w.longest, w.outageAt = d, since
				}
				if w.firstError == "" {
					w.firstError = "; the first failure: " + err.Error()
				}
			}
			select {
			case <-w.done:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return w
}

// stop ends the probe and returns the names written.
func (w *writeProbe) stop() []string {
	close(w.done)
	<-w.ended
	return w.written
}
