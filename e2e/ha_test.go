package e2e

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/release"
)

// TestHAControlPlaneGrowsSurvivesAMasterAndShrinks: a cluster behind the lab's load balancer
// starts with one master; two more masters added to the inventory join its stacked etcd on the
// next apply; the three masters are upgraded by one minor, one at a time, while the API is
// probed through the load balancer (etcd 3.6 → 3.7 on the way); certificates are renewed
// under load, one master at a time (the CA rotation under load is TestUpgradeAcrossTwoMinors',
// on one master). Then the load balancer leaves the inventory: the nodes move to
// their local API proxies and the workstation to a virtual IP the masters hold in turn; a
// fourth master joins; the master holding the VIP is stopped, and the nodes, a new Deployment
// and the VIP carry on without it. Then the cluster shrinks by editing the inventory: the dead
// master, then two live ones, are removed with apply --prune (etcd member first, 4 -> 3 -> 1
// members, never losing quorum), and the proxies and the VIP are retired with one master left.
func TestHAControlPlaneGrowsSurvivesAMasterAndShrinks(t *testing.T) {
	testenv.Require(t, lab.Prerequisites())
	inLane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	all := release.All()
	from, to := all[len(all)-2].Kubernetes, all[len(all)-1].Kubernetes
	c := newCluster(ctx, t, "ha", from, lab.Options{Hosts: 6, Masters: 3, LoadBalancer: true, VIP: true}, to)
	h := c.lab.Hosts // masters h[0..2], workers h[3], h[4]; h[5] a fourth master later
	workers := h[3:5]

	c.step("one-master", func(t *testing.T) {
		c.writeInventory(h[:1], workers)
		if out, err := c.run("apply", "--timeout", "4m"); err != nil {
			t.Fatalf("apply with one master: %v\n%s", err, out)
		}
	})

	// etcd's member list, read on the first master (through the load balancer, which may still
	// send a request to a master just removed: a few tries).
	etcdMembers := func() string {
		c.t.Helper()
		var members string
		var err error
		for try := 0; try < 20; try++ {
			members, err = c.kubectl(ctx, "-n", "kube-system", "exec", "etcd-"+h[0].Name, "--", "etcdctl",
				"--endpoints=https://127.0.0.1:2379", "--cacert=/etc/kubernetes/pki/etcd/ca.crt",
				"--cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt", "--key=/etc/kubernetes/pki/etcd/healthcheck-client.key",
				"member", "list")
			if err == nil {
				return members
			}
			time.Sleep(3 * time.Second)
		}
		c.t.Fatalf("etcd members: %v\n%s", err, members)
		return ""
	}

	c.step("three-masters", func(t *testing.T) {
		c.writeInventory(h[:3], workers)
		out, err := c.run("apply", "--timeout", "4m")
		if err != nil {
			t.Fatalf("apply with three masters: %v\n%s", err, out)
		}
		if !strings.Contains(out, "joins the running etcd cluster") {
			t.Errorf("the new masters did not join the running etcd cluster:\n%s", out)
		}
		if members := etcdMembers(); strings.Count(members, ", started, ") != 3 {
			t.Fatalf("etcd members:\n%s", members)
		}
		nodes, err := c.client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil || len(nodes.Items) != 5 {
			t.Fatalf("nodes: %v, %v", nodes, err)
		}
		for _, n := range nodes.Items {
			if !nodeReady(&n) {
				t.Errorf("node %s is not Ready", n.Name)
			}
		}
	})

	c.step("upgrade", func(t *testing.T) {
		// One minor up, one master at a time; the API answers through the load balancer.
		k := c.client()
		api := probeAPI(ctx, k)
		c.version = to
		c.writeInventory(h[:3], workers)
		start := time.Now()
		out, err := c.run("apply", "--timeout", "5m", "--worker-batch", "2")
		failed, down := api.stop()
		if err != nil {
			t.Fatalf("upgrade %s → %s with three masters: %v\n%s", from, to, err, out)
		}
		if !strings.Contains(out, "2 workers, 2 at a time") {
			t.Errorf("apply --worker-batch 2 did not upgrade the two workers together:\n%s", out)
		}
		var hops []string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "control plane at ") || strings.Contains(l, " drained, uncordoned") || strings.Contains(l, "upgrade ") {
				hops = append(hops, strings.TrimSpace(l))
			}
		}
		longest := api.longestOutage()
		t.Logf("upgrade %s → %s of 3 masters + 2 workers took %s; API probes through the load balancer (every 200 ms, %s timeout): %d failed, about %s without an answer, the longest outage %s; the slowest answer %s%s\n%s", from, to, time.Since(start).Round(time.Second), probeTimeout, failed, down.Round(100*time.Millisecond), longest.Round(100*time.Millisecond), api.slowestAnswer().Round(100*time.Millisecond), api.outages(), strings.Join(hops, "\n"))
		// Measured on this 2-core lab: 3 failed reads, one per master, each a read that the load
		// balancer sent to the master being upgraded and that waited on its restarting etcd member
		// beyond the then 2 s timeout (docs/upgrades.md). 45–90 failed and 29–31 s before the load
		// balancer checked /readyz and closed a master's connections when it marked it down. The
		// target is none; this bound catches the load balancer sending requests to a master being
		// upgraded.
		if longest > 15*time.Second {
			t.Errorf("the API did not answer through the load balancer for %s in a row during the upgrade (%d failed probes); want it answering throughout, one master at a time", longest, failed)
		}
		nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes.Items {
			if n.Status.NodeInfo.KubeletVersion != to || !nodeReady(&n) {
				t.Errorf("node %s after the upgrade: %s, Ready %v", n.Name, n.Status.NodeInfo.KubeletVersion, nodeReady(&n))
			}
		}
		if members := etcdMembers(); strings.Count(members, ", started, ") != 3 {
			t.Errorf("etcd members after the upgrade:\n%s", members)
		}
	})

	// Certificates renewed under load.
	c.step("renew", func(t *testing.T) { c.renewUnderLoad(ctx, h[:5]) })

	// A setting that changes every API server's manifest: the masters roll one at a time.
	c.step("rolling-setting", func(t *testing.T) { c.rollSettingUnderLoad(ctx, h[:3], workers) })

	// The key that encrypts Secrets, rotated under the same load.
	c.step("rotate-key", func(t *testing.T) { c.rotateKeyUnderLoad(ctx, h[:3]) })

	// From here on the checks go through the first master's address (the API server
	// certificates lose the load balancer's; the VIP is checked on its own).
	var k kubernetes.Interface
	c.step("local-proxies-and-vip", func(t *testing.T) {
		// The load balancer leaves the inventory: every node moves to its local API proxy, all of
		// them Ready throughout, none re-joining; the workstation moves to the virtual IP, which one
		// master holds (issue 16).
		c.localProxy, c.vip = true, c.lab.VIP
		c.writeInventory(h[:3], workers)
		watch := watchNotReady(ctx, c.clientAt(h[0].Address+":6443"))
		start := time.Now()
		out, err := c.run("apply", "--timeout", "4m")
		notReady := watch.stop()
		if err != nil {
			t.Fatalf("apply moving to the local API proxies and the VIP: %v\n%s", err, out)
		}
		t.Logf("moved from the load balancer to the node-local API proxies and the VIP %s in %s; nodes seen NotReady meanwhile (every second): %v, as %v", c.vip, time.Since(start).Round(time.Second), notReady, watch.how)
		// Every kubelet restarts here, onto its proxy. A kubelet just started may post NotReady
		// for a second or two, before its first check of the runtime (CI at 9c4420f saw a master
		// so for 2 s): it reached the API to say so. A node the API stopped hearing from is what
		// the move must never cause.
		if lost := watch.lostTheAPI(); len(lost) > 0 {
			t.Errorf("nodes lost the API while moving to the local API proxies: %v (%v)\n%s", lost, watch.how, out)
		}
		c.checkAPIProxies(ctx, h[:5], h[:3])
		if strings.Contains(out, "joins the cluster") {
			t.Errorf("a node re-joined while moving to the local API proxies:\n%s", out)
		}
		k = c.clientAt(h[0].Address + ":6443")
		c.checkVIP(ctx, k, h[:3])
	})

	// The cluster and etcd CAs rotated with the proxies and the VIP in use: no read fails
	// through the load balancer or a proxy.
	c.step("rotate-ca", func(t *testing.T) {
		c.rotateCAEveryWay(ctx, h[:3], workers[0])
		k = c.clientAt(h[0].Address + ":6443") // trusts the new CA
	})

	// A fourth master joins: every proxy follows, no kubelet restarts; it stands by for the VIP.
	pids := c.kubeletPIDs(ctx, h[:5])
	four := []lab.Host{h[0], h[1], h[2], h[5]}
	var holder string
	c.step("fourth-master", func(t *testing.T) {
		c.writeInventory(four, workers)
		if out, err := c.run("apply", "--timeout", "4m"); err != nil {
			t.Fatalf("apply adding the fourth master %s: %v\n%s", h[5].Name, err, out)
		}
		c.checkAPIProxies(ctx, h, four)
		c.checkKubeletsKept(ctx, pids, h[:5])
		holder = c.checkVIP(ctx, k, four)
	})

	write := func(name string) {
		c.t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := k.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			return err == nil, nil
		})
		if err != nil {
			c.t.Fatalf("no write %s through the first master: %v", name, err)
		}
	}
	var dead lab.Host
	var three []lab.Host
	c.step("vip-holder-lost", func(t *testing.T) {
		// The master holding the VIP goes away (never the first, which the checks use: the VIP is
		// handed over first if it holds it): within 30 s every other node has renewed its lease
		// through its proxy and is Ready, a new Deployment's pods run, and the VIP answers from
		// another master. The API is probed through a worker's proxy and through the VIP, each
		// probe on a new connection as kubectl makes, meanwhile.
		if holder == h[0].Name {
			c.handOverVIP(ctx, k, h[0])
			holder = c.vipHolder(ctx, k)
		}
		di := slices.IndexFunc(four, func(m lab.Host) bool { return m.Name == holder })
		if di < 1 {
			t.Fatalf("the VIP's holder %q is not one of %s, %s, %s", holder, h[1].Name, h[2].Name, h[5].Name)
		}
		dead = four[di]
		three = slices.Delete(slices.Clone(four), di, di+1)
		viaProxy := c.clientThrough(ctx, workers[0])
		api := probeAPI(ctx, viaProxy)
		viaVIP := probeAPIWith(ctx, c.freshVIPClient())
		stopped := time.Now()
		if err := c.lab.StopHost(ctx, dead.Name); err != nil {
			t.Fatal(err)
		}
		movedAt := c.watchVIPMoved(ctx, k, dead.Name)
		var others []string
		for _, n := range append(slices.Clone(three), workers...) {
			others = append(others, n.Name)
		}
		renewed := waitLeasesRenewed(ctx, t, k, others, stopped)
		r, err := release.For(to)
		if err != nil {
			t.Fatal(err)
		}
		running := waitDeploymentRuns(ctx, t, k, "after-"+dead.Name, "registry.k8s.io/pause:"+r.Pause, 2)
		moved := <-movedAt
		if moved.IsZero() {
			t.Fatalf("the VIP %s did not move off %s within 2 minutes (Lease holder %q)", c.vip, dead.Name, c.vipHolder(ctx, k))
		}
		failed, down := api.stop()
		vipFailed, vipDown := viaVIP.stop()
		t.Logf("%s (holding the VIP) stopped: every other node renewed its lease and is Ready after %s; a new Deployment's 2 pods ran after %s; API probes through %s's proxy (every 200 ms): %d failed (about %s), the longest outage %s",
			dead.Name, renewed.Sub(stopped).Round(100*time.Millisecond), running.Sub(stopped).Round(100*time.Millisecond), workers[0].Name, failed, down.Round(100*time.Millisecond), api.longestOutage().Round(100*time.Millisecond))
		t.Logf("VIP failover: %s answered from %s after %s; API probes through the VIP (every 200 ms, a new connection each): %d failed (about %s), the longest outage %s",
			c.vip, c.vipHolder(ctx, k), moved.Sub(stopped).Round(100*time.Millisecond), vipFailed, vipDown.Round(100*time.Millisecond), viaVIP.longestOutage().Round(100*time.Millisecond))
		if d := renewed.Sub(stopped); d > 30*time.Second {
			t.Errorf("the other nodes were Ready with a renewed lease only %s after %s stopped; want within 30 s", d, dead.Name)
		}
		if d := running.Sub(stopped); d > 30*time.Second {
			t.Errorf("a new Deployment's pods ran only %s after %s stopped; want within 30 s", d, dead.Name)
		}
		if d := moved.Sub(stopped); d > 30*time.Second {
			t.Errorf("the VIP answered from another master only %s after %s stopped; want within 30 s", d, dead.Name)
		}
		if out, err := c.kubectl(ctx, "get", "nodes"); err != nil {
			t.Errorf("kubectl through the VIP after %s stopped: %v\n%s", dead.Name, err, out)
		}
		write("written-without-" + dead.Name)
	})

	c.step("prune-dead-master", func(t *testing.T) {
		// Shrink: the dead master leaves the inventory and is pruned; its host cannot be reached,
		// its etcd member and node are removed all the same. Every proxy follows, no kubelet
		// restarts.
		c.writeInventory(three, workers)
		out, err := c.run("apply", "--prune", "--timeout", "4m")
		if err != nil {
			t.Fatalf("apply --prune of the dead master %s: %v\n%s", dead.Name, err, out)
		}
		if !strings.Contains(out, "etcd member removed") || !strings.Contains(out, "host not reset (unreachable") {
			t.Errorf("apply --prune of the dead master:\n%s", out)
		}
		if members := etcdMembers(); strings.Count(members, ", started, ") != 3 || strings.Contains(members, dead.Name) {
			t.Errorf("etcd members after removing %s:\n%s", dead.Name, members)
		}
		c.checkAPIProxies(ctx, append(slices.Clone(three), workers...), three)
		var kept []lab.Host
		for _, n := range h[:5] {
			if n.Name != dead.Name {
				kept = append(kept, n)
			}
		}
		c.checkKubeletsKept(ctx, pids, kept)
		c.checkVIP(ctx, k, three)
	})

	c.step("prune-to-one-master", func(t *testing.T) {
		// Then two live ones: 3 -> 1 members; the remaining master runs its controllers alone
		// again, and with one master and no endpoint the nodes use it: the proxies and the VIP are
		// retired.
		c.vip = ""
		c.writeInventory(h[:1], workers)
		out, err := c.run("apply", "--prune", "--timeout", "4m")
		if err != nil {
			t.Fatalf("apply --prune of %s and %s: %v\n%s", three[1].Name, three[2].Name, err, out)
		}
		t.Logf("apply --prune of %s and %s:\n%s", three[1].Name, three[2].Name, out)
		if !strings.Contains(out, "API proxy stopped and removed") || !strings.Contains(out, "kforge-vip stopped and removed") || strings.Count(out, "etcd member removed") != 2 {
			t.Errorf("apply --prune down to one master: want the API proxies and kforge-vip retired and two etcd members removed:\n%s", out)
		}
		if members := etcdMembers(); strings.Count(members, ", started, ") != 1 {
			t.Errorf("etcd members after removing %s and %s:\n%s", three[1].Name, three[2].Name, members)
		}
		for _, gone := range []string{dead.Name, three[1].Name, three[2].Name} {
			if _, err := k.CoreV1().Nodes().Get(ctx, gone, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("node %s after the prune: %v", gone, err)
			}
		}
		for _, n := range three[1:] {
			if left := c.exec(ctx, n.Name, `systemctl is-active -q kubelet && echo "kubelet running"
for p in /etc/kubernetes /var/lib/etcd /var/lib/kubelet /etc/systemd/system/kforge-apiproxy.service /etc/systemd/system/kforge-vip.service; do [ -e $p ] && echo "left $p"; done
ip -o -4 addr show | grep -F " inet `+c.lab.VIP+`/" && echo "VIP left"
true`); left != "" {
				t.Errorf("%s after apply --prune:\n%s", n.Name, left)
			}
		}
		write("written-with-one-master")
		// Until the other masters were pruned, the first kept leader election on (two
		// controller-managers must never both be active); the next apply turns it off.
		if strings.Contains(out, "restart kube-controller-manager") {
			t.Errorf("the prune restarted the controller-manager while other masters still ran:\n%s", out)
		}
		out, err = c.run("apply", "--timeout", "4m")
		if err != nil || !regexp.MustCompile(`restart [^\n]*kube-controller-manager-`+h[0].Name).MatchString(out) {
			t.Errorf("apply with one master left: %v\n%s", err, out)
		}
		for _, n := range []lab.Host{h[0], workers[0], workers[1]} {
			if left := c.exec(ctx, n.Name, "grep 'server:' /etc/kubernetes/kubelet.conf; [ -e /etc/systemd/system/kforge-apiproxy.service ] && echo 'API proxy left'; [ -e /etc/systemd/system/kforge-vip.service ] && echo 'kforge-vip left'; true"); strings.TrimSpace(left) != "server: https://"+h[0].Address+":6443" {
				t.Errorf("%s with one master left: %s", n.Name, left)
			}
		}
	})
}

