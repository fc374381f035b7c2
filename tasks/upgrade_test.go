package tasks

import (
	"testing"

	"github.com/kforge/kforge/facts"
	"github.com/kforge/kforge/inventory"
)

// TestUpgradeRouteParts: the hop of each minor is the bundle's newest release of it, and a
// master's kube-apiserver version is read from its manifest's image.
func TestUpgradeRouteParts(t *testing.T) {
	held := []string{"v1.35.4", "v1.36.2", "v1.36.3", "v1.37.2"}
	for minor, want := range map[uint]string{35: "v1.35.4", 36: "v1.36.3", 37: "v1.37.2", 38: ""} {
		if got := newestOfMinor(held, 1, minor); got != want {
			t.Errorf("newestOfMinor(1.%d) = %q, want %q", minor, got, want)
		}
	}
	m := "spec:\n  containers:\n  - command:\n    - kube-apiserver\n    image: registry.k8s.io/kube-apiserver:v1.36.3\n"
	if s := apiserverImageRE.FindStringSubmatch(m); s == nil || s[1] != "v1.36.3" {
		t.Errorf("apiserver version from the manifest: %q", s)
	}
	u := &upgradeRoute{running: map[string]string{"m1": "v1.36.3", "w1": "v1.36.3"}}
	if u.resuming() {
		t.Error("one version everywhere is not a resumed upgrade")
	}
	u.running["w1"] = "v1.35.4"
	if !u.resuming() {
		t.Error("nodes at two versions are an upgrade to finish")
	}
	if got := routeText([]string{"v1.36.3", "v1.37.2"}); got != "→ v1.36.3 → v1.37.2" {
		t.Errorf("routeText = %q", got)
	}
}

// TestRuntimeStale: the containerd that answers is compared with the bundle's binary installed
// in /usr/local/bin; a host's own containerd, or one that does not answer, is never "stale".
func TestRuntimeStale(t *testing.T) {
	bundled := &inventory.Cluster{ContainerRuntime: inventory.ContainerRuntime{Install: inventory.RuntimeFromBundle}}
	host := &inventory.Cluster{ContainerRuntime: inventory.ContainerRuntime{Install: inventory.RuntimeFromHost}}
	f := func(answering bool, running, path, binary string) *facts.Facts {
		return &facts.Facts{Runtime: facts.Runtime{Answering: answering, Version: running},
			Binaries: map[string]facts.Binary{"containerd": {Path: path, Version: binary}}}
	}
	for _, tc := range []struct {
		name string
		c    *inventory.Cluster
		f    *facts.Facts
		want string
	}{
		{"binary replaced behind it", bundled, f(true, "v2.3.7", "/usr/local/bin/containerd", "2.4.2"), "it ran 2.3.7, its binary is 2.4.2"},
		{"the same", bundled, f(true, "v2.4.2", "/usr/local/bin/containerd", "2.4.2"), ""},
		{"not answering: it starts anyway", bundled, f(false, "", "/usr/local/bin/containerd", "2.4.2"), ""},
		{"the host's own binary", bundled, f(true, "v1.7.24", "/usr/bin/containerd", "1.7.25"), ""},
		{"the host's runtime", host, f(true, "v2.3.7", "/usr/local/bin/containerd", "2.4.2"), ""},
		{"no version read", bundled, f(true, "v2.3.7", "/usr/local/bin/containerd", ""), ""},
		{"no facts", bundled, nil, ""},
	} {
		if got := runtimeStale(tc.c, tc.f); got != tc.want {
			t.Errorf("%s: runtimeStale = %q, want %q", tc.name, got, tc.want)
		}
	}
}
