package bundle

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kforge/kforge/release"
)

// TestManifestVersionsKeepTheirFormat: the "versions" object of manifest.json is written from
// the release catalogue with the keys bundles have always had, plus the NetworkPolicy agent's
// and the runtime's; a manifest written before kforge bundled them still loads, without them.
func TestManifestVersionsKeepTheirFormat(t *testing.T) {
	r, err := release.For("v1.36.3")
	if err != nil {
		t.Fatal(err)
	}
	const old = `{"kubernetes":"v1.36.3","etcd":"v3.6.8","coredns":"v1.14.2","pause":"3.10.2","cniPlugins":"v1.9.1","flannel":"v0.28.10"`
	const want = old + `,"networkPolicy":"v0.8.0","metricsServer":"v0.8.0","localPath":"v0.0.30","containerd":"v2.3.7","runc":"v1.5.2"}`
	b, err := json.Marshal(versionsOf(r))
	if err != nil || string(b) != want {
		t.Errorf("versions %s, %v; want %s", b, err, want)
	}
	var back Versions
	if err := json.Unmarshal([]byte(old+"}"), &back); err != nil || back.Flannel != "v0.28.10" || back.Containerd != "" || back.NetworkPolicy != "" {
		t.Errorf("an older manifest's versions read as %+v, %v", back, err)
	}
}

func TestManifestHasImages(t *testing.T) {
	r, err := release.For("v1.36.3")
	if err != nil {
		t.Fatal(err)
	}
	im := r.Images("")
	m := &Manifest{Releases: []Versions{versionsOf(r)}}
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

// TestSchema1BundlesStillLoad: a bundle built before bundles held several releases (schema 1,
// one "versions" object) reads as a bundle of that one release, every artifact its own.
func TestSchema1BundlesStillLoad(t *testing.T) {
	dir := t.TempDir()
	const v1 = `{"schemaVersion": 1, "platform": "linux/amd64", "source": "built",
  "versions": {"kubernetes": "v1.36.3", "etcd": "v3.6.8", "coredns": "v1.14.2", "pause": "3.10.2", "cniPlugins": "v1.9.1", "flannel": "v0.28.10"},
  "files": [{"name": "kubelet", "path": "bin/kubelet", "sha256": "` + sha64 + `", "size": 1, "install": "/usr/bin/kubelet", "mode": "0755"}],
  "images": [{"component": "pause", "name": "registry.k8s.io/pause:3.10.2", "path": "images/pause.tar", "sha256": "` + sha64 + `", "size": 1, "digest": "sha256:` + sha64 + `", "id": "sha256:` + sha64 + `"}]}`
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), []byte(v1), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := LoadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := Versions{Kubernetes: "v1.36.3", Etcd: "v3.6.8", CoreDNS: "v1.14.2", Pause: "3.10.2", CNIPlugins: "v1.9.1", Flannel: "v0.28.10"}
	if m.SchemaVersion != SchemaVersion || len(m.Releases) != 1 || m.Releases[0] != want {
		t.Errorf("schema 1 read as schema %d, releases %+v; want [%+v]", m.SchemaVersion, m.Releases, want)
	}
	one, err := LoadRelease(dir, "v1.36.3")
	if err != nil || len(one.Files) != 1 || len(one.Images) != 1 {
		t.Errorf("LoadRelease(v1.36.3) of a schema-1 bundle: %+v, %v", one, err)
	}
	if _, err := LoadRelease(dir, "v1.37.2"); err == nil || !strings.Contains(err.Error(), "bundle "+dir+" does not hold Kubernetes v1.37.2 (it holds v1.36.3)") {
		t.Errorf("LoadRelease(v1.37.2): %v", err)
	}
}

