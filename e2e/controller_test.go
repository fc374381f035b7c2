package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/kforge/kforge/controller"
	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/release"
)

// TestControllerMakesAndKeepsACluster (issue 36): a kforge-made management cluster (1 master,
// 1 worker) runs kforge controller (its own image, two replicas, the bundle from the nodes);
// a KforgeCluster object makes a second cluster on two other hosts of the lab; adding a worker
// to the object grows it; the CLI takes the cluster over from its Secrets (plan: no changes);
// a version change upgrades it, and the leading controller is killed mid-upgrade: the other
// replica finishes the run. The status and events tell each step, and no credential appears in
// the status, the events or the controller's logs. Deleting the object leaves the hosts alone;
// an object of the same name adopts the cluster again from its state (nothing to do), and
// deleting it with deletionPolicy Reset resets the hosts and deletes the state.
func TestControllerMakesAndKeepsACluster(t *testing.T) {
	testenv.Require(t, lab.Prerequisites())
	inLane(t)
	all := release.All()
	from, to := all[len(all)-2].Kubernetes, all[len(all)-1].Kubernetes
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	c := newCluster(ctx, t, "ctl", from, lab.Options{Hosts: 5, Bare: true}, to)
	h := c.lab.Hosts
	const ns, name = "clusters", "second"

	c.step("management-cluster", func(t *testing.T) {
		c.writeInventory(h[:1], h[1:2])
		if out, err := c.run("apply", "--timeout", "5m"); err != nil {
			t.Fatalf("kforge apply (management cluster): %v\n%s", err, out)
		}
		c.checkNodes(ctx, 2)
	})

	c.step("install-controller", func(t *testing.T) {
		c.installController(ctx, h[:2])
	})

	// The second cluster's inventory, as a user would write its object: the spec is the
	// inventory, the key and known hosts come from a Secret, the bundle from the nodes.
	key, err := os.ReadFile(c.lab.IdentityFile)
	if err != nil {
		t.Fatal(err)
	}
	mgmt := c.client()
	var gen int64

	c.step("create", func(t *testing.T) {
		c.labSSHSecret(ctx, mgmt, ns)
		start := time.Now()
		gen = c.applyObject(ctx, ns, name, c.objectSpec(h[2:3], h[3:4], from))
		k := c.waitReady(ctx, ns, name, gen, 15*time.Minute)
		t.Logf("the controller made cluster %s in %s: %s", name, time.Since(start).Round(time.Second), k.Status.LastPlan)
		c.checkSecondCluster(ctx, ns, name, 2, from)
	})

	c.step("grow", func(t *testing.T) {
		start := time.Now()
		gen = c.applyObject(ctx, ns, name, c.objectSpec(h[2:3], h[3:5], from))
		c.waitReady(ctx, ns, name, gen, 10*time.Minute)
		t.Logf("the controller added a worker in %s", time.Since(start).Round(time.Second))
		c.checkSecondCluster(ctx, ns, name, 3, from)
	})

	c.step("cli-takes-over", func(t *testing.T) {
		if out, err := c.kubectl(ctx, "-n", ns, "annotate", "kforgecluster", name, controller.PausedAnnotation+"=true"); err != nil {
			t.Fatalf("pause: %v\n%s", err, out)
		}
		plan := exec.CommandContext(ctx, c.kforge, "-i", "kube://"+ns+"/"+name, "plan", "--detailed-exitcode")
		plan.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(c.state, "admin.conf"), "XDG_STATE_HOME="+t.TempDir(), "KFORGE_BUNDLE="+c.bundle)
		out, err := plan.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "No changes") {
			t.Errorf("kforge plan -i kube://%s/%s (the state and inventory from the management cluster): %v; want exit 0 and no changes\n%s", ns, name, err, out)
		}
		if out, err := c.kubectl(ctx, "-n", ns, "annotate", "kforgecluster", name, controller.PausedAnnotation+"-"); err != nil {
			t.Fatalf("resume: %v\n%s", err, out)
		}
	})

	c.step("upgrade-leader-killed", func(t *testing.T) {
		start := time.Now()
		gen = c.applyObject(ctx, ns, name, c.objectSpec(h[2:3], h[3:5], to))
		// The leading controller dies as the upgrade's apply enters its upgrade step (the step
		// after render).
		eventually(ctx, t, "the upgrade's render step done", func() (bool, string) {
			evs, err := mgmt.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, e := range evs.Items {
				if e.Reason == "StepDone" && e.Action == "render" && e.EventTime.After(start) {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d events", len(evs.Items))
		})
		lease, err := mgmt.CoordinationV1().Leases("kforge-system").Get(ctx, "kforge-controller", metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil {
			t.Fatalf("the controller's leader lease: %v", err)
		}
		leader := strings.SplitN(*lease.Spec.HolderIdentity, "_", 2)[0]
		zero := int64(0)
		if err := mgmt.CoreV1().Pods("kforge-system").Delete(ctx, leader, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatalf("kill the leader %s: %v", leader, err)
		}
		t.Logf("killed the leading controller %s %s after the upgrade began", leader, time.Since(start).Round(time.Second))
		k := c.waitReady(ctx, ns, name, gen, 20*time.Minute)
		if k.Status.Version != to || k.Status.LastRun == nil || k.Status.LastRun.Outcome != "ok" || k.Status.LastRun.End == nil || k.Status.LastRun.Start.Time.Before(start) {
			t.Errorf("after the upgrade: version %s, last run %+v; want the successor's apply, ended ok", k.Status.Version, k.Status.LastRun)
		}
		evs, err := mgmt.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		interrupted := 0
		for _, e := range evs.Items {
			if e.Reason == "Interrupted" {
				interrupted++
			}
		}
		if interrupted != 1 {
			t.Errorf("%d Interrupted events; want 1, for the killed controller's apply", interrupted)
		}
		t.Logf("upgraded %s → %s in %s, the leader killed on the way", from, to, time.Since(start).Round(time.Second))
		c.checkSecondCluster(ctx, ns, name, 3, to)
	})

	c.step("status-events-no-secrets", func(t *testing.T) {
		evs, err := mgmt.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		reasons := map[string]int{}
		for _, e := range evs.Items {
			reasons[e.Reason]++
		}
		if reasons["StepDone"] < 10 || reasons["Applied"] < 3 || reasons["Applying"] < 3 {
			t.Errorf("events by reason %v; want a StepDone per step, and Applying and Applied for each of the three applies", reasons)
		}
		obj, err := c.kubectl(ctx, "-n", ns, "get", "kforgecluster", name, "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		evJSON, _ := json.Marshal(evs)
		logs, _ := c.kubectl(ctx, "-n", "kforge-system", "logs", "deployment/kforge-controller", "--all-containers", "--tail=-1")
		body := strings.TrimSpace(strings.Split(strings.SplitN(string(key), "\n", 2)[1], "\n")[0])
		for what, text := range map[string]string{"status": obj, "events": string(evJSON), "the controller's log": logs} {
			if strings.Contains(text, "PRIVATE KEY") || strings.Contains(text, body) {
				t.Errorf("the SSH key is in %s", what)
			}
		}
	})

	c.step("delete-retains-hosts", func(t *testing.T) {
		if out, err := c.kubectl(ctx, "-n", ns, "delete", "kforgecluster", name, "--wait=true", "--timeout=2m"); err != nil {
			t.Fatalf("delete: %v\n%s", err, out)
		}
		c.checkSecondClusterNodes(ctx, c.secondAdmin, 3, to)
		if _, err := mgmt.CoreV1().Secrets(ns).Get(ctx, kube.StateSecretName(name), metav1.GetOptions{}); err != nil {
			t.Errorf("the state of the deleted (retained) cluster: %v; want it kept", err)
		}
	})

	// The retained cluster adopted again by an object of the same name (its state is there:
	// nothing to do), now with deletionPolicy Reset; deleting it resets the hosts, then the state.
	c.step("adopt-then-delete-resets-hosts", func(t *testing.T) {
		s := c.objectSpec(h[2:3], h[3:5], to)
		s["deletionPolicy"] = controller.DeletionReset
		start := time.Now()
		gen = c.applyObject(ctx, ns, name, s)
		k := c.waitReady(ctx, ns, name, gen, 10*time.Minute)
		if k.Status.LastRun != nil && k.Status.LastRun.Start.Time.After(start) && k.Status.LastRun.Command == "apply" {
			t.Errorf("adopting the retained cluster ran an apply (%+v); want its plan empty: %s", k.Status.LastRun, k.Status.LastPlan)
		}
		t.Logf("the retained cluster adopted again in %s: %s", time.Since(start).Round(time.Second), k.Status.LastPlan)
		start = time.Now()
		if out, err := c.kubectl(ctx, "-n", ns, "delete", "kforgecluster", name, "--wait=true", "--timeout=5m"); err != nil {
			t.Fatalf("delete (deletionPolicy Reset): %v\n%s", err, out)
		}
		t.Logf("deleted with deletionPolicy Reset in %s", time.Since(start).Round(time.Second))
		for _, n := range h[2:5] {
			if out := c.exec(ctx, n.Name, "ls /etc/kubernetes/manifests 2>/dev/null; ls /var/lib/etcd 2>/dev/null; systemctl is-active kubelet || true"); strings.TrimSpace(out) != "inactive" {
				t.Errorf("%s after the reset: %q; want no manifests, no etcd data and kubelet inactive", n.Name, out)
			}
		}
		if _, err := mgmt.CoreV1().Secrets(ns).Get(ctx, kube.StateSecretName(name), metav1.GetOptions{}); err == nil {
			t.Errorf("the state Secret of the reset cluster is still there")
		}
	})
}

// installController puts kforge controller into the management cluster on hosts: kforge built
// statically, its image (kforge controller image) imported on each host with the bundle copied
// to /opt/kforge/bundle, and kforge controller manifests applied; it waits for the rollout.
func (c *cluster) installController(ctx context.Context, hosts []lab.Host) {
	t := c.t
	t.Helper()
	dir := t.TempDir()
	static := filepath.Join(dir, "kforge")
	build := exec.Command("go", "build", "-o", static, "../cmd/kforge")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build (static): %v\n%s", err, out)
	}
	image := filepath.Join(dir, "kforge.tar")
	if out, err := exec.Command(static, "controller", "image", "-o", image).CombinedOutput(); err != nil {
		t.Fatalf("kforge controller image: %v\n%s", err, out)
	}
	for _, n := range hosts {
		c.importImage(ctx, n.Name, image)
		c.copyTree(ctx, n.Name, c.bundle, "/opt/kforge/bundle")
	}
	manifests, err := exec.Command(static, "controller", "manifests", "--bundle-path", "/opt/kforge/bundle").Output()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "controller.yaml")
	if err := os.WriteFile(path, manifests, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := c.kubectl(ctx, "apply", "--server-side", "-f", path); err != nil {
		t.Fatalf("kubectl apply the controller: %v\n%s", err, out)
	}
	if out, err := c.kubectl(ctx, "-n", "kforge-system", "rollout", "status", "deployment/kforge-controller", "--timeout=5m"); err != nil {
		t.Fatalf("the controller's rollout: %v\n%s", err, out)
	}
}

// objectSpec is a KforgeCluster's spec for masters and workers of the lab at version, as a
// user would write it: the spec is the inventory, the key and known hosts come from Secret
// lab-ssh (labSSHSecret), the bundle from the nodes.
func (c *cluster) objectSpec(masters, workers []lab.Host, version string) map[string]any {
	c.t.Helper()
	second := *c
	second.inventory = filepath.Join(c.t.TempDir(), "kforge.yaml")
	second.version = version
	second.writeInventory(masters, workers)
	data, err := os.ReadFile(second.inventory)
	if err != nil {
		c.t.Fatal(err)
	}
	var s map[string]any
	if err := yaml.Unmarshal(data, &s); err != nil {
		c.t.Fatal(err)
	}
	for _, k := range []string{"apiVersion", "kind", "name", "addons"} {
		delete(s, k)
	}
	s["bundle"] = "${KFORGE_BUNDLE:-/bundle}" // the controller's; a person taking over sets their own
	s["ssh"] = map[string]any{"user": "root", "identityFile": "id_lab", "knownHostsFile": "known_hosts"}
	s["credentialsFrom"] = []any{map[string]any{"name": "lab-ssh"}}
	s["prune"] = true
	return s
}

// labSSHSecret creates namespace ns in the management cluster and, in it, Secret lab-ssh with
// the lab's SSH key and known hosts.
func (c *cluster) labSSHSecret(ctx context.Context, mgmt kubernetes.Interface, ns string) {
	c.t.Helper()
	key, err := os.ReadFile(c.lab.IdentityFile)
	if err != nil {
		c.t.Fatal(err)
	}
	knownHosts, err := os.ReadFile(c.lab.KnownHostsFile)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := mgmt.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	if _, err := mgmt.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "lab-ssh"},
		Data: map[string][]byte{"id_lab": key, "known_hosts": knownHosts}}, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// applyObject creates or updates KforgeCluster ns/name with spec and returns its generation.
func (c *cluster) applyObject(ctx context.Context, ns, name string, spec map[string]any) int64 {
	c.t.Helper()
	obj := map[string]any{"apiVersion": controller.GroupVersion.String(), "kind": controller.Kind,
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec}
	b, err := json.Marshal(obj)
	if err != nil {
		c.t.Fatal(err)
	}
	path := filepath.Join(c.t.TempDir(), "object.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		c.t.Fatal(err)
	}
	if out, err := c.kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", path); err != nil {
		c.t.Fatalf("kubectl apply the KforgeCluster: %v\n%s", err, out)
	}
	out, err := c.kubectl(ctx, "-n", ns, "get", "kforgecluster", name, "-o", "jsonpath={.metadata.generation}")
	if err != nil {
		c.t.Fatal(err)
	}
	var gen int64
	fmt.Sscan(out, &gen)
	return gen
}

