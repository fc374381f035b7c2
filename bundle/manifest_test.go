package bundle

import (
	"encoding/json"
	"testing"

	"github.com/kforge/kforge/release"
)

// TestManifestVersionsKeepTheirFormat: the "versions" object of manifest.json is written from
// the release catalogue with the keys bundles have always had, plus the runtime's; a manifest
// written before kforge bundled the runtime still loads, without it.
func TestManifestVersionsKeepTheirFormat(t *testing.T) {
	r, err := release.For("v1.36.3")
	if err != nil {
		t.Fatal(err)
	}
	const old = `{"kubernetes":"v1.36.3","etcd":"v3.6.8","coredns":"v1.14.2","pause":"3.10.2","cniPlugins":"v1.9.1","flannel":"v0.28.10"`
	const want = old + `,"containerd":"v2.3.7","runc":"v1.5.2"}`
	b, err := json.Marshal(versionsOf(r))
	if err != nil || string(b) != want {
		t.Errorf("versions %s, %v; want %s", b, err, want)
	}
	var back Versions
	if err := json.Unmarshal([]byte(old+"}"), &back); err != nil || back.Flannel != "v0.28.10" || back.Containerd != "" {
		t.Errorf("an older manifest's versions read as %+v, %v", back, err)
	}
}

func TestManifestHasImages(t *testing.T) {
	r, err := release.For("v1.36.3")
	if err != nil {
		t.Fatal(err)
	}
	im := r.Images("")
	m := &Manifest{Versions: versionsOf(r)}
	for c, name := range im.ByComponent() {
		m.Images = append(m.Images, Image{Component: c, Name: name})
	}
	if err := m.HasImages(im.CoreDNS, im.KubeProxy, im.Flannel); err != nil {
		t.Errorf("a complete bundle: %v", err)
	}
	m.Images = []Image{{Component: "coredns", Name: im.CoreDNS}, {Component: "kube-proxy", Name: "registry.k8s.io/kube-proxy:v1.36.2"}}
	err = m.HasImages(im.CoreDNS, im.KubeProxy, im.Flannel)
	const want = "no image registry.k8s.io/kube-proxy:v1.36.3, ghcr.io/flannel-io/flannel:v0.28.10 (rebuild the bundle with this kforge: kforge bundle build -o DIR)"
	if err == nil || err.Error() != want {
		t.Errorf("a bundle without kube-proxy v1.36.3 and flannel: %v\nwant %s", err, want)
	}
}