const sha64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestForVersionTakesOneRelease: a bundle of two releases gives each of them its own files and
// images plus those they share; other artifacts stay out.
func TestForVersionTakesOneRelease(t *testing.T) {
	m := &Manifest{
		SchemaVersion: SchemaVersion, Platform: "linux/amd64",
		Releases: []Versions{{Kubernetes: "v1.36.3"}, {Kubernetes: "v1.37.2"}},
		Files: []File{
			{Name: "kubelet", Kubernetes: []string{"v1.36.3"}, Path: "bin/v1.36.3/kubelet"},
			{Name: "kubelet", Kubernetes: []string{"v1.37.2"}, Path: "bin/v1.37.2/kubelet"},
			{Name: "bridge", Path: "cni/bridge"},
		},
		Images: []Image{
			{Component: "etcd", Kubernetes: []string{"v1.36.3"}, Name: "registry.k8s.io/etcd:3.6.8-0"},
			{Component: "etcd", Kubernetes: []string{"v1.37.2"}, Name: "registry.k8s.io/etcd:3.7.0-0"},
			{Component: "pause", Name: "registry.k8s.io/pause:3.10.2"},
		},
	}
	if got := m.Kubernetes(); !slices.Equal(got, []string{"v1.36.3", "v1.37.2"}) {
		t.Errorf("Kubernetes() = %v", got)
	}
	one, err := m.ForVersion("v1.37.2")
	if err != nil {
		t.Fatal(err)
	}
	var paths, names []string
	for _, f := range one.Files {
		paths = append(paths, f.Path)
	}
	for _, im := range one.Images {
		names = append(names, im.Name)
	}
	if !slices.Equal(paths, []string{"bin/v1.37.2/kubelet", "cni/bridge"}) || !slices.Equal(names, []string{"registry.k8s.io/etcd:3.7.0-0", "registry.k8s.io/pause:3.10.2"}) ||
		!slices.Equal(one.Kubernetes(), []string{"v1.37.2"}) {
		t.Errorf("ForVersion(v1.37.2): files %v, images %v, releases %v", paths, names, one.Kubernetes())
	}
	if len(m.Files) != 3 || len(m.Releases) != 2 {
		t.Error("ForVersion changed the bundle's manifest")
	}
	_, err = m.ForVersion("v1.35.4")
	const want = "bundle DIR does not hold Kubernetes v1.35.4 (it holds v1.36.3, v1.37.2); build one that does: kforge bundle build --kubernetes v1.35.4,v1.36.3,v1.37.2 -o DIR"
	var me *MissingReleaseError
	if err == nil || err.Error() != want || !errors.As(err, &me) {
		t.Errorf("ForVersion(v1.35.4) = %v\nwant %s", err, want)
	}
}

// TestManifestCheckFindsWrongReleases: a manifest without releases, with one listed twice, or
// with an artifact of a release it does not list is refused.
func TestManifestCheckFindsWrongReleases(t *testing.T) {
	for _, c := range []struct {
		m    Manifest
		want string
	}{
		{Manifest{SchemaVersion: 2}, "no releases"},
		{Manifest{SchemaVersion: 2, Releases: []Versions{{Kubernetes: "v1.36.3"}, {Kubernetes: "v1.36.3"}}}, `Kubernetes version "v1.36.3" is empty or listed twice`},
		{Manifest{SchemaVersion: 2, Releases: []Versions{{Kubernetes: "v1.36.3"}}, Images: []Image{
			{Component: "etcd", Kubernetes: []string{"v1.37.2"}, Name: "registry.k8s.io/etcd:3.7.0-0", Path: "images/etcd.tar", SHA256: sha64, Digest: "sha256:" + sha64},
		}}, "image registry.k8s.io/etcd:3.7.0-0: belongs to Kubernetes v1.37.2, which the bundle's releases do not list"},
		{Manifest{SchemaVersion: 3, Releases: []Versions{{Kubernetes: "v1.36.3"}}}, "schemaVersion 3: this kforge reads schema versions 1 and 2"},
	} {
		if err := c.m.check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("check(%+v) = %v, want %q", c.m, err, c.want)
		}
	}
}
