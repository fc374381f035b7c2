package bundle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/release"
)

// fakeBuilt puts a complete build of m into the cache, as binaries() leaves one: files by
// name, and the recipe that makes it valid.
func fakeBuilt(t *testing.T, cache string, m goModule, files map[string]string) {
	t.Helper()
	want := m.recipe()
	sum := sha256.Sum256([]byte(want))
	dir := filepath.Join(cache, "bin", m.Name, m.Version+"-"+hex.EncodeToString(sum[:])[:12])
	if _, err := os.Stat(dir); err == nil {
		return // a module two releases share
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, recipeFile), []byte(want), 0o444); err != nil {
		t.Fatal(err)
	}
}

// fakeRelease fills the cache with stand-ins for every binary of Kubernetes version: small
// files naming what they stand for, and a kubeadm that lists its release's images.
func fakeRelease(t *testing.T, cache, version string) {
	t.Helper()
	r, err := release.For(version)
	if err != nil {
		t.Fatal(err)
	}
	im := r.Images("")
	kubeadm := "#!/bin/sh\ncat <<'EOF'\n" + strings.Join([]string{im.APIServer, im.ControllerManager, im.Scheduler, im.KubeProxy, im.Etcd, im.CoreDNS, im.Pause}, "\n") + "\nEOF\n"
	km, err := kubernetesModule(version)
	if err != nil {
		t.Fatal(err)
	}
	k := map[string]string{}
	for _, c := range KubernetesCommands {
		k[c] = c + " " + version
	}
	k["kubeadm"] = kubeadm
	fakeBuilt(t, cache, km, k)
	fakeBuilt(t, cache, etcdModule(r.Etcd), map[string]string{"etcd": "etcd " + r.Etcd, "etcdctl": "etcdctl " + r.Etcd})
	fakeBuilt(t, cache, corednsModule(r.CoreDNS), map[string]string{"coredns": "coredns " + r.CoreDNS})
	cni := map[string]string{}
	for name := range CNIPlugins {
		cni[name] = name + " " + r.CNIPlugins
	}
	fakeBuilt(t, cache, cniModule(r.CNIPlugins), cni)
	fakeBuilt(t, cache, flannelModule(r.Flannel), map[string]string{"flanneld": "flanneld " + r.Flannel})
	fakeBuilt(t, cache, netpolModule(r.NetworkPolicy), map[string]string{"netpol": "netpol " + r.NetworkPolicy})
	fakeBuilt(t, cache, metricsServerModule(r.MetricsServer), map[string]string{"metrics-server": "metrics-server " + r.MetricsServer})
	fakeBuilt(t, cache, localPathModule(r.LocalPath), map[string]string{"local-path-provisioner": "local-path-provisioner " + r.LocalPath})
	fakeBuilt(t, cache, localPathHelperModule(r.LocalPath), map[string]string{"local-path-helper": "local-path-helper " + r.LocalPath})
	fakeBuilt(t, cache, pauseModule(r.Pause), map[string]string{"pause": "pause " + r.Pause})
	fakeBuilt(t, cache, containerdModule(r.Containerd), map[string]string{
		"containerd": "containerd " + r.Containerd, "containerd-shim-runc-v2": "shim " + r.Containerd, "ctr": "ctr " + r.Containerd})
	fakeBuilt(t, cache, runcModule(r.Runc), map[string]string{"runc": "runc " + r.Runc})
	fakeBuilt(t, cache, apiproxyModule(), map[string]string{APIProxyFile: "apiproxy"})
	fakeBuilt(t, cache, vipModule(), map[string]string{VIPFile: "vip"})
	fakeBuilt(t, cache, etcdsnapModule(), map[string]string{EtcdSnapshotFile: "etcdsnap"})
	fakeBuilt(t, cache, registryModule(RegistryVersion), map[string]string{"registry": "registry"})
}

