package tasks

import (
	"testing"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/release"
)

// TestAddonImages: without a bundle the addons run the inventory's release's images from its
// image repository; with one, its images as the bundle names them, and a
// bundle that lacks one of them is refused before anything is deployed.
func TestAddonImages(t *testing.T) {
	inv, err := (&inventory.Cluster{ImageRepository: "mirror.example/k8s", Bundle: "/b"}).AtVersion("v1.36.2")
	if err != nil {
		t.Fatal(err)
	}
	im, err := (&hop{inv: inv}).images()
	want := release.Images{CoreDNS: "mirror.example/k8s/coredns/coredns:v1.14.2", KubeProxy: "mirror.example/k8s/kube-proxy:v1.36.2", Flannel: "ghcr.io/flannel-io/flannel:v0.28.10"}
	if err != nil || im.CoreDNS != want.CoreDNS || im.KubeProxy != want.KubeProxy || im.Flannel != want.Flannel {
		t.Errorf("without a bundle: %+v, %v; want %+v", im, err, want)
	}

	m := &bundle.Manifest{Releases: []bundle.Versions{{Kubernetes: "v1.36.3"}}, Images: []bundle.Image{
		{Component: "coredns", Name: "registry.k8s.io/coredns/coredns:v1.14.2"},
		{Component: "kube-proxy", Name: "registry.k8s.io/kube-proxy:v1.36.3"},
		{Component: "flannel", Name: "ghcr.io/flannel-io/flannel:v0.28.10"},
		{Component: "kube-network-policies", Name: "registry.k8s.io/networking/kube-network-policies:v0.8.0"},
		{Component: "metrics-server", Name: "registry.k8s.io/metrics-server/metrics-server:v0.8.0"},
	}}
	// readBundle took the bundle's release of the inventory's version.
	if inv, err = inv.AtVersion("v1.36.3"); err != nil {
		t.Fatal(err)
	}
	im, err = (&hop{inv: inv, manifest: m}).images()
	if err != nil || im.CoreDNS != m.Images[0].Name || im.KubeProxy != m.Images[1].Name || im.Flannel != m.Images[2].Name {
		t.Errorf("with a bundle: %+v, %v; want the bundle's %+v", im, err, m.Images)
	}

	m.Images = m.Images[:2]
	if _, err := (&hop{inv: inv, manifest: m}).images(); err == nil || err.Error() != "bundle /b: no image ghcr.io/flannel-io/flannel:v0.28.10, registry.k8s.io/networking/kube-network-policies:v0.8.0, registry.k8s.io/metrics-server/metrics-server:v0.8.0 (rebuild the bundle with this kforge: kforge bundle build -o DIR)" {
		t.Errorf("a bundle without flannel and the NetworkPolicy agent: %v", err)
	}
	// A bundle made before kforge ran the agent and metrics-server serves a cluster that turns
	// them off.
	m.Images = append(m.Images, bundle.Image{Component: "flannel", Name: "ghcr.io/flannel-io/flannel:v0.28.10"})
	off := *inv
	off.Networking.NetworkPolicy = inventory.NetworkPolicyOff
	off.MetricsServer.Enabled = new(bool)
	if _, err := (&hop{inv: &off, manifest: m}).images(); err != nil {
		t.Errorf("a bundle without the NetworkPolicy agent and metrics-server, both off: %v", err)
	}
}
