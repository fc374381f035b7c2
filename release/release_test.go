package release

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestSupportedAndDefault(t *testing.T) {
	if got := Supported(); !slices.Equal(got, []string{"v1.35", "v1.36", "v1.37"}) {
		t.Errorf("Supported() = %q, want [v1.35 v1.36 v1.37]", got)
	}
	if got := SupportedList(); got != "v1.35.x, v1.36.x or v1.37.x" {
		t.Errorf("SupportedList() = %q", got)
	}
	// The default stays v1.36.3 while v1.37 needs containerd 2, which kforge does not install.
	if got := Default(); got != "v1.36.3" {
		t.Errorf("Default() = %q, want v1.36.3", got)
	}
	all := All()
	if len(all) != 3 || all[0].Kubernetes != "v1.35.4" || all[1].Kubernetes != "v1.36.3" || all[2].Kubernetes != "v1.37.2" || all[2].Semver != (Semver{1, 37, 2, ""}) {
		t.Errorf("All() = %+v", all)
	}
	all[0].Etcd = "v0.0.0"
	if All()[0].Etcd != "v3.6.6" {
		t.Error("changing All's result changed the catalogue")
	}
	// Supported hands out a copy: a caller cannot change the catalogue.
	Supported()[0] = "v9.9"
	if Supported()[0] != "v1.35" {
		t.Error("changing Supported's result changed the catalogue")
	}
}

// TestRowsAreKubeadms pins each row to what kubeadm of its minor pins
// (cmd/kubeadm/app/constants: DefaultEtcdVersion, CoreDNSVersion, PauseVersion), read from
// k8s.io/kubernetes v1.35.4, v1.36.3 and v1.37.2 (`kforge bundle build` checks the same against
// the built kubeadm's `kubeadm config images list`), and to the containerd containerd's support
// matrix recommends for the minor, with the runc that containerd pins
// (script/setup/runc-version: v2.2.9 pins v1.3.6, v2.3.7 and v2.4.2 pin v1.5.2).
func TestRowsAreKubeadms(t *testing.T) {
	want := map[string]Release{
		"v1.35.4": {Minor: "v1.35", Kubernetes: "v1.35.4", Etcd: "v3.6.6", EtcdImageTag: "3.6.6-0", CoreDNS: "v1.13.1", Pause: "3.10.1", CNIPlugins: "v1.9.1", Flannel: "v0.28.10", NetworkPolicy: "v0.8.0", MetricsServer: "v0.8.0", LocalPath: "v0.0.30", Containerd: "v2.2.9", Runc: "v1.3.6", HostContainerdMajor: 1},
		"v1.36.3": {Minor: "v1.36", Kubernetes: "v1.36.3", Etcd: "v3.6.8", EtcdImageTag: "3.6.8-0", CoreDNS: "v1.14.2", Pause: "3.10.2", CNIPlugins: "v1.9.1", Flannel: "v0.28.10", NetworkPolicy: "v0.8.0", MetricsServer: "v0.8.0", LocalPath: "v0.0.30", Containerd: "v2.3.7", Runc: "v1.5.2", HostContainerdMajor: 1},
		"v1.37.2": {Minor: "v1.37", Kubernetes: "v1.37.2", Etcd: "v3.7.0", EtcdImageTag: "3.7.0-0", CoreDNS: "v1.14.6", Pause: "3.10.2", CNIPlugins: "v1.9.1", Flannel: "v0.28.10", NetworkPolicy: "v0.8.0", MetricsServer: "v0.8.0", LocalPath: "v0.0.30", Containerd: "v2.4.2", Runc: "v1.5.2", HostContainerdMajor: 2},
	}
	for _, r := range releases {
		w, ok := want[r.Kubernetes]
		if !ok {
			t.Errorf("row %s: default %s has no expectation here; add it", r.Minor, r.Kubernetes)
			continue
		}
		if r != w {
			t.Errorf("row %s = %+v\nwant %+v", r.Minor, r, w)
		}
	}
	if len(releases) != len(want) {
		t.Errorf("%d rows, want %d", len(releases), len(want))
	}
}