// notReadyWatch records the nodes seen NotReady, listing them every second; watchNotReady's
// also records how (how: by node, the Ready condition's "status reason: message", counted).
type notReadyWatch struct {
	done  chan struct{}
	ended chan struct{}
	seen  map[string]int
	how   map[string]map[string]int
}

func watchNotReady(ctx context.Context, k kubernetes.Interface) *notReadyWatch {
	how := map[string]map[string]int{} // written by the watch's goroutine alone, read after stop
	w := watchNodes(ctx, k, func(n *corev1.Node) bool {
		if nodeReady(n) {
			return false
		}
		key := "no Ready condition"
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				key = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
			}
		}
		if how[n.Name] == nil {
			how[n.Name] = map[string]int{}
		}
		how[n.Name][key]++
		return true
	})
	w.how = how
	return w
}

// lostTheAPI are the nodes seen NotReady otherwise than by their own kubelet's word: a kubelet
// that posts NotReady (False, reason KubeletNotReady) reaches the API server; one the API stops
// hearing from is marked Unknown by the node controller.
func (w *notReadyWatch) lostTheAPI() map[string]int {
	lost := map[string]int{}
	for node, hows := range w.how {
		for how, n := range hows {
			if !strings.HasPrefix(how, "False KubeletNotReady:") {
				lost[node] += n
			}
		}
	}
	return lost
}

// watchNodes records, by node, how many times a listing (every second) found it as seen says.
func watchNodes(ctx context.Context, k kubernetes.Interface, seen func(*corev1.Node) bool) *notReadyWatch {
	w := &notReadyWatch{done: make(chan struct{}), ended: make(chan struct{}), seen: map[string]int{}}
	go func() {
		defer close(w.ended)
		for {
			if nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
				for i := range nodes.Items {
					if seen(&nodes.Items[i]) {
						w.seen[nodes.Items[i].Name]++
					}
				}
			}
			select {
			case <-w.done:
				return
			case <-time.After(time.Second):
			}
		}
	}()
	return w
}

// stop ends the watch and returns, by node, how many times it was seen NotReady.
func (w *notReadyWatch) stop() map[string]int {
	close(w.done)
	<-w.ended
	return w.seen
}
