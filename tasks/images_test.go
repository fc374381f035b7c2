package tasks

import (
	"strings"
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
	im, err := addonImages(inv, nil)
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
		{Component: "local-path-provisioner", Name: "docker.io/rancher/local-path-provisioner:v0.0.30"},
		{Component: "local-path-helper", Name: "kforge.dev/local-path-helper:v0.0.30"},
	}}
	// readBundle took the bundle's release of the inventory's version.
	if inv, err = inv.AtVersion("v1.36.3"); err != nil {
		t.Fatal(err)
	}
	im, err = addonImages(inv, m)
	if err != nil || im.CoreDNS != m.Images[0].Name || im.KubeProxy != m.Images[1].Name || im.Flannel != m.Images[2].Name {
		t.Errorf("with a bundle: %+v, %v; want the bundle's %+v", im, err, m.Images)
	}

	// With local volumes on, the provisioner's image and kforge's helper come from the bundle.
	on := *inv
	on.LocalVolumes.Enabled = new(true)
	if im, err := addonImages(&on, m); err != nil || im.LocalPath != m.Images[5].Name || im.LocalPathHelper != m.Images[6].Name {
		t.Errorf("local volumes on: %+v, %v; want the bundle's %s and %s", im, err, m.Images[5].Name, m.Images[6].Name)
	}
	m.Images = m.Images[:6]
	if _, err := addonImages(&on, m); err == nil || !strings.Contains(err.Error(), "no image kforge.dev/local-path-helper:v0.0.30") {
		t.Errorf("local volumes on, a bundle without the helper: %v", err)
	}

	m.Images = m.Images[:2]
	if _, err := addonImages(inv, m); err == nil || err.Error() != "bundle /b: no image ghcr.io/flannel-io/flannel:v0.28.10, registry.k8s.io/networking/kube-network-policies:v0.8.0, registry.k8s.io/metrics-server/metrics-server:v0.8.0 (rebuild the bundle with this kforge: kforge bundle build -o DIR)" {
		t.Errorf("a bundle without flannel and the NetworkPolicy agent: %v", err)
	}
	// A bundle made before kforge ran the agent, metrics-server and the local volumes serves a
	// cluster that turns them off (the local volumes are off by default).
	m.Images = append(m.Images, bundle.Image{Component: "flannel", Name: "ghcr.io/flannel-io/flannel:v0.28.10"})
	off := *inv
	off.Networking.NetworkPolicy = inventory.NetworkPolicyOff
	off.MetricsServer.Enabled = new(bool)
	if _, err := addonImages(&off, m); err != nil {
		t.Errorf("a bundle without the NetworkPolicy agent and metrics-server, both off: %v", err)
	}
}

// TestAddonImagesReachEveryNode: an upgrade gives every node the addons' images of each hop
// before the addons move, the local volumes' provisioner and helper among them when the cluster
// serves them (a helper pod runs on the node that holds the volume); the control plane's images
// stay the masters'.
func TestAddonImagesReachEveryNode(t *testing.T) {
	for _, c := range bundle.ImageComponents {
		want := c != "kube-apiserver" && c != "kube-controller-manager" && c != "kube-scheduler" && c != "etcd"
		if addonImage(c) != want {
			t.Errorf("addonImage(%s) = %v, want %v", c, addonImage(c), want)
		}
	}
	m := &bundle.Manifest{Images: []bundle.Image{
		{Component: "kube-apiserver", Name: "registry.k8s.io/kube-apiserver:v1.36.3", Digest: "sha256:1", ControlPlaneOnly: true},
		{Component: "local-path-provisioner", Name: "docker.io/rancher/local-path-provisioner:v0.0.30", Digest: "sha256:2"},
		{Component: "local-path-helper", Name: "kforge.dev/local-path-helper:v0.0.30", Digest: "sha256:3"},
	}}
	_, served := bundle.Served(m, bundle.Need{Only: addonImage, LocalVolumes: true})
	if len(served) != 2 || served[0].Component != "local-path-provisioner" || served[1].Component != "local-path-helper" {
		t.Errorf("the masters' registries serve the nodes %+v during an upgrade; want the local volumes' two images", served)
	}
	// First apply: every node of a cluster that serves local volumes gets both images; one that
	// does not gets neither (its nodes' containerd has no hosts.toml for their registries).
	on := &inventory.Cluster{LocalVolumes: inventory.LocalVolumes{Enabled: new(true)}}
	for _, c := range []*inventory.Cluster{on, {}} {
		for _, role := range []inventory.Role{inventory.RoleMaster, inventory.RoleWorker} {
			p := bundle.PlanHost(m, bundle.HostState{}, bundleNeed(c, role))
			var got []string
			for _, im := range p.Import {
				got = append(got, im.Component)
			}
			if has := strings.Contains(strings.Join(got, " "), "local-path-provisioner local-path-helper"); has != c.LocalVolumes.On() {
				t.Errorf("a new %s, localVolumes.enabled %v, imports %v", role, c.LocalVolumes.On(), got)
			}
		}
	}
}
