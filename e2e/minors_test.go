package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/release"
)

// privateRegistry is the registry host the test's image names: it resolves nowhere, so the
// only way to the image is the mirror the inventory configures.
const privateRegistry = "registry.kforge.test"

// TestBareHostsEveryMinor: for every Kubernetes minor of the catalogue but the default
// (TestApplyLabClusterEndToEnd's) and the oldest (whose cluster TestUpgradeAcrossTwoMinors then
// upgrades), kforge turns three bare hosts into a cluster: bareHostsChecks.
func TestBareHostsEveryMinor(t *testing.T) {
	testenv.Require(t, lab.Prerequisites())
	inLane(t)
	for _, r := range release.All()[1:] {
		if r.Kubernetes == release.Default() {
			continue
		}
		t.Run(r.Kubernetes, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			defer cancel()
			prefix := "m" + strings.Split(r.Kubernetes, ".")[1] // m37
			c := newCluster(ctx, t, prefix, r.Kubernetes, lab.Options{Hosts: 3, Bare: true})
			c.bareHostsChecks(ctx, c.usePrivateRegistry())
			c.powerCutCheck(ctx)
		})
	}
}

// usePrivateRegistry starts a private registry in the lab (TLS from its own CA, basic auth),
// holding the agent image as privateRegistry's e2e/agent:v1, and makes it the inventory's
// mirror of privateRegistry. It is stopped when the test (c.t) ends.
func (c *cluster) usePrivateRegistry() *labRegistry {
	t := c.t.(*testing.T)
	t.Helper()
	reg := startRegistry(t)
	// Another image than agentImage, which a test may import on the same nodes later.
	reg.push(t, buildAgentImageLabelled(t, t.TempDir(), map[string]string{"e2e.kforge.dev/from": "private-registry"}), "e2e/agent:v1")
	c.env = []string{"KFORGE_E2E_REGISTRY_USER=" + reg.user, "KFORGE_E2E_REGISTRY_PASSWORD=" + reg.password}
	c.registries = []string{fmt.Sprintf("{host: %s, mirrors: [\"https://%s\"], caFile: %s, usernameEnv: KFORGE_E2E_REGISTRY_USER, passwordEnv: KFORGE_E2E_REGISTRY_PASSWORD}",
		privateRegistry, reg.addr, reg.caFile)}
	return reg
}