// TestCatalogueRowsAreConsistent guards the table itself, so that adding a row cannot slip in
// a typo: ordered minors without duplicates, every version well formed and of its row's
// minor, the etcd image tag of the etcd version, and a row for the default minor.
func TestCatalogueRowsAreConsistent(t *testing.T) {
	semver := regexp.MustCompile(`^v\d+\.\d+\.\d+$`)
	prev := version{}
	for i, r := range releases {
		v, err := parse(r.Kubernetes)
		if err != nil || v.minorString() != r.Minor {
			t.Errorf("row %d: Kubernetes %q is not a release of minor %s (%v)", i, r.Kubernetes, r.Minor, err)
			continue
		}
		if i > 0 && (v.major < prev.major || v.major == prev.major && v.minor <= prev.minor) {
			t.Errorf("row %d (%s) does not follow %s: keep the rows ordered, one per minor", i, r.Minor, prev.minorString())
		}
		prev = v
		for name, s := range map[string]string{"Etcd": r.Etcd, "CoreDNS": r.CoreDNS, "CNIPlugins": r.CNIPlugins, "Flannel": r.Flannel, "NetworkPolicy": r.NetworkPolicy, "MetricsServer": r.MetricsServer} {
			if !semver.MatchString(s) {
				t.Errorf("%s: %s %q is not vX.Y.Z", r.Minor, name, s)
			}
		}
		if !regexp.MustCompile(`^\d+\.\d+(\.\d+)?$`).MatchString(r.Pause) {
			t.Errorf("%s: pause tag %q is not X.Y[.Z]", r.Minor, r.Pause)
		}
		if !strings.HasPrefix(r.EtcdImageTag, strings.TrimPrefix(r.Etcd, "v")+"-") {
			t.Errorf("%s: etcd image tag %q is not of etcd %s", r.Minor, r.EtcdImageTag, r.Etcd)
		}
	}
	if _, err := For(Default()); err != nil {
		t.Errorf("the default %s has no row: %v", Default(), err)
	}
}

// TestPatchesAreCatalogued: the catalogue names more than one patch where the module proxy
// serves them (v1.36.1 and v1.36.3), each of its own minor, older than its row's release, and
// in order; Patches gives a minor's.
func TestPatchesAreCatalogued(t *testing.T) {
	if got := Catalogued(); !slices.Equal(got, []string{"v1.35.4", "v1.36.1", "v1.36.3", "v1.37.2"}) {
		t.Errorf("Catalogued() = %v", got)
	}
	if got := Patches("v1.36"); !slices.Equal(got, []string{"v1.36.1", "v1.36.3"}) {
		t.Errorf(`Patches("v1.36") = %v`, got)
	}
	if got := Patches("v1.29"); got != nil {
		t.Errorf(`Patches("v1.29") = %v, want nil`, got)
	}
	for minor, ps := range olderPatches {
		i := slices.IndexFunc(releases, func(r Release) bool { return r.Minor == minor })
		if i < 0 {
			t.Errorf("older patches of %s, a minor with no row", minor)
			continue
		}
		row := releases[i]
		prev := ""
		for _, p := range ps {
			v, err := For(p)
			if err != nil || v.Minor != minor || Compare(p, row.Kubernetes) >= 0 || prev != "" && Compare(prev, p) >= 0 {
				t.Errorf("older patch %s of %s (row %s, after %q): %v; keep them of the minor, ordered and older than its row's", p, minor, row.Kubernetes, prev, err)
			}
			prev = p
		}
	}
}