// TestBuildSeveralReleases: a bundle of two releases stores what they share once (the CNI
// plugins, runc, flannel, the pause image both name) under the plain layout, and each release's own
// artifacts under their version; it verifies, and each release taken from it is complete and
// names its catalogue row's images. A bundle of one release keeps the plain layout.
func TestBuildSeveralReleases(t *testing.T) {
	if _, err := netfilterFiles(); err != nil {
		t.Skipf("the kube-proxy and flannel images need this machine's netfilter userspace: %v", err)
	}
	cache := t.TempDir()
	for _, v := range []string{"v1.35.4", "v1.36.3", "v1.37.2"} {
		fakeRelease(t, cache, v)
	}
	ctx := context.Background()
	out := filepath.Join(t.TempDir(), "bundle")
	m, err := Build(ctx, Options{BuildOptions: BuildOptions{CacheDir: cache}, Versions: []string{"v1.37.2", "v1.36.3", "v1.37.2"}, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Kubernetes(); !slices.Equal(got, []string{"v1.36.3", "v1.37.2"}) {
		t.Errorf("releases %v, want [v1.36.3 v1.37.2]", got)
	}
	var files, images []string
	for _, f := range m.Files {
		files = append(files, f.Path+" "+strings.Join(f.Kubernetes, ","))
	}
	for _, im := range m.Images {
		images = append(images, im.Path+" "+im.Name+" "+strings.Join(im.Kubernetes, ","))
	}
	wantFiles := []string{
		"bin/v1.36.3/kubeadm v1.36.3", "bin/v1.36.3/kubelet v1.36.3", "bin/v1.36.3/kubectl v1.36.3",
		"cni/bridge ", "cni/host-local ", "cni/loopback ", "cni/portmap ",
		"runtime/v2.3.7/containerd v1.36.3", "runtime/v2.3.7/containerd-shim-runc-v2 v1.36.3", "runtime/v2.3.7/ctr v1.36.3",
		"runtime/runc ",
		"bin/kforge-apiproxy ",
		"bin/kforge-vip ",
		"bin/kforge-etcd-snapshot ",
		"bin/kforge-registry ",
		"bin/v1.37.2/kubeadm v1.37.2", "bin/v1.37.2/kubelet v1.37.2", "bin/v1.37.2/kubectl v1.37.2",
		"runtime/v2.4.2/containerd v1.37.2", "runtime/v2.4.2/containerd-shim-runc-v2 v1.37.2", "runtime/v2.4.2/ctr v1.37.2",
	}
	wantImages := []string{
		"images/kube-apiserver-v1.36.3.tar registry.k8s.io/kube-apiserver:v1.36.3 v1.36.3",
		"images/kube-controller-manager-v1.36.3.tar registry.k8s.io/kube-controller-manager:v1.36.3 v1.36.3",
		"images/kube-scheduler-v1.36.3.tar registry.k8s.io/kube-scheduler:v1.36.3 v1.36.3",
		"images/kube-proxy-v1.36.3.tar registry.k8s.io/kube-proxy:v1.36.3 v1.36.3",
		"images/etcd-3.6.8-0.tar registry.k8s.io/etcd:3.6.8-0 v1.36.3",
		"images/coredns-v1.14.2.tar registry.k8s.io/coredns/coredns:v1.14.2 v1.36.3",
		"images/pause.tar registry.k8s.io/pause:3.10.2 ",
		"images/flannel.tar ghcr.io/flannel-io/flannel:v0.28.10 ",
		"images/kube-network-policies.tar registry.k8s.io/networking/kube-network-policies:v0.8.0 ",
		"images/metrics-server.tar registry.k8s.io/metrics-server/metrics-server:v0.8.0 ",
		"images/local-path-provisioner.tar docker.io/rancher/local-path-provisioner:v0.0.30 ",
		"images/local-path-helper.tar kforge.dev/local-path-helper:v0.0.30 ",
		"images/kube-apiserver-v1.37.2.tar registry.k8s.io/kube-apiserver:v1.37.2 v1.37.2",
		"images/kube-controller-manager-v1.37.2.tar registry.k8s.io/kube-controller-manager:v1.37.2 v1.37.2",
		"images/kube-scheduler-v1.37.2.tar registry.k8s.io/kube-scheduler:v1.37.2 v1.37.2",
		"images/kube-proxy-v1.37.2.tar registry.k8s.io/kube-proxy:v1.37.2 v1.37.2",
		"images/etcd-3.7.0-0.tar registry.k8s.io/etcd:3.7.0-0 v1.37.2",
		"images/coredns-v1.14.6.tar registry.k8s.io/coredns/coredns:v1.14.6 v1.37.2",
	}
	if !slices.Equal(files, wantFiles) {
		t.Errorf("files:\n%s\nwant:\n%s", strings.Join(files, "\n"), strings.Join(wantFiles, "\n"))
	}
	if !slices.Equal(images, wantImages) {
		t.Errorf("images:\n%s\nwant:\n%s", strings.Join(images, "\n"), strings.Join(wantImages, "\n"))
	}
	if _, err := Verify(ctx, out); err != nil {
		t.Fatalf("verify: %v", err)
	}
	kubelet, err := os.ReadFile(filepath.Join(out, "bin", "v1.37.2", "kubelet"))
	if err != nil || string(kubelet) != "kubelet v1.37.2" {
		t.Errorf("bin/v1.37.2/kubelet holds %q, %v", kubelet, err)
	}
	for _, v := range m.Kubernetes() {
		one, err := LoadRelease(out, v)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := release.For(v)
		names := r.Images("").ByComponent()
		if len(one.Files) != 15 || len(one.Images) != len(ImageComponents) {
			t.Errorf("%s: %d files, %d images; want 15 and %d", v, len(one.Files), len(one.Images), len(ImageComponents))
		}
		if f, ok := one.File("containerd"); !ok || !strings.Contains(f.Path, r.Containerd) || f.Install != "/usr/local/bin/containerd" {
			t.Errorf("%s: containerd %+v, want %s's", v, f, r.Containerd)
		}
		for _, c := range ImageComponents {
			if im, ok := one.Image(c); !ok || im.Name != names[c] {
				t.Errorf("%s: image %s is %+v, want %s", v, c, im, names[c])
			}
		}
		if f, ok := one.File("kubelet"); !ok || f.Install != "/usr/bin/kubelet" || !strings.Contains(f.Path, v) {
			t.Errorf("%s: kubelet %+v", v, f)
		}
	}

	// One release: the plain layout, nothing marked as belonging to some releases only.
	m, err = Build(ctx, Options{BuildOptions: BuildOptions{CacheDir: cache, Version: "v1.35.4"}, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		if f.Kubernetes != nil || strings.Count(f.Path, "/") != 1 {
			t.Errorf("one-release bundle: file %+v", f)
		}
	}
	for _, im := range m.Images {
		if im.Kubernetes != nil || im.Path != "images/"+im.Component+".tar" {
			t.Errorf("one-release bundle: image %+v", im)
		}
	}
	if got := m.Kubernetes(); !slices.Equal(got, []string{"v1.35.4"}) || m.SchemaVersion != SchemaVersion {
		t.Errorf("one-release bundle: releases %v, schema %d", got, m.SchemaVersion)
	}
	if _, err := os.Stat(filepath.Join(out, "bin", "v1.37.2")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the replaced bundle's bin/v1.37.2 is still there: %v", err)
	}
}

func TestBuildRefusesAnUnsupportedVersionFirst(t *testing.T) {
	out := filepath.Join(t.TempDir(), "bundle")
	_, err := Build(context.Background(), Options{BuildOptions: BuildOptions{CacheDir: t.TempDir()}, Versions: []string{"v1.36.3", "v1.34.0"}, Out: out})
	var ve *release.VersionError
	if !errors.As(err, &ve) || ve.Version != "v1.34.0" {
		t.Errorf("Build with v1.34.0: %v", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Build of an unsupported version made %s", out)
	}
}

// TestShipsVIPOnlyWhenNeeded: the virtual IP runner goes only to hosts that need it (the masters
// of a cluster with a controlPlaneVIP), as the API proxy goes only to those needing it.
func TestShipsVIPOnlyWhenNeeded(t *testing.T) {
	m := &Manifest{Files: []File{
		{Name: "kubelet", Install: "/usr/bin/kubelet", SHA256: "aa"},
		{Name: APIProxyFile, Install: hostpath.APIProxyPath, SHA256: "bb"},
		{Name: VIPFile, Install: hostpath.VIPPath, SHA256: "cc"},
	}}
	for _, tc := range []struct {
		need Need
		want string
	}{
		{Need{ControlPlane: true}, "kubelet"},
		{Need{ControlPlane: true, VIP: true}, "kubelet," + VIPFile},
		{Need{ControlPlane: true, VIP: true, APIProxy: true}, "kubelet," + APIProxyFile + "," + VIPFile},
		{Need{ControlPlane: true, VIP: true, Only: func(n string) bool { return n == "kubelet" }}, "kubelet"},
	} {
		var got []string
		for _, f := range PlanHost(m, HostState{}, tc.need).Install {
			got = append(got, f.Name)
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("%+v: ships %v, want %s", tc.need, got, tc.want)
		}
	}
}