// bareHostsChecks: kforge turns the lab's three bare hosts (no containerd, no runc) into a
// cluster of 1 master and 2 workers with the bundle's runtime: nodes Ready on that minor's
// kubelet, DNS and a cross-node Service, the workers' bundle from the master's registry, and a
// second apply that restarts nothing; etcd status and a snapshot; on the oldest minor, an apply
// that fails late leaves a kubeconfig. The workload's image exists only in reg, the private
// registry (usePrivateRegistry) reached through the inventory's registry mirror; its
// credentials appear nowhere in kforge's output, log or state. Then a worker's power is cut and
// it comes back. Each is a step (cluster.step).
func (c *cluster) bareHostsChecks(ctx context.Context, reg *labRegistry) {
	h := c.lab.Hosts
	w1, w2 := h[1].Name, h[2].Name
	version := c.version
	c.writeInventory(h[:1], h[1:])

	var out string
	c.step("apply", func(t *testing.T) {
		start := time.Now()
		var err error
		out, err = c.run("apply", "--timeout", "4m")
		if err != nil {
			t.Fatalf("kforge apply: %v\n%s", err, out)
		}
		t.Logf("apply of %s on bare hosts took %s", version, time.Since(start).Round(time.Second))
	})

	c.step("checks", func(t *testing.T) {
		c.checkRuntime(ctx, h)
		c.checkNodes(ctx, 3)
		// Pulled, not imported: the pods' image is only in the lab registry.
		c.checkWorkloads(ctx, workload{image: privateRegistry + "/e2e/agent:v1", pull: corev1.PullAlways}, w1, w2)
		for _, w := range h[1:] {
			if !reg.pulledThroughMirror(w.Address, "e2e/agent:v1", privateRegistry) {
				t.Errorf("the registry's log shows no authenticated pull of e2e/agent:v1 by %s (%s) through the mirror of %s", w.Name, w.Address, privateRegistry)
			}
		}
		for _, w := range []string{w1, w2} {
			mode := c.exec(ctx, w, "stat -c %a /etc/containerd/certs.d/"+privateRegistry+"/hosts.toml")
			if strings.TrimSpace(mode) != "600" {
				t.Errorf("%s: hosts.toml (it holds the credentials) has mode %s, want 600", w, mode)
			}
		}
	})

	c.step("bundle-from-masters", func(t *testing.T) { c.checkBundleFromMasters(ctx, out, h[0], w1, w2) })

	c.step("apply-again", func(t *testing.T) {
		c.applyChangesNothing(ctx, h)
		c.checkEtcdStatusAndSnapshot(ctx)
	})
	if version == release.All()[0].Kubernetes { // once: the oldest minor's cluster
		c.step("late-failure", func(t *testing.T) { c.checkLateFailureLeavesAKubeconfig(ctx) })
	}
	c.step("credentials", func(t *testing.T) {
		// The credentials are in hosts.toml on the nodes and nowhere on the workstation: not in
		// apply's output, its debug log, or the state dir (run records included).
		secrets := []string{reg.password, base64.StdEncoding.EncodeToString([]byte(reg.user + ":" + reg.password))}
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("apply's output holds the registry credentials")
			}
		}
		err := filepath.WalkDir(c.state, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, s := range secrets {
				if strings.Contains(string(data), s) {
					t.Errorf("%s holds the registry credentials", path)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

}

// powerCutCheck cuts a worker's power, once the cluster bareHostsChecks made has passed its
// other checks (and an upgrade): it is Ready again within 40 s (issue 29). (With the power cut
// right before the upgrade, 5 and 6 Service probes failed during the workers' upgrade, against
// none on a cluster without it; see docs/testing.md.)
func (c *cluster) powerCutCheck(ctx context.Context) {
	c.step("power-cut", func(t *testing.T) { c.powerCutComesBack(ctx, c.lab.Hosts[2].Name) }) // issue 29: kforge lab stop/start, Ready again within 40 s
}

// fromMasters is apply's line for a worker that took every file and image it lacked from the
// masters' registries and was uploaded none.
var fromMasters = regexp.MustCompile(`bundle: [1-9][0-9]* files, [1-9][0-9]* images from the masters' registries, 0 files, 0 images \(0 MiB\) uploaded`)

// checkBundleFromMasters checks issue 17's "each byte crosses the workstation's link about
// once" on a cluster apply just made (out, its output): every worker took its kubelet, CNI
// plugins, runtime and images from master's registry, not from the workstation, and holds them
// as the bundle's, its images pinned; the registry is read-only. Then a registry the workers
// cannot reach: a file missing on a worker is uploaded instead, and apply converges.
func (c *cluster) checkBundleFromMasters(ctx context.Context, out string, m lab.Host, workers ...string) {
	c.t.Helper()
	master := m.Name
	for _, w := range workers {
		if !regexp.MustCompile(regexp.QuoteMeta(w) + ` .*` + fromMasters.String()).MatchString(out) {
			c.t.Errorf("%s did not take the bundle from the masters' registries; apply said:\n%s", w, out)
		}
		pinned := c.exec(ctx, w, "ctr -n k8s.io images ls | grep -c '^registry.k8s.io/kube-proxy:.*"+bundle.PinLabel+"'")
		if strings.TrimSpace(pinned) != "1" {
			c.t.Errorf("%s: kube-proxy's image, pulled from the masters, is not pinned", w)
		}
	}
	catalog := c.exec(ctx, workers[0], "curl -fsS --cacert /etc/kubernetes/pki/ca.crt https://"+m.Address+":5000/v2/_catalog")
	if !strings.Contains(catalog, "registry.k8s.io/kube-proxy") {
		c.t.Errorf("%s's registry does not list kube-proxy: %s", master, catalog)
	}
	// Read-only for the cluster network: a push is refused.
	if code := c.exec(ctx, workers[0], "curl -sS -o /dev/null -w '%{http_code}' --cacert /etc/kubernetes/pki/ca.crt -X POST https://"+m.Address+":5000/v2/e2e/blobs/uploads/"); code != "405" {
		c.t.Errorf("a push to %s's registry answered %s, want 405 (read-only)", master, code)
	}

	// The registry out of reach (a firewall on the master refuses its port): a file missing on a
	// worker is uploaded instead, and apply converges.
	w := workers[len(workers)-1]
	const block = "iptables -I INPUT -p tcp --dport 5000 -j REJECT --reject-with tcp-reset"
	c.exec(ctx, master, block)
	c.exec(ctx, w, "rm -f /opt/cni/bin/portmap")
	out, err := c.run("apply", "--timeout", "4m")
	c.exec(ctx, master, strings.Replace(block, " -I ", " -D ", 1))
	if err != nil {
		c.t.Fatalf("apply with %s's registry out of reach: %v\n%s", master, err, out)
	}
	if !regexp.MustCompile(regexp.QuoteMeta(w) + ` .*bundle: 1 files, 0 images, [0-9]+ MiB`).MatchString(out) {
		c.t.Errorf("with %s's registry out of reach, apply did not upload portmap to %s:\n%s", master, w, out)
	}
	c.exec(ctx, w, "test -x /opt/cni/bin/portmap")
}
