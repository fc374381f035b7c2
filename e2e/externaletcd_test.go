package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/release"
	"github.com/kforge/kforge/state"
	"github.com/kforge/kforge/tasks"
)

// TestExternalEtcd: a cluster whose etcd runs on three hosts of its own (the inventory's etcd
// group), two masters behind the nodes' local API proxies, two workers, at the newest minor but
// one. The nodes are Ready and a workload runs; the masters run no etcd and their API servers
// list every member; etcd status names the three members, healthy. One etcd host is lost: the
// cluster goes on writing. A new host replaces it in the inventory, and apply --prune removes
// the lost member, adds the new one (3 healthy members again) and rolls the API servers, none
// of which names the lost host any more. certs renew --all renews the etcd hosts' certificates,
// and certs rotate-ca --ca etcd gives them and the API servers a new etcd CA.
// An upgrade to the newest minor under load moves etcd first, member by member. Under the same
// load, etcd moves onto the masters (the etcd group dropped, with --prune) and back onto three
// other etcd hosts (the group listed again), every API object kept. Then every etcd host is
// lost, and kforge restore puts a snapshot onto three new etcd hosts with other addresses (those
// etcd moved off, reset): what was written before the snapshot is there, what came after is
// not, and the API servers list the new members only. reset leaves the etcd hosts clean.
func TestExternalEtcd(t *testing.T) {
	testenv.Require(t, lab.Prerequisites())
	inLane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	all := release.All()
	from, to := all[len(all)-2].Kubernetes, all[len(all)-1].Kubernetes
	c := newCluster(ctx, t, "ext", from, lab.Options{Hosts: 11, Masters: 2}, to)
	h := c.lab.Hosts // h[0..1] masters, h[2..3] workers, h[4..6] etcd hosts, h[7] the replacement, h[8..10] the etcd hosts moved back onto
	masters, workers, replacement := h[:2], h[2:4], h[7]
	c.localProxy = true
	c.etcdHosts = h[4:7]
	k := c.client
	var workload string // the workload's pod

	c.step("apply", func(t *testing.T) {
		c.writeInventory(masters, workers)
		start := time.Now()
		out, err := c.run("apply", "--timeout", "5m")
		if err != nil {
			t.Fatalf("apply with an external etcd: %v\n%s", err, out)
		}
		t.Logf("apply of 3 etcd hosts, 2 masters and 2 workers took %s", time.Since(start).Round(time.Second))
	})

	c.step("checks", func(t *testing.T) {
		c.checkNodes(ctx, 4)
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
		c.checkNodes(ctx, 4)
		if uid := runPause(ctx, t, k(), "on-external-etcd", workers[0].Name); uid != workload {
			t.Errorf("the workload's pod is %s after the replacement, was %s; want it running on, untouched", uid, workload)
		}
		if plan, code := c.plan(); code != 0 {
			t.Errorf("plan after the replacement: exit %d, want 0 (no changes):\n%s", code, plan)
		}
	})

	c.step("renew", func(t *testing.T) {
		// certs renew --all re-issues the etcd hosts' certificates too, one host at a time, with
		// no restart of etcd (it reads them at every handshake); certs check then reads every
		// host's, the etcd hosts' included, and finds nothing wrong.
		serial := func(e lab.Host) string {
			return strings.TrimSpace(c.exec(ctx, e.Name, "sha256sum "+hostpath.PKIDir+"/etcd/server.crt "+hostpath.PKIDir+"/etcd/peer.crt "+hostpath.PKIDir+"/etcd/healthcheck-client.crt"))
		}
		before := map[string]string{}
		for _, e := range c.etcdHosts {
			before[e.Name] = serial(e)
		}
		out, err := c.run("certs", "renew", "--all", "--timeout", "5m")
		if err != nil {
			t.Fatalf("certs renew --all: %v\n%s", err, out)
		}
		for _, e := range c.etcdHosts {
			if after := serial(e); after == before[e.Name] || strings.Count(after, "\n") != 2 {
				t.Errorf("etcd host %s's certificates after certs renew --all:\n%s\nbefore:\n%s", e.Name, after, before[e.Name])
			}
			if !strings.Contains(out, "etcd-server@"+e.Name) {
				t.Errorf("certs renew --all does not name %s's etcd-server certificate:\n%s", e.Name, out)
			}
		}
		c.checkExternalEtcd(ctx, masters, c.etcdHosts, lost.Address)
		js, err := c.runJSON("certs", "check")
		if err != nil {
			t.Fatalf("certs check after the renewal: %v\n%s", err, js)
		}
		var rep struct{ Certificates []pki.Inspection }
		if err := json.Unmarshal([]byte(lastLine(js)), &rep); err != nil {
			t.Fatal(err)
		}
		onEtcdHosts := 0
		for _, in := range rep.Certificates {
			if slices.ContainsFunc(c.etcdHosts, func(e lab.Host) bool { return e.Name == in.Where }) {
				onEtcdHosts++
			}
			if in.Error != "" || len(in.Drift) > 0 {
				t.Errorf("certs check after the renewal: %s %s (%s): drift %v, %s", in.Where, in.Name, in.File, in.Drift, in.Error)
			}
		}
		if onEtcdHosts < 3*len(c.etcdHosts) {
			t.Errorf("certs check read %d certificates on the etcd hosts; want each one's CA, serving, peer and health-check certificates", onEtcdHosts)
		}
		c.checkNodes(ctx, 4)
	})

	c.step("rotate-etcd-ca", func(t *testing.T) {
		// certs rotate-ca --ca etcd moves the etcd hosts (one at a time in each phase, before the
		// masters) and the API servers to a new etcd CA: afterwards every etcd host and master
		// holds the same new etcd CA certificate, the members are healthy and the nodes Ready.
		ca := func(n lab.Host) string {
			return strings.Fields(c.exec(ctx, n.Name, "sha256sum "+hostpath.PKIDir+"/etcd/ca.crt") + " -")[0]
		}
		before := ca(c.etcdHosts[0])
		start := time.Now()
		out, err := c.run("certs", "rotate-ca", "--ca", "etcd", "--timeout", "5m")
		if err != nil {
			// At 0a81bb4+ in CI an etcd host's member was not ready within 5 minutes after its
			// reissued certificates landed; its etcd log is what says why.
			c.fatalWithMasters(ctx, append(slices.Clone(c.etcdHosts), masters...), "certs rotate-ca --ca etcd: %v\n%s", err, out)
		}
		t.Logf("certs rotate-ca --ca etcd on 3 etcd hosts and 2 masters took %s:\n%s", time.Since(start).Round(time.Second), out)
		after := ca(c.etcdHosts[0])
		for _, n := range append(slices.Clone(c.etcdHosts), masters...) {
			if got := ca(n); got == before || got != after {
				t.Errorf("%s's etcd CA certificate after the rotation: sha256 %s; want the new one (%s), not the old (%s)", n.Name, got, after, before)
			}
		}
		c.checkExternalEtcd(ctx, masters, c.etcdHosts, lost.Address)
		c.checkNodes(ctx, 4)
	})

	c.step("upgrade", func(t *testing.T) {
		// One minor up under load: etcd first, one member at a time, each started anew and
		// ready before the next, then the masters one at a time, then the workers; the
		// Service answers throughout.
		k := k()
		agent := buildAgentImage(t, t.TempDir())
		for _, n := range append(slices.Clone(masters), workers...) {
			c.importImage(ctx, n.Name, agent)
		}
		ok0, failed0 := startLoad(ctx, t, k, masters[0].Name)
		api := probeAPI(ctx, k)
		c.version = to
		c.writeInventory(masters, workers)
		start := time.Now()
		out, err := c.run("apply", "--timeout", "5m")
		apiFailed, _ := api.stop()
		if err != nil {
			t.Fatalf("upgrade %s → %s with an external etcd: %v\n%s", from, to, err, out)
		}
		ok, failed := proberCounts(ctx, t, k)
		t.Logf("upgrade %s → %s of 3 etcd hosts, 2 masters and 2 workers took %s; Service probes (every 100 ms): %d answered, %d failed; API probes through the first master (every 200 ms): %d failed, the longest outage %s%s",
			from, to, time.Since(start).Round(time.Second), ok-ok0, failed-failed0, apiFailed, api.longestOutage().Round(100*time.Millisecond), api.outages())
		if failed != failed0 {
			t.Errorf("the Service failed %d requests during the upgrade; want none", failed-failed0)
		}
		etcdAt, mastersAt := strings.Index(out, "upgrade-etcd-"+to), strings.Index(out, "upgrade-masters-"+to)
		if etcdAt < 0 || mastersAt < etcdAt {
			t.Errorf("the upgrade did not move etcd before the masters (upgrade-etcd-%s, then upgrade-masters-%s):\n%s", to, to, out)
		}
		r, err := release.For(to)
		if err != nil {
			t.Fatal(err)
		}
		rep := c.checkExternalEtcd(ctx, masters, c.etcdHosts, lost.Address)
		for _, m := range rep.Members {
			if "v"+m.Version != r.Etcd {
				t.Errorf("etcd member on %s runs %s after the upgrade, want %s", m.Master, m.Version, r.Etcd)
			}
		}
		c.checkNodes(ctx, 4)
	})

	// Moving etcd, both ways, under load: the Service's prober (on the first master, from the
	// upgrade) and API reads through the worker's node-local proxy count failures; every API
	// object from before is there after.
	var movedOff []lab.Host // the etcd hosts etcd moves off, reset; later the restore's new hosts
	// gone are the objects the move must remove: the etcd mirror pods of the masters it moves off.
	moveUnderLoad := func(t *testing.T, what string, gone []string, args ...string) {
		t.Helper()
		k := c.client()
		ok0, failed0 := proberCounts(ctx, t, k)
		before := c.objects(ctx)
		api := probeAPI(ctx, c.clientThrough(ctx, workers[0]))
		start := time.Now()
		out, err := c.run(append([]string{"apply", "--timeout", "5m"}, args...)...)
		apiFailed, _ := api.stop()
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, out)
		}
		ok, failed := proberCounts(ctx, t, k)
		t.Logf("%s took %s; Service probes (every 100 ms): %d answered, %d failed; API reads through %s's proxy (every 200 ms): %d failed, the longest outage %s%s\n%s",
			what, time.Since(start).Round(time.Second), ok-ok0, failed-failed0, workers[0].Name, apiFailed, api.longestOutage().Round(100*time.Millisecond), api.outages(), out)
		if failed != failed0 {
			t.Errorf("the Service failed %d requests while %s; want none", failed-failed0, what)
		}
		after := c.objects(ctx)
		var lost []string
		for _, o := range before {
			if !slices.Contains(after, o) {
				lost = append(lost, o)
			}
		}
		t.Logf("%d API objects before, %d after", len(before), len(after))
		if !slices.Equal(lost, gone) {
			t.Errorf("objects from before %s that are gone: %v; want those and only those: %v", what, lost, gone)
		}
		c.checkNodes(ctx, 4)
		if plan, code := c.plan(); code != 0 {
			t.Errorf("plan after %s: exit %d, want 0 (no changes):\n%s", what, code, plan)
		}
	}

	c.step("move-etcd-onto-the-masters", func(t *testing.T) {
		// The inventory drops the etcd group: with --prune (refused without) the masters' members
		// join one at a time, the API servers turn to their own, the etcd hosts' members leave
		// and the hosts are reset.
		movedOff = c.etcdHosts
		c.etcdHosts = nil
		c.writeInventory(masters, workers)
		if out, err := c.run("apply", "--timeout", "1m"); err == nil || !strings.Contains(out, "--prune") {
			t.Errorf("apply without --prune dropping the etcd group: %v; want a refusal that names --prune\n%s", err, out)
		}
		moveUnderLoad(t, "moving etcd from 3 etcd hosts onto 2 masters", nil, "--prune")
		c.checkStackedEtcd(ctx, masters)
		for _, e := range movedOff {
			if left := strings.TrimSpace(c.exec(ctx, e.Name, "ls -A "+hostpath.EtcdDataDir+" "+hostpath.ManifestsDir+" 2>/dev/null; systemctl is-active kubelet || true")); left != "inactive" {
				t.Errorf("etcd host %s after etcd moved off it (pruned): %q; want no etcd data, no manifests, kubelet inactive", e.Name, left)
			}
		}
	})

	c.step("move-etcd-onto-etcd-hosts", func(t *testing.T) {
		// Back: an etcd group of the three hosts just pruned. Their members join the masters'
		// cluster one at a time, the API servers turn to them, the masters' members leave.
		c.etcdHosts = h[8:11]
		c.writeInventory(masters, workers)
		var mirrors []string
		for _, m := range masters {
			mirrors = append(mirrors, "pods. kube-system/etcd-"+m.Name)
		}
		moveUnderLoad(t, "moving etcd from 2 masters onto 3 etcd hosts", mirrors)
		c.checkExternalEtcd(ctx, masters, c.etcdHosts, "127.0.0.1")
	})

	c.step("restore-onto-new-etcd-hosts", func(t *testing.T) {
		k := k()
		mk := func(name string) {
			t.Helper()
			if _, err := k.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		mk("before-snapshot")
		if out, err := c.run("etcd", "snapshot"); err != nil {
			t.Fatalf("kforge etcd snapshot: %v\n%s", err, out)
		}
		snaps, err := state.At(c.state).ListSnapshots()
		if err != nil || len(snaps) == 0 {
			t.Fatalf("snapshots: %v %v", snaps, err)
		}
		snap := snaps[len(snaps)-1].File
		mk("after-snapshot")
		old := c.etcdHosts
		for _, e := range old {
			if err := c.lab.StopHost(ctx, e.Name); err != nil {
				t.Fatal(err)
			}
		}
		c.etcdHosts = movedOff // reset when etcd moved off them: new to this cluster, with other addresses
		c.writeInventory(masters, workers)
		if out, err := c.run("apply", "--timeout", "1m"); err == nil || !strings.Contains(out, "keeps none of the cluster's etcd hosts") {
			t.Errorf("apply onto three new etcd hosts: %v; want a refusal (they would start a new, empty etcd)\n%s", err, out)
		}
		start := time.Now()
		out, err := c.run("restore", "--snapshot", snap, "--timeout", "6m")
		if err != nil {
			t.Fatalf("kforge restore onto 3 new etcd hosts: %v\n%s", err, out)
		}
		t.Logf("restore onto 3 new etcd hosts took %s (to all nodes Ready):\n%s", time.Since(start).Round(time.Second), out)
		c.checkExternalEtcd(ctx, masters, c.etcdHosts, "") // the API servers list exactly the new members
		k = c.client()
		// A diagnostic, not an assertion: reading the log of the load's prober (on the first
		// master) after the restore was refused "for an unknown reason" for over 3 minutes at
		// aff6a82.
		if p, err := k.CoreV1().Pods("default").Get(ctx, "prober", metav1.GetOptions{}); err == nil {
			_, lerr := k.CoreV1().Pods("default").GetLogs("prober", &corev1.PodLogOptions{}).Do(ctx).Raw()
			t.Logf("the prober after the restore: phase %s, container statuses %+v; reading its log: %v", p.Status.Phase, p.Status.ContainerStatuses, lerr)
		}
		if _, err := k.CoreV1().ConfigMaps("default").Get(ctx, "before-snapshot", metav1.GetOptions{}); err != nil {
			t.Errorf("ConfigMap created before the snapshot: %v", err)
		}
		if _, err := k.CoreV1().ConfigMaps("default").Get(ctx, "after-snapshot", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ConfigMap created after the snapshot: err = %v, want not found", err)
		}
		c.checkNodes(ctx, 4)
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

// checkStackedEtcd: every master runs an etcd member and its API server uses it alone, and etcd
// status reports the masters' members, all healthy.
func (c *cluster) checkStackedEtcd(ctx context.Context, masters []lab.Host) {
	t := c.t
	t.Helper()
	var want []string
	for _, m := range masters {
		want = append(want, m.Name)
		api := c.exec(ctx, m.Name, "cat "+hostpath.ManifestsDir+"/kube-apiserver.yaml; ls "+hostpath.ManifestsDir)
		if !strings.Contains(api, "--etcd-servers=https://127.0.0.1:2379\n") || !strings.Contains(api, "etcd.yaml") {
			t.Errorf("master %s: want its own etcd member (etcd.yaml) and its API server on it alone:\n%s", m.Name, grepLines(api, "etcd"))
		}
	}
	rep, code, out := c.etcdStatus()
	var names []string
	for _, m := range rep.Members {
		names = append(names, m.Master)
	}
	if code != 0 || rep.Healthy != len(masters) || rep.Voters != len(masters) || len(rep.Others) > 0 || !slices.Equal(names, want) {
		t.Errorf("etcd status: exit %d, members %v, %d of %d healthy, others %v; want %v all healthy\n%s", code, names, rep.Healthy, rep.Voters, rep.Others, want, out)
	}
}

// objects names every API object the cluster serves a list of (group/resource namespace/name),
// sorted; events and leases aside (they come and go by themselves), and the metrics API's
// (measured, not stored).
func (c *cluster) objects(ctx context.Context) []string {
	t := c.t
	t.Helper()
	cfg, err := c.adminConfig()
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lists, err := disc.ServerPreferredResources()
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	var out []string
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			if !slices.Contains(r.Verbs, "list") || r.Name == "events" || r.Name == "leases" || gv.Group == "metrics.k8s.io" {
				continue
			}
			items, err := dyn.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("list %s: %v", r.Name, err)
			}
			for _, it := range items.Items {
				out = append(out, fmt.Sprintf("%s.%s %s/%s", r.Name, gv.Group, it.GetNamespace(), it.GetName()))
			}
		}
	}
	slices.Sort(out)
	return out
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
