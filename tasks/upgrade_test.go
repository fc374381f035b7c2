package tasks

import "testing"

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
