package main

import (
	"strings"
	"testing"
)

func TestKubeStateDir(t *testing.T) {
	for dir, want := range map[string][2]string{"kube://clusters/edge": {"clusters", "edge"}, "/var/lib/kforge/edge": {}, "": {}} {
		ns, name, ok, err := kubeRef("--state-dir", dir)
		if err != nil || ok != (want[0] != "") || ns != want[0] || name != want[1] {
			t.Errorf("%q: %q %q %v %v; want %q", dir, ns, name, ok, err, want)
		}
	}
	for _, dir := range []string{"kube://clusters", "kube://Clusters/edge", "kube:///edge", "kube://a/b/c"} {
		if _, _, _, err := kubeRef("--state-dir", dir); err == nil || !strings.Contains(err.Error(), "kube://NAMESPACE/NAME") {
			t.Errorf("%q: %v; want an error naming the form", dir, err)
		}
	}
}