func TestFor(t *testing.T) {
	for _, c := range []struct {
		version string
		want    Release // zero: an error
		err     string
	}{
		{version: "v1.36.3", want: Release{Minor: "v1.36", Kubernetes: "v1.36.3", Semver: Semver{1, 36, 3, ""}, Etcd: "v3.6.8", EtcdImageTag: "3.6.8-0", CoreDNS: "v1.14.2", Pause: "3.10.2", CNIPlugins: "v1.9.1", Flannel: "v0.28.10", NetworkPolicy: "v0.8.0", MetricsServer: "v0.8.0", LocalPath: "v0.0.30", Containerd: "v2.3.7", Runc: "v1.5.2", HostContainerdMajor: 1}},
		{version: "v1.36.0", want: Release{Minor: "v1.36", Kubernetes: "v1.36.0", Semver: Semver{1, 36, 0, ""}, Etcd: "v3.6.8", EtcdImageTag: "3.6.8-0", CoreDNS: "v1.14.2", Pause: "3.10.2", CNIPlugins: "v1.9.1", Flannel: "v0.28.10", NetworkPolicy: "v0.8.0", MetricsServer: "v0.8.0", LocalPath: "v0.0.30", Containerd: "v2.3.7", Runc: "v1.5.2", HostContainerdMajor: 1}},
		{version: "v1.36.1-rc.0", want: Release{Minor: "v1.36", Kubernetes: "v1.36.1-rc.0", Semver: Semver{1, 36, 1, "rc.0"}, Etcd: "v3.6.8", EtcdImageTag: "3.6.8-0", CoreDNS: "v1.14.2", Pause: "3.10.2", CNIPlugins: "v1.9.1", Flannel: "v0.28.10", NetworkPolicy: "v0.8.0", MetricsServer: "v0.8.0", LocalPath: "v0.0.30", Containerd: "v2.3.7", Runc: "v1.5.2", HostContainerdMajor: 1}},
		{version: "v1.35.4", want: Release{Minor: "v1.35", Kubernetes: "v1.35.4", Semver: Semver{1, 35, 4, ""}, Etcd: "v3.6.6", EtcdImageTag: "3.6.6-0", CoreDNS: "v1.13.1", Pause: "3.10.1", CNIPlugins: "v1.9.1", Flannel: "v0.28.10", NetworkPolicy: "v0.8.0", MetricsServer: "v0.8.0", LocalPath: "v0.0.30", Containerd: "v2.2.9", Runc: "v1.3.6", HostContainerdMajor: 1}},
		{version: "v1.35.0", want: Release{Minor: "v1.35", Kubernetes: "v1.35.0", Semver: Semver{1, 35, 0, ""}, Etcd: "v3.6.6", EtcdImageTag: "3.6.6-0", CoreDNS: "v1.13.1", Pause: "3.10.1", CNIPlugins: "v1.9.1", Flannel: "v0.28.10", NetworkPolicy: "v0.8.0", MetricsServer: "v0.8.0", LocalPath: "v0.0.30", Containerd: "v2.2.9", Runc: "v1.3.6", HostContainerdMajor: 1}},
		{version: "v1.37.2", want: Release{Minor: "v1.37", Kubernetes: "v1.37.2", Semver: Semver{1, 37, 2, ""}, Etcd: "v3.7.0", EtcdImageTag: "3.7.0-0", CoreDNS: "v1.14.6", Pause: "3.10.2", CNIPlugins: "v1.9.1", Flannel: "v0.28.10", NetworkPolicy: "v0.8.0", MetricsServer: "v0.8.0", LocalPath: "v0.0.30", Containerd: "v2.4.2", Runc: "v1.5.2", HostContainerdMajor: 2}},
		{version: "v1.37.0-rc.1", want: Release{Minor: "v1.37", Kubernetes: "v1.37.0-rc.1", Semver: Semver{1, 37, 0, "rc.1"}, Etcd: "v3.7.0", EtcdImageTag: "3.7.0-0", CoreDNS: "v1.14.6", Pause: "3.10.2", CNIPlugins: "v1.9.1", Flannel: "v0.28.10", NetworkPolicy: "v0.8.0", MetricsServer: "v0.8.0", LocalPath: "v0.0.30", Containerd: "v2.4.2", Runc: "v1.5.2", HostContainerdMajor: 2}},
		{version: "v1.29.0", err: "Kubernetes v1.29.0 is not supported by this kforge; use v1.35.x, v1.36.x or v1.37.x (default v1.36.3)"},
		{version: "v1.34.9", err: "Kubernetes v1.34.9 is not supported by this kforge; use v1.35.x, v1.36.x or v1.37.x (default v1.36.3)"},
		{version: "v1.38.0", err: "Kubernetes v1.38.0 is not supported by this kforge; use v1.35.x, v1.36.x or v1.37.x (default v1.36.3)"},
		{version: "v2.36.0", err: "Kubernetes v2.36.0 is not supported by this kforge; use v1.35.x, v1.36.x or v1.37.x (default v1.36.3)"},
		{version: "1.36.3", err: `"1.36.3" is not a Kubernetes version; write it as v1.36.3`},
		{version: "v1.36", err: `"v1.36" is not a Kubernetes version; write it as v1.36.3`},
		{version: "v1.036.3", err: `"v1.036.3" is not a Kubernetes version; write it as v1.36.3`},
		{version: "latest", err: `"latest" is not a Kubernetes version; write it as v1.36.3`},
		{version: "", err: `"" is not a Kubernetes version; write it as v1.36.3`},
		{version: "v1.99999999999999999999.0", err: `"v1.99999999999999999999.0" is not a Kubernetes version; write it as v1.36.3`},
	} {
		got, err := For(c.version)
		if c.err != "" {
			var ve *VersionError
			if err == nil || err.Error() != c.err || !errors.As(err, &ve) || ve.Version != c.version {
				t.Errorf("For(%q) = %+v, %v; want the error %q", c.version, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("For(%q) = %+v, %v; want %+v", c.version, got, err, c.want)
		}
	}
}

// TestImagesAreWhatHostsGet: the image references are exactly those kubeadm v1.36.3 names
// (`kubeadm config images list`) and kforge has always deployed; a change here changes every
// host's static pods, addons and bundle.
func TestImagesAreWhatHostsGet(t *testing.T) {
	r, err := For("v1.36.3")
	if err != nil {
		t.Fatal(err)
	}
	want := Images{
		APIServer:         "registry.k8s.io/kube-apiserver:v1.36.3",
		ControllerManager: "registry.k8s.io/kube-controller-manager:v1.36.3",
		Scheduler:         "registry.k8s.io/kube-scheduler:v1.36.3",
		KubeProxy:         "registry.k8s.io/kube-proxy:v1.36.3",
		Etcd:              "registry.k8s.io/etcd:3.6.8-0",
		CoreDNS:           "registry.k8s.io/coredns/coredns:v1.14.2",
		Pause:             "registry.k8s.io/pause:3.10.2",
		Flannel:           "ghcr.io/flannel-io/flannel:v0.28.10",
		NetworkPolicy:     "registry.k8s.io/networking/kube-network-policies:v0.8.0",
		MetricsServer:     "registry.k8s.io/metrics-server/metrics-server:v0.8.0",
		LocalPath:         "docker.io/rancher/local-path-provisioner:v0.0.30",
		LocalPathHelper:   "kforge.dev/local-path-helper:v0.0.30",
	}
	if got := r.Images(""); got != want {
		t.Errorf("Images(\"\") = %+v\nwant %+v", got, want)
	}
	if got := r.Images("registry.k8s.io"); got != want {
		t.Errorf("Images(registry.k8s.io) = %+v\nwant %+v", got, want)
	}
	mirror := Images{
		APIServer:         "mirror.example:5000/k8s/kube-apiserver:v1.36.3",
		ControllerManager: "mirror.example:5000/k8s/kube-controller-manager:v1.36.3",
		Scheduler:         "mirror.example:5000/k8s/kube-scheduler:v1.36.3",
		KubeProxy:         "mirror.example:5000/k8s/kube-proxy:v1.36.3",
		Etcd:              "mirror.example:5000/k8s/etcd:3.6.8-0",
		CoreDNS:           "mirror.example:5000/k8s/coredns/coredns:v1.14.2",
		Pause:             "mirror.example:5000/k8s/pause:3.10.2",
		Flannel:           "ghcr.io/flannel-io/flannel:v0.28.10",
		NetworkPolicy:     "registry.k8s.io/networking/kube-network-policies:v0.8.0",
		MetricsServer:     "registry.k8s.io/metrics-server/metrics-server:v0.8.0",
		LocalPath:         "docker.io/rancher/local-path-provisioner:v0.0.30",
		LocalPathHelper:   "kforge.dev/local-path-helper:v0.0.30",
	}
	if got := r.Images("mirror.example:5000/k8s"); got != mirror {
		t.Errorf("Images(mirror) = %+v\nwant %+v", got, mirror)
	}
	by := want.ByComponent()
	for c, name := range map[string]string{
		"kube-apiserver": want.APIServer, "kube-controller-manager": want.ControllerManager,
		"kube-scheduler": want.Scheduler, "kube-proxy": want.KubeProxy, "etcd": want.Etcd,
		"coredns": want.CoreDNS, "pause": want.Pause, "flannel": want.Flannel, "kube-network-policies": want.NetworkPolicy, "metrics-server": want.MetricsServer,
		"local-path-provisioner": want.LocalPath, "local-path-helper": want.LocalPathHelper,
	} {
		if by[c] != name {
			t.Errorf("ByComponent()[%s] = %q, want %q", c, by[c], name)
		}
	}
	if len(by) != 12 {
		t.Errorf("ByComponent() has %d entries, want 12: %v", len(by), by)
	}
}

func TestCanUpgrade(t *testing.T) {
	for _, c := range []struct {
		from, to string
		err      string // "": allowed
	}{
		{"v1.36.2", "v1.36.3", ""},
		{"v1.36.3", "v1.36.3", ""},
		{"v1.36.3", "v1.36.2", ""}, // a patch may go back
		{"v1.35.4", "v1.36.3", ""},
		{"v1.36.3", "v1.37.0-rc.1", ""},
		{"v1.34.1", "v1.36.3", "cannot upgrade from v1.34.1 to v1.36.3 in one step: upgrades move one minor at a time; upgrade to a v1.35.x release first"},
		{"v1.36.3", "v1.35.9", "cannot upgrade from v1.36.3 to v1.35.9: that downgrades the minor, which Kubernetes does not support; stay on a v1.36.x release"},
		{"v1.36.3", "v2.0.0", "cannot upgrade from v1.36.3 to v2.0.0: Kubernetes does not upgrade across major versions"},
		{"1.36.3", "v1.36.4", `upgrade from: "1.36.3" is not a Kubernetes version; write it as v1.36.3`},
		{"v1.36.3", "next", `upgrade to: "next" is not a Kubernetes version; write it as v1.36.3`},
	} {
		err := CanUpgrade(c.from, c.to)
		if c.err == "" && err != nil || c.err != "" && (err == nil || err.Error() != c.err) {
			t.Errorf("CanUpgrade(%s, %s) = %v, want %q", c.from, c.to, err, c.err)
		}
	}
}

func TestKubeletSkewOK(t *testing.T) {
	const policy = " (" + skewPolicy + ")"
	for _, c := range []struct {
		apiserver, kubelet string
		err                string
	}{
		{"v1.36.3", "v1.36.3", ""},
		{"v1.36.3", "v1.36.0", ""},
		{"v1.36.0", "v1.36.3", ""}, // patches do not count
		{"v1.36.3", "v1.35.1", ""},
		{"v1.36.3", "v1.33.0", ""},
		{"v1.36.3", "v1.32.9", "kubelet v1.32.9 is too old for kube-apiserver v1.36.3: the version skew policy allows kubelet v1.33 to v1.36 with it" + policy + "; upgrade kubelet first"},
		{"v1.36.3", "v1.37.0", "kubelet v1.37.0 is too new for kube-apiserver v1.36.3: the version skew policy allows kubelet v1.33 to v1.36 with it" + policy + "; upgrade kube-apiserver first, or use a kubelet of those minors"},
		{"v1.36.3", "v2.36.3", "kubelet v2.36.3 and kube-apiserver v1.36.3 are of different major versions: the version skew policy allows kubelet v1.33 to v1.36 with it" + policy},
		{"v1.36.3", "v1.36", `kubelet version: "v1.36" is not a Kubernetes version; write it as v1.36.3`},
		{"1.36.3", "v1.36.3", `kube-apiserver version: "1.36.3" is not a Kubernetes version; write it as v1.36.3`},
	} {
		err := KubeletSkewOK(c.apiserver, c.kubelet)
		if c.err == "" && err != nil || c.err != "" && (err == nil || err.Error() != c.err) {
			t.Errorf("KubeletSkewOK(%s, %s) = %v\nwant %q", c.apiserver, c.kubelet, err, c.err)
		}
	}
}

func TestSkewOKOtherComponents(t *testing.T) {
	for _, c := range []struct {
		component, apiserver, version string
		ok                            bool
	}{
		{"kubectl", "v1.36.3", "v1.37.0", true},
		{"kubectl", "v1.36.3", "v1.35.0", true},
		{"kubectl", "v1.36.3", "v1.38.0", false},
		{"kubectl", "v1.36.3", "v1.34.0", false},
		{"kube-controller-manager", "v1.36.3", "v1.35.2", true},
		{"kube-controller-manager", "v1.36.3", "v1.34.2", false},
		{"kube-controller-manager", "v1.36.3", "v1.37.0", false},
		{"kube-scheduler", "v1.36.3", "v1.36.3", true},
		{"kube-scheduler", "v1.36.3", "v1.37.0", false},
		{"kube-proxy", "v1.36.3", "v1.33.0", true},
		{"kube-proxy", "v1.36.3", "v1.37.0", false},
		{"kube-apiserver", "v1.36.3", "v1.35.0", true},
		{"kube-apiserver", "v1.36.3", "v1.34.0", false},
	} {
		err := SkewOK(c.component, c.apiserver, c.version)
		if (err == nil) != c.ok {
			t.Errorf("SkewOK(%s, %s, %s) = %v, want ok=%v", c.component, c.apiserver, c.version, err, c.ok)
		}
	}
	err := SkewOK("kubeadm", "v1.36.3", "v1.36.3")
	want := `no version skew rule for component "kubeadm" (kforge knows kubelet, kube-proxy, kube-controller-manager, kube-scheduler, kubectl, kube-apiserver)`
	if err == nil || err.Error() != want {
		t.Errorf("SkewOK(kubeadm) = %v, want %q", err, want)
	}
	if err := SkewOK("kubectl", "v1.36.3", "v1.38.0"); err == nil || !strings.Contains(err.Error(), "allows kubectl v1.35 to v1.37") {
		t.Errorf("kubectl two minors newer: %v", err)
	}
	if err := SkewOK("kube-scheduler", "v1.36.3", "v1.34.0"); err == nil || !strings.Contains(err.Error(), "allows kube-scheduler v1.35 to v1.36") {
		t.Errorf("kube-scheduler two minors older: %v", err)
	}
}

// TestUpgradePathThroughTheCatalogue: the catalogue's rows are consecutive minors, so every
// supported release can be reached from the oldest one step at a time, and the skew policy
// holds at each step's midpoint (the new kube-apiserver with the old kubelets, controller
// managers and schedulers; old and new kube-apiservers side by side).
func TestUpgradePathThroughTheCatalogue(t *testing.T) {
	for i := 1; i < len(releases); i++ {
		from, to := releases[i-1].Kubernetes, releases[i].Kubernetes
		if err := CanUpgrade(from, to); err != nil {
			t.Errorf("CanUpgrade(%s, %s): %v", from, to, err)
		}
		if err := CanUpgrade(to, from); err == nil {
			t.Errorf("CanUpgrade(%s, %s) allowed a minor downgrade", to, from)
		}
		for _, c := range []string{"kubelet", "kube-proxy", "kube-controller-manager", "kube-scheduler", "kubectl", "kube-apiserver"} {
			if err := SkewOK(c, to, from); err != nil {
				t.Errorf("mid-upgrade %s → %s: %s %s with kube-apiserver %s: %v", from, to, c, from, to, err)
			}
		}
		if err := SkewOK("kube-apiserver", from, to); err != nil {
			t.Errorf("HA kube-apiservers %s and %s: %v", from, to, err)
		}
		if err := KubeletSkewOK(from, to); err == nil {
			t.Errorf("kubelet %s was allowed with kube-apiserver %s: kubelets upgrade after the control plane", to, from)
		}
	}
}

func TestSkewAndUpgradeBetweenSupportedMinors(t *testing.T) {
	for _, c := range []struct {
		from, to string
		err      string
	}{
		{"v1.35.4", "v1.36.3", ""},
		{"v1.36.3", "v1.37.2", ""},
		{"v1.35.0", "v1.35.4", ""},
		{"v1.37.2", "v1.37.0", ""},
		{"v1.35.4", "v1.37.2", "cannot upgrade from v1.35.4 to v1.37.2 in one step: upgrades move one minor at a time; upgrade to a v1.36.x release first"},
		{"v1.37.2", "v1.36.3", "cannot upgrade from v1.37.2 to v1.36.3: that downgrades the minor, which Kubernetes does not support; stay on a v1.37.x release"},
	} {
		err := CanUpgrade(c.from, c.to)
		if c.err == "" && err != nil || c.err != "" && (err == nil || err.Error() != c.err) {
			t.Errorf("CanUpgrade(%s, %s) = %v, want %q", c.from, c.to, err, c.err)
		}
	}
	for _, c := range []struct {
		component, apiserver, version string
		ok                            bool
	}{
		{"kubelet", "v1.37.2", "v1.35.4", true},    // two minors behind: allowed
		{"kube-proxy", "v1.37.2", "v1.35.4", true}, // likewise
		{"kubelet", "v1.35.4", "v1.36.3", false},   // never newer
		{"kube-controller-manager", "v1.37.2", "v1.36.3", true},
		{"kube-controller-manager", "v1.37.2", "v1.35.4", false},
		{"kube-scheduler", "v1.36.3", "v1.37.2", false},
		{"kube-apiserver", "v1.35.4", "v1.37.2", false}, // HA instances within one minor
		{"kubectl", "v1.35.4", "v1.37.2", false},
		{"kubectl", "v1.36.3", "v1.37.2", true},
	} {
		if err := SkewOK(c.component, c.apiserver, c.version); (err == nil) != c.ok {
			t.Errorf("SkewOK(%s, %s, %s) = %v, want ok=%v", c.component, c.apiserver, c.version, err, c.ok)
		}
	}
}

func TestSortVersions(t *testing.T) {
	got := SortVersions([]string{"v1.37.2", "v1.36.3", "v1.36.10", "v1.37.0", "v1.37.0-rc.1", "v1.36.3", "nonsense", "v1.9.0"})
	want := []string{"v1.9.0", "v1.36.3", "v1.36.10", "v1.37.0-rc.1", "v1.37.0", "v1.37.2", "nonsense"}
	if !slices.Equal(got, want) {
		t.Errorf("SortVersions = %q\nwant %q", got, want)
	}
	if Compare("v1.36.3", "v1.36.3") != 0 || Compare("v2.0.0", "v1.99.99") != 1 || Compare("v1.37.0-alpha.1", "v1.37.0-beta.0") != -1 {
		t.Error("Compare")
	}
}
