package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/release"
)

// privateRegistry is the registry host the test's image names: it resolves nowhere, so the
// only way to the image is the mirror the inventory configures.
const privateRegistry = "registry.kforge.test"

// TestBareHostsEveryMinor: for every Kubernetes minor of the catalogue other than the default
// (TestApplyLabClusterEndToEnd covers that one), kforge turns three bare hosts (no containerd, no
// runc) into a cluster with the bundle's runtime: nodes Ready on that minor's kubelet, DNS and a
// cross-node Service, and a second apply that restarts nothing. The workload's image exists only
// in a private registry in the lab (TLS from its own CA, basic auth), reached through the
// inventory's registry mirror; its credentials appear nowhere in kforge's output, log or state.
func TestBareHostsEveryMinor(t *testing.T) {
	testenv.Require(t, lab.Prerequisites())
	for _, r := range release.All() {
		if r.Kubernetes == release.Default() {
			continue
		}
		t.Run(r.Kubernetes, func(t *testing.T) { bareHostsMinor(t, r.Kubernetes) })
	}
}

func bareHostsMinor(t *testing.T, version string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	prefix := "m" + strings.Split(version, ".")[1] // m35, m37
	c := newCluster(ctx, t, prefix, version, lab.Options{Hosts: 3, Bare: true})
	h := c.lab.Hosts
	w1, w2 := h[1].Name, h[2].Name

	reg := startRegistry(t)
	reg.push(t, buildAgentImage(t, t.TempDir()), "e2e/agent:v1")
	c.env = []string{"KFORGE_E2E_REGISTRY_USER=" + reg.user, "KFORGE_E2E_REGISTRY_PASSWORD=" + reg.password}
	c.registries = []string{fmt.Sprintf("{host: %s, mirrors: [\"https://%s\"], caFile: %s, usernameEnv: KFORGE_E2E_REGISTRY_USER, passwordEnv: KFORGE_E2E_REGISTRY_PASSWORD}",
		privateRegistry, reg.addr, reg.caFile)}
	c.writeInventory(h[:1], h[1:])

	start := time.Now()
	out, err := c.run("apply", "--timeout", "4m")
	if err != nil {
		t.Fatalf("kforge apply: %v\n%s", err, out)
	}
	t.Logf("apply of %s on bare hosts took %s", version, time.Since(start).Round(time.Second))

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

	c.applyChangesNothing(ctx, h)
	c.checkEtcdStatusAndSnapshot(ctx)

	// The credentials are in hosts.toml on the nodes and nowhere on the workstation: not in
	// apply's output, its debug log, or the state dir (run records included).
	secrets := []string{reg.password, base64.StdEncoding.EncodeToString([]byte(reg.user + ":" + reg.password))}
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("apply's output holds the registry credentials")
		}
	}
	err = filepath.WalkDir(c.state, func(path string, d fs.DirEntry, err error) error {
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
}
