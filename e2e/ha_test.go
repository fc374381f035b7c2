package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kforge/kforge/lab"
)

// TestHAControlPlaneGrowsAndSurvivesAMaster: a cluster behind the lab's load balancer starts
// with one master; two more masters added to the inventory join its stacked etcd on the next
// apply; with the first master's host stopped, the API still answers and accepts writes
// through the load balancer.
func TestHAControlPlaneGrowsAndSurvivesAMaster(t *testing.T) {
	needIntegration(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c := newCluster(ctx, t, "ha", lab.Options{Hosts: 4, Masters: 3, LoadBalancer: true})
	h := c.lab.Hosts // masters h[0..2], worker h[3]

	c.writeInventory(h[:1], h[3:])
	if out, err := c.run("apply", "--conntrack-max-per-core", "0", "--timeout", "4m"); err != nil {
		t.Fatalf("apply with one master: %v\n%s", err, out)
	}

	c.writeInventory(h[:3], h[3:])
	out, err := c.run("apply", "--conntrack-max-per-core", "0", "--timeout", "4m")
	if err != nil {
		t.Fatalf("apply with three masters: %v\n%s", err, out)
	}
	if !strings.Contains(out, "joins the running etcd cluster") {
		t.Errorf("the new masters did not join the running etcd cluster:\n%s", out)
	}
	members, err := c.kubectl(ctx, "-n", "kube-system", "exec", "etcd-"+h[0].Name, "--", "etcdctl",
		"--endpoints=https://127.0.0.1:2379", "--cacert=/etc/kubernetes/pki/etcd/ca.crt",
		"--cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt", "--key=/etc/kubernetes/pki/etcd/healthcheck-client.key",
		"member", "list")
	if err != nil || strings.Count(members, ", started, ") != 3 {
		t.Fatalf("etcd members: %v\n%s", err, members)
	}
	k := c.client()
	nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 4 {
		t.Fatalf("nodes: %v, %v", nodes, err)
	}
	for _, n := range nodes.Items {
		if !nodeReady(&n) {
			t.Errorf("node %s is not Ready", n.Name)
		}
	}

	// The first master goes away: the other two keep etcd's quorum and serve the API.
	if err := c.lab.StopHost(ctx, h[0].Name); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := k.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "written-without-" + h[0].Name}}, metav1.CreateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("no write through the load balancer with %s stopped: %v", h[0].Name, err)
	}
}
