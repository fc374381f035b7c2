package templates

import (
	"crypto/rand"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
)

// renderTree renders every host's files of cluster c with a new PKI set.
// filesByPath is a host's files' contents by path.
func filesByPath(h HostFiles) map[string][]byte {
	files := map[string][]byte{}
	for _, f := range h.Files {
		files[f.Path] = f.Data
	}
	return files
}

func renderTree(t *testing.T, c *inventory.Cluster) ([]HostFiles, *pki.Set) {
	t.Helper()
	set, _, err := pki.EnsureCluster(c, "", t.TempDir(), time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	trees, err := Tree(c, set, Options{BootstrapToken: "abcdef.0123456789abcdef"})
	if err != nil {
		t.Fatal(err)
	}
	return trees, set
}

// inputHashes renders the tree and returns m1's static pods' InputsAnnotation by manifest.
func inputHashes(t *testing.T, set *pki.Set) map[string]string {
	t.Helper()
	trees, err := Tree(haCluster(), set, Options{BootstrapToken: "abcdef.0123456789abcdef"})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range trees[0].Files {
		if name, ok := strings.CutPrefix(f.Path, hostpath.ManifestsDir+"/"); ok {
			var pod corev1.Pod
			if err := yaml.Unmarshal(f.Data, &pod); err != nil {
				t.Fatal(err)
			}
			out[name] = pod.Annotations[InputsAnnotation]
			if len(out[name]) != 16 {
				t.Errorf("%s: %s = %q", name, InputsAnnotation, out[name])
			}
		}
	}
	if len(out) != 4 {
		t.Fatalf("m1 has %d manifests", len(out))
	}
	return out
}

// TestInputsHashFollowsWhatEachPodMounts: a static pod's manifest changes exactly when a file
// it mounts, names on its command line and reads only when it starts changes, so kubelet
// restarts the components whose credentials were re-issued and need a restart, and no others.
func TestInputsHashFollowsWhatEachPodMounts(t *testing.T) {
	ensure := func() *pki.Set {
		set, _, err := pki.EnsureCluster(haCluster(), "", t.TempDir(), time.Now(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	set, other := ensure(), ensure()
	base := inputHashes(t, set)
	if again := inputHashes(t, set); !maps.Equal(base, again) {
		t.Fatalf("same PKI, different hashes: %v, %v", base, again)
	}
	for _, tc := range []struct {
		cert    string // the re-issued certificate (a Key of the PKI set)
		changed []string
	}{
		{"controller-manager.conf", []string{"kube-controller-manager.yaml"}},
		{"scheduler.conf", []string{"kube-scheduler.yaml"}},
		{"admin.conf", nil}, // no static pod mounts it
		// Certificates their component reloads while it runs (Reloaded) restart nothing;
		// kube-controller-manager mounts all of pki/ but reads only what its flags name.
		{"apiserver@m1", nil},
		{"etcd-server@m1", nil},
		{"etcd-peer@m1", nil},
		{"apiserver-etcd-client", nil},
		{"apiserver-kubelet-client", nil},
		{"front-proxy-client", nil},
		// CAs are read once: a new one restarts whoever trusts it.
		{"etcd-ca", []string{"etcd.yaml", "kube-apiserver.yaml"}},
		{"front-proxy-ca", []string{"kube-apiserver.yaml", "kube-controller-manager.yaml"}},
	} {
		reissued := *set
		reissued.Certs, reissued.CAs, reissued.Trust = maps.Clone(set.Certs), maps.Clone(set.CAs), nil
		if _, ca := set.CAs[tc.cert]; ca {
			reissued.CAs[tc.cert] = other.CAs[tc.cert]
		} else {
			reissued.Certs[tc.cert] = other.Certs[tc.cert]
		}
		got := inputHashes(t, &reissued)
		for name, h := range got {
			want := base[name] != h
			if changed := strings.Contains(strings.Join(tc.changed, " "), name); changed != want {
				t.Errorf("%s re-issued: %s hash changed %v, want %v", tc.cert, name, want, changed)
			}
		}
	}
}

// TestRetiringMastersKeepLeaderElection: one master in the inventory, but another still in the
// cluster until it is pruned: the controller-manager keeps leader election on.
func TestRetiringMastersKeepLeaderElection(t *testing.T) {
	c := haCluster()
	c.Masters = c.Masters[:1]
	set, _, err := pki.EnsureCluster(c, "", t.TempDir(), time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for retiring, want := range map[int]string{0: "--leader-elect=false", 1: "--leader-elect=true"} {
		trees, err := Tree(c, set, Options{BootstrapToken: "abcdef.0123456789abcdef", RetiringMasters: retiring})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range trees[0].Files {
			if strings.HasSuffix(f.Path, "kube-controller-manager.yaml") && !strings.Contains(string(f.Data), want) {
				t.Errorf("%d retiring masters: controller-manager lacks %s", retiring, want)
			}
		}
	}
}

// TestTreeNamesTheReleaseImages: every host's files name the images of the inventory's
// release (its Release row) under its image repository: the four static pods on masters and
// containerd's sandbox image on every node. (An unsupported version never gets here: the
// inventory refuses it at load, and AtVersion too.)
func TestTreeNamesTheReleaseImages(t *testing.T) {
	c := haCluster()
	c.ImageRepository = "mirror.example:5000/k8s"
	trees, _ := renderTree(t, c)
	want := map[string]string{
		hostpath.ManifestsDir + "/kube-apiserver.yaml":          "image: mirror.example:5000/k8s/kube-apiserver:v1.36.3\n",
		hostpath.ManifestsDir + "/kube-controller-manager.yaml": "image: mirror.example:5000/k8s/kube-controller-manager:v1.36.3\n",
		hostpath.ManifestsDir + "/kube-scheduler.yaml":          "image: mirror.example:5000/k8s/kube-scheduler:v1.36.3\n",
		hostpath.ManifestsDir + "/etcd.yaml":                    "image: mirror.example:5000/k8s/etcd:3.6.8-0\n",
		hostpath.ContainerdConfigPath:                           `sandbox_image = "mirror.example:5000/k8s/pause:3.10.2"`,
	}
	for _, h := range trees {
		seen := 0
		for _, f := range h.Files {
			if w, ok := want[f.Path]; ok {
				seen++
				if !strings.Contains(string(f.Data), w) {
					t.Errorf("%s %s lacks %q", h.Node.Name, f.Path, w)
				}
			}
		}
		if n := map[bool]int{true: 5, false: 1}[h.Node.Role == inventory.RoleMaster]; seen != n {
			t.Errorf("%s: %d of the files naming images, want %d", h.Node.Name, seen, n)
		}
	}

}

// TestRuntimeFromTheBundle: with containerRuntime.install: bundle every node gets kforge's
// containerd unit, its modules-load.d file and a containerd 2 configuration that runs the
// bundle's runc; with the hosts' own runtime, none of that and a containerd 1.x configuration.
func TestRuntimeFromTheBundle(t *testing.T) {
	c := haCluster()
	set, _, err := pki.EnsureCluster(c, "", t.TempDir(), time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, install := range []string{inventory.RuntimeFromBundle, inventory.RuntimeFromHost} {
		c.ContainerRuntime.Install = install
		trees, err := Tree(c, set, Options{BootstrapToken: "abcdef.0123456789abcdef", Registries: []Registry{{Host: "registry.k8s.io", Mirrors: []string{"https://m:5000"}}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range trees {
			files := map[string]string{}
			for _, f := range tr.Files {
				files[f.Path] = string(f.Data)
			}
			_, unit := files[hostpath.ContainerdUnitPath]
			if _, hosts := files[hostpath.RegistryConfigDir+"/registry.k8s.io/hosts.toml"]; hosts != (install == inventory.RuntimeFromBundle) {
				t.Errorf("%s, install %s: hosts.toml rendered: %v", tr.Node.Name, install, hosts)
			}
			_, modules := files[hostpath.ModulesLoadFile]
			cfg := files[hostpath.ContainerdConfigPath]
			own := install == inventory.RuntimeFromBundle
			if unit != own || modules != own || strings.Contains(cfg, "version = 3") != own || strings.Contains(cfg, hostpath.RuncPath) != own {
				t.Errorf("%s, install %s: unit %v, modules %v, config:\n%s", tr.Node.Name, install, unit, modules, cfg)
			}
			if own && !strings.Contains(files[hostpath.ContainerdUnitPath], "ExecStart="+hostpath.RuntimeBinDir+"/containerd") {
				t.Errorf("unit:\n%s", files[hostpath.ContainerdUnitPath])
			}
		}
	}
}

// TestLocalAPIProxy: three masters without a controlPlaneEndpoint: every node gets the proxy's
// unit and a configuration listing every master's API server; every kubelet (masters too),
// kube-controller-manager and kube-scheduler aside, reaches the API through 127.0.0.1:6444,
// which every API server certificate is valid for. With an endpoint, no node gets the proxy.
func TestLocalAPIProxy(t *testing.T) {
	c := haCluster()
	c.ControlPlaneEndpoint = ""
	c.APIProxy.Port = inventory.DefaultAPIProxyPort
	trees, _ := renderTree(t, c)
	for _, h := range trees {
		files := filesByPath(h)
		if !strings.Contains(string(files[hostpath.APIProxyUnitPath]), "ExecStart="+hostpath.APIProxyPath+" --config "+hostpath.APIProxyConfig) {
			t.Errorf("%s: proxy unit:\n%s", h.Node.Name, files[hostpath.APIProxyUnitPath])
		}
		golden(t, "kforge-apiproxy.json", files[hostpath.APIProxyConfig])
		kubelet := hostpath.KubeletKubeconfig
		if h.Node.Role == inventory.RoleWorker {
			kubelet = hostpath.BootstrapKubeletConfig
		}
		if !strings.Contains(string(files[kubelet]), "server: https://127.0.0.1:6444\n") {
			t.Errorf("%s: %s does not use the proxy:\n%s", h.Node.Name, kubelet, files[kubelet])
		}
		if h.Node.Role != inventory.RoleMaster {
			continue
		}
		for _, conf := range []string{"controller-manager.conf", "scheduler.conf"} {
			if want := "server: https://" + h.Node.NodeIP() + ":6443\n"; !strings.Contains(string(files[hostpath.KubernetesDir+"/"+conf]), want) {
				t.Errorf("%s: %s is not its own API server's", h.Node.Name, conf)
			}
		}
		certs, err := pki.ParseCerts(files[hostpath.PKIDir+"/apiserver.crt"])
		if err != nil || certs[0].VerifyHostname("127.0.0.1") != nil || certs[0].VerifyHostname(h.Node.NodeIP()) != nil {
			t.Errorf("%s: apiserver.crt not valid for 127.0.0.1 and its address: %v %v", h.Node.Name, certs[0].IPAddresses, err)
		}
	}

	c.ControlPlaneEndpoint = "198.51.100.10:6443"
	trees, _ = renderTree(t, c)
	for _, h := range trees {
		for _, f := range h.Files {
			if f.Path == hostpath.APIProxyUnitPath || f.Path == hostpath.APIProxyConfig || strings.Contains(string(f.Data), "127.0.0.1:6444") {
				t.Errorf("%s: %s with a controlPlaneEndpoint", h.Node.Name, f.Path)
			}
		}
	}
}

// TestAdminKubeconfigListsTheMasters: without a controlPlaneEndpoint, the admin kubeconfig's
// current context names the first master and it has one context per other master.
func TestAdminKubeconfigListsTheMasters(t *testing.T) {
	c := haCluster()
	c.ControlPlaneEndpoint = ""
	set, _, err := pki.EnsureCluster(c, "", t.TempDir(), time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	data, err := AdminKubeconfig(c, set)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"kubernetes-admin@lab": "https://198.51.100.11:6443", "kubernetes-admin@lab-m2": "https://198.51.100.12:6443", "kubernetes-admin@lab-m3": "https://198.51.100.13:6443"}
	for name, server := range want {
		ctx := cfg.Contexts[name]
		if ctx == nil || cfg.Clusters[ctx.Cluster] == nil || cfg.Clusters[ctx.Cluster].Server != server || ctx.AuthInfo != "kubernetes-admin" {
			t.Errorf("context %s: %+v, want %s", name, ctx, server)
		}
	}
	if cfg.CurrentContext != "kubernetes-admin@lab" || len(cfg.Contexts) != 3 || !slices.Equal(AdminContexts(c), []string{"kubernetes-admin@lab-m2", "kubernetes-admin@lab-m3"}) {
		t.Errorf("current %s, %d contexts, AdminContexts %v", cfg.CurrentContext, len(cfg.Contexts), AdminContexts(c))
	}
}

// TestControlPlaneVIP: with a controlPlaneVIP, every master (and no worker) gets kforge-vip's
// unit and a configuration naming the address and the master, the API server certificates are
// valid for the VIP, the nodes keep their local proxy, and the admin kubeconfig has the one
// context at the VIP.
func TestControlPlaneVIP(t *testing.T) {
	c := haCluster()
	c.ControlPlaneEndpoint = ""
	c.ControlPlaneVIP = "198.51.100.50"
	c.APIProxy.Port = inventory.DefaultAPIProxyPort
	trees, set := renderTree(t, c)
	for _, h := range trees {
		files := filesByPath(h)
		if _, ok := files[hostpath.APIProxyConfig]; !ok {
			t.Errorf("%s: no API proxy with a VIP", h.Node.Name)
		}
		if h.Node.Role != inventory.RoleMaster {
			if _, ok := files[hostpath.VIPUnitPath]; ok {
				t.Errorf("%s: a worker got kforge-vip", h.Node.Name)
			}
			continue
		}
		if h.Node.Name == c.Masters[0].Name {
			golden(t, "kforge-vip.service", files[hostpath.VIPUnitPath])
			golden(t, "kforge-vip.json", files[hostpath.VIPConfig])
		} else if !strings.Contains(string(files[hostpath.VIPConfig]), `"identity": "`+h.Node.Name+`"`) {
			t.Errorf("%s: kforge-vip's configuration does not name the master:\n%s", h.Node.Name, files[hostpath.VIPConfig])
		}
		certs, err := pki.ParseCerts(files[hostpath.PKIDir+"/apiserver.crt"])
		if err != nil || certs[0].VerifyHostname("198.51.100.50") != nil || certs[0].VerifyHostname("127.0.0.1") != nil {
			t.Errorf("%s: apiserver.crt not valid for the VIP and 127.0.0.1: %v %v", h.Node.Name, certs[0].IPAddresses, err)
		}
	}
	data, err := AdminKubeconfig(c, set)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Contexts) != 1 || cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster].Server != "https://198.51.100.50:6443" || AdminContexts(c) != nil {
		t.Errorf("admin kubeconfig with a VIP: %d contexts, AdminContexts %v:\n%s", len(cfg.Contexts), AdminContexts(c), data)
	}
}

// TestMastersServeTheBundle: with a bundle and kforge's runtime, every master gets its
// registry's unit, a read-only configuration on its node IP with the certificate the cluster CA
// signed for it, and a loopback-only writable one; every node's containerd tries the masters'
// registries first for each registry the bundle's images are named after, each node starting
// at another master; without a bundle there is none of it.
func TestMastersServeTheBundle(t *testing.T) {
	c := haCluster()
	c.Bundle = "/bundle"
	c.ContainerRuntime.Install = inventory.RuntimeFromBundle
	trees, _ := renderTree(t, c)
	firsts := map[string]bool{}
	for i, h := range trees {
		files := filesByPath(h)
		if h.Node.Role == inventory.RoleMaster {
			serve := string(files[hostpath.RegistryConfig])
			if !strings.Contains(serve, `addr: "`+h.Node.NodeIP()+`:5000"`) || !strings.Contains(serve, "readonly:\n      enabled: true") {
				t.Errorf("%s: registry.yml:\n%s", h.Node.Name, serve)
			}
			fill := string(files[hostpath.RegistryFillConfig])
			if !strings.Contains(fill, `addr: "127.0.0.1:5001"`) || strings.Contains(fill, "readonly") || strings.Contains(fill, "tls") {
				t.Errorf("%s: registry-fill.yml:\n%s", h.Node.Name, fill)
			}
			certs, err := pki.ParseCerts(files[hostpath.RegistryCertPath])
			if err != nil || certs[0].VerifyHostname(h.Node.NodeIP()) != nil {
				t.Errorf("%s: the registry's certificate is not valid for %s: %v", h.Node.Name, h.Node.NodeIP(), err)
			}
			if i == 0 {
				golden(t, "kforge-registry.service", files[hostpath.RegistryUnitPath])
				golden(t, "registry.yml", files[hostpath.RegistryConfig])
				golden(t, "registry-fill.yml", files[hostpath.RegistryFillConfig])
			}
		} else if _, ok := files[hostpath.RegistryUnitPath]; ok {
			t.Errorf("%s: a worker got the registry", h.Node.Name)
		}
		for _, origin := range []string{"registry.k8s.io", "ghcr.io"} {
			toml := string(files[hostpath.RegistryConfigDir+"/"+origin+"/hosts.toml"])
			for _, m := range c.Masters {
				u := `[host."https://` + m.NodeIP() + `:5000/v2/` + origin + `"]`
				if !strings.Contains(toml, u) {
					t.Errorf("%s: %s/hosts.toml lacks %s:\n%s", h.Node.Name, origin, u, toml)
				}
			}
			if !strings.Contains(toml, "override_path = true") || !strings.Contains(toml, `ca = "`+hostpath.CACert+`"`) {
				t.Errorf("%s: %s/hosts.toml:\n%s", h.Node.Name, origin, toml)
			}
			if origin == "registry.k8s.io" {
				firsts[toml[strings.Index(toml, "[host."):][:40]] = true
			}
		}
	}
	if len(firsts) == 0 {
		t.Error("no node tries a master's registry first")
	}
	// The local volumes' images are named after docker.io and kforge.dev: the nodes try the
	// masters' registries for those too, but only while the cluster runs them.
	for _, on := range []bool{false, true} {
		c.LocalVolumes.Enabled = &on
		trees, _ := renderTree(t, c)
		for _, h := range trees {
			files := filesByPath(h)
			for _, origin := range []string{"docker.io", "kforge.dev"} {
				toml, ok := files[hostpath.RegistryConfigDir+"/"+origin+"/hosts.toml"]
				if ok != on || on && !strings.Contains(string(toml), `:5000/v2/`+origin+`"]`) {
					t.Errorf("%s, localVolumes.enabled %v: %s/hosts.toml %v:\n%s", h.Node.Name, on, origin, ok, toml)
				}
			}
		}
	}
	// Each node's order is a rotation of the masters chosen by its name alone: a fleet spreads
	// over every master, and a node's order stays when others come or go.
	starts := map[string]int{}
	for i := range 30 {
		n := inventory.Node{Host: inventory.Host{Name: fmt.Sprintf("worker-%d", i)}, Role: inventory.RoleWorker}
		urls := MasterRegistries(c, n)
		starts[urls[0]]++
		c2 := *c
		c2.Workers = append([]inventory.Host{{Name: "another", Address: "198.51.100.99"}}, c.Workers...)
		if again := MasterRegistries(&c2, n); !slices.Equal(again, urls) {
			t.Errorf("%s: %v, then %v with another worker listed first", n.Name, urls, again)
		}
	}
	if len(starts) != len(c.Masters) {
		t.Errorf("30 workers start at %d of %d masters: %v", len(starts), len(c.Masters), starts)
	}

	c.Bundle = ""
	trees, _ = renderTree(t, c)
	for _, h := range trees {
		for _, f := range h.Files {
			if f.Path == hostpath.RegistryUnitPath || strings.HasPrefix(f.Path, hostpath.RegistryConfigDir+"/") {
				t.Errorf("%s: %s without a bundle", h.Node.Name, f.Path)
			}
		}
	}
}

func TestImageOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"registry.k8s.io/pause:3.10": "registry.k8s.io", "ghcr.io/flannel-io/flannel:v0.28.10": "ghcr.io",
		"busybox:1.36": "docker.io", "library/busybox": "docker.io", "localhost/x:1": "localhost", "mirror:5000/x": "mirror:5000",
	} {
		if got := ImageOrigin(in); got != want {
			t.Errorf("ImageOrigin(%q) = %q, want %q", in, got, want)
		}
	}
}
