package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/conformance"
	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/release"
)

// upstreamRegistry is where the suite's images live; the lab registry mirrors it.
const upstreamRegistry = "registry.k8s.io"

// conformanceSlice is what `make test` runs of Kubernetes' conformance suite: DNS, Services and
// admission webhooks (the API server reaching a Service from a host without a default route).
const conformanceSlice = `\[sig-network\] DNS should provide (DNS for the cluster|DNS for services|/etc/hosts entries)` +
	`|\[sig-network\] Services should (serve a basic endpoint from pods|serve multiport endpoints from pods|be able to change the type from ClusterIP to ExternalName)` +
	`|\[sig-api-machinery\] AdmissionWebhook .*should (be able to deny pod and configmap creation|mutate custom resource with pruning)`

// TestConformance runs Kubernetes' own conformance specs, built offline (package conformance),
// against a kforge cluster of 1 master and 2 workers on bare lab hosts, whose containerd pulls
// the test images through the lab registry (a mirror of registry.k8s.io): with
// KFORGE_CONFORMANCE=full every [Conformance] spec that is not [Serial], [Disruptive] or [Slow]
// (make conformance). KFORGE_CONFORMANCE_VERSION picks the Kubernetes version (default: the
// default release), KFORGE_CONFORMANCE_PROXY_MODE kube-proxy's mode (kubeProxy.mode), and
// KFORGE_CONFORMANCE_REPORT keeps the JUnit report and the suite's log in that directory.
// KFORGE_CONFORMANCE_NETPOL=1 runs sig-network's NetworkPolicy specs instead
// (conformance.NetworkPolicyFocus), against the agent kforge runs by default;
// KFORGE_CONFORMANCE_DUALSTACK=1 the dual-stack specs (conformance.DualStackFocus) on a
// dual-stack cluster (lab hosts with IPv6 addresses). Every selected spec must pass, but for those that cannot with images made offline
// (conformance.CannotPassOffline). make test's slice (conformanceSlice) runs on the cluster of
// TestApplyLabClusterEndToEnd, which exists already.
func TestConformance(t *testing.T) {
	if os.Getenv("KFORGE_CONFORMANCE") != "full" {
		t.Skip("make test's conformance slice runs in TestApplyLabClusterEndToEnd/conformance; KFORGE_CONFORMANCE=full runs the whole suite here")
	}
	testenv.Require(t, lab.Prerequisites())
	inLane(t)
	version := release.Default()
	if v := os.Getenv("KFORGE_CONFORMANCE_VERSION"); v != "" {
		version = v
	}
	proxyMode := os.Getenv("KFORGE_CONFORMANCE_PROXY_MODE")
	focus, skip, suffix := conformance.Focus, conformance.Skip, ""
	if os.Getenv("KFORGE_CONFORMANCE_NETPOL") == "1" {
		focus, skip, suffix = conformance.NetworkPolicyFocus, conformance.NetworkPolicySkip, "-netpol"
	}
	dual := os.Getenv("KFORGE_CONFORMANCE_DUALSTACK") == "1"
	if dual {
		focus, skip, suffix = conformance.DualStackFocus, conformance.DualStackSkip, suffix+"-dualstack"
	}
	report := t.TempDir()
	if dir := os.Getenv("KFORGE_CONFORMANCE_REPORT"); dir != "" {
		report = filepath.Join(dir, version)
		if proxyMode != "" {
			report += "-" + proxyMode
		}
		report += suffix
	}
	timeout := 3 * time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), timeout+20*time.Minute)
	defer cancel()
	start := time.Now()
	kit, err := conformance.Build(context.Background(), bundle.BuildOptions{Version: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("conformance kit of %s in %s", version, time.Since(start).Round(time.Second))
	c := newCluster(ctx, t, "conf", version, lab.Options{Hosts: 3, Bare: true, IPv6: dual})
	h := c.lab.Hosts
	c.mirrorConformanceImages(kit)
	c.proxyMode = proxyMode
	c.writeInventory(h[:1], h[1:])
	if out, err := c.run("apply"); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	if proxyMode != "" {
		cm, err := c.client().CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
		if err != nil || !strings.Contains(cm.Data["config.conf"], "mode: "+proxyMode) {
			t.Fatalf("kube-proxy's configuration: %v; want mode %s\n%s", err, proxyMode, cm.Data["config.conf"])
		}
	}
	c.conformance(ctx, kit, focus, skip, 6, timeout, report)
}

// mirrorConformanceImages starts the lab registry, pushes the conformance suite's test images
// to it (the kit's, and those the suite shares with the bundle: etcd, pause), and makes it the
// inventory's mirror of registry.k8s.io for containerd (specs pull with policy Always, and
// workers lack the masters' images). It is called before the inventory is written.
func (c *cluster) mirrorConformanceImages(kit conformance.Kit) {
	t := c.t.(*testing.T)
	t.Helper()
	t.Logf("conformance kit: %d images built, %d from the bundle, %d that cannot be built offline: %s",
		len(kit.Built), len(kit.FromBundle), len(kit.Missing), strings.Join(kit.Missing, ", "))
	reg := startRegistry(t)
	start := time.Now()
	m, err := bundle.LoadManifest(c.bundle)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range kit.Built {
		reg.pushFrom(t, kit.Images, ref, strings.TrimPrefix(ref, upstreamRegistry+"/"))
	}
	for _, ref := range kit.FromBundle {
		i := slices.IndexFunc(m.Images, func(im bundle.Image) bool { return im.Name == ref })
		if i < 0 {
			t.Fatalf("the suite's %s is not in the bundle %s", ref, c.bundle)
		}
		reg.push(t, filepath.Join(c.bundle, m.Images[i].Path), strings.TrimPrefix(ref, upstreamRegistry+"/"))
	}
	t.Logf("%d test images pushed to the lab registry in %s", len(kit.Built)+len(kit.FromBundle), time.Since(start).Round(time.Second))
	c.env = []string{"KFORGE_E2E_REGISTRY_USER=" + reg.user, "KFORGE_E2E_REGISTRY_PASSWORD=" + reg.password}
	c.registries = []string{fmt.Sprintf("{host: %s, mirrors: [\"https://%s\"], caFile: %s, usernameEnv: KFORGE_E2E_REGISTRY_USER, passwordEnv: KFORGE_E2E_REGISTRY_PASSWORD}",
		upstreamRegistry, reg.addr, reg.caFile)}
}

// conformance runs the specs of focus but skip ("": conformance.Skip) with procs in parallel
// against the cluster (1 master, 2 workers), the report in report: every one must pass, but for
// those that cannot offline.
func (c *cluster) conformance(ctx context.Context, kit conformance.Kit, focus, skip string, procs int, timeout time.Duration, report string) {
	t := c.t
	t.Helper()
	s, err := conformance.Run(ctx, kit, conformance.RunOptions{
		Kubeconfig: filepath.Join(c.state, "admin.conf"), ReportDir: report,
		Focus: focus, Skip: skip, Procs: procs, Timeout: timeout, Nodes: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Kubernetes %s conformance (focus %s), report in %s:\n%s", c.version, focus, report, s)
	if u := s.Unexpected(); len(u) > 0 {
		t.Errorf("%d conformance specs failed (and %d that cannot pass offline); see above and %s", len(u), s.Failed-len(u), filepath.Join(report, "e2e.log"))
	}
	if s.Passed == 0 {
		t.Errorf("no conformance spec passed: the focus %q selected nothing?", focus)
	}
	c.checkNodes(ctx, 3)
}