// waitReady waits for KforgeCluster ns/name to be Ready for generation gen.
func (c *cluster) waitReady(ctx context.Context, ns, name string, gen int64, timeout time.Duration) *controller.KforgeCluster {
	c.t.Helper()
	var k controller.KforgeCluster
	err := wait.PollUntilContextTimeout(ctx, 3*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		out, err := c.kubectl(ctx, "-n", ns, "get", "kforgecluster", name, "-o", "json")
		if err != nil {
			return false, nil
		}
		if err := json.Unmarshal([]byte(out), &k); err != nil {
			return false, err
		}
		for _, cond := range k.Status.Conditions {
			if cond.Type == controller.ConditionReady && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration >= gen && k.Status.ObservedGeneration >= gen {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		out, _ := c.kubectl(ctx, "-n", ns, "get", "kforgecluster", name, "-o", "yaml")
		evs, _ := c.kubectl(ctx, "-n", ns, "get", "events", "--sort-by=.lastTimestamp")
		logs, _ := c.kubectl(ctx, "-n", "kforge-system", "logs", "deployment/kforge-controller", "--tail=100")
		c.t.Fatalf("KforgeCluster %s/%s not Ready for generation %d within %s: %v\n%s\n%s\n%s", ns, name, gen, timeout, err, out, evs, logs)
	}
	return &k
}

// checkSecondCluster reads the second cluster's admin kubeconfig from its state Secret and
// checks its nodes: nodes of them, all Ready at version.
func (c *cluster) checkSecondCluster(ctx context.Context, ns, name string, nodes int, version string) {
	c.t.Helper()
	sec, err := c.client().CoreV1().Secrets(ns).Get(ctx, kube.StateSecretName(name), metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(sec.Data["admin.conf"])
	if err != nil {
		c.t.Fatalf("the second cluster's admin.conf from its state: %v", err)
	}
	c.secondAdmin = kubernetes.NewForConfigOrDie(cfg)
	c.checkSecondClusterNodes(ctx, c.secondAdmin, nodes, version)
}

func (c *cluster) checkSecondClusterNodes(ctx context.Context, k kubernetes.Interface, nodes int, version string) {
	c.t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		ready := 0
		var seen []string
		for _, n := range list.Items {
			seen = append(seen, n.Name+" "+n.Status.NodeInfo.KubeletVersion)
			if nodeReady(&n) && n.Status.NodeInfo.KubeletVersion == version {
				ready++
			}
		}
		last = strings.Join(seen, ", ")
		return ready == nodes && len(list.Items) == nodes, nil
	})
	if err != nil {
		c.t.Fatalf("the second cluster: want %d nodes Ready at %s; saw %s (%v)", nodes, version, last, err)
	}
}

// copyTree copies the local directory src into host at dst (tar through the lab's exec).
func (c *cluster) copyTree(ctx context.Context, host, src, dst string) {
	c.t.Helper()
	tar := exec.CommandContext(ctx, "tar", "-C", src, "-cf", "-", ".")
	pipe, err := tar.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	untar, err := c.lab.Command(ctx, host, "sh", "-c", "mkdir -p "+dst+" && tar -C "+dst+" -xf -")
	if err != nil {
		c.t.Fatal(err)
	}
	untar.Stdin = pipe
	if err := tar.Start(); err != nil {
		c.t.Fatal(err)
	}
	if out, err := untar.CombinedOutput(); err != nil {
		c.t.Fatalf("%s: copy %s to %s: %v\n%s", host, src, dst, err, out)
	}
	if err := tar.Wait(); err != nil {
		c.t.Fatal(err)
	}
}
