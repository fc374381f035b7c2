// Package release is kforge's catalogue of Kubernetes releases: for each Kubernetes minor it
// installs, the versions of the components that go with it, the names of their images, and the
// version skew rules between them. It is plain data and pure functions over the standard
// library only, so that the bundle builder, the inventory's validation, the static pods and
// the addons all read the same facts.
//
// Supporting another minor is adding a row to the table below (and building a bundle of it).
package release

import (
	"fmt"
	"slices"
	"strings"
)

// Release is one row of the catalogue: a Kubernetes minor and what kforge installs with it.
type Release struct {
	// Minor is the Kubernetes minor, e.g. "v1.36".
	Minor string
	// Kubernetes is the Kubernetes version. In the table it is the minor's default patch
	// release (e.g. "v1.36.3"); For sets it to the version asked for.
	Kubernetes string
	// Semver is Kubernetes as numbers (v1.36.3: 1, 36, 3), set with it by For and All.
	Semver Semver
	// Etcd is the etcd release kubeadm of this minor pins (constants.DefaultEtcdVersion),
	// e.g. "v3.6.8"; EtcdImageTag is the tag kubeadm gives its image, e.g. "3.6.8-0".
	Etcd         string
	EtcdImageTag string
	// CoreDNS is the CoreDNS release kubeadm of this minor pins, e.g. "v1.14.2"; its image tag.
	CoreDNS string
	// Pause is the pause image tag kubeadm of this minor pins, e.g. "3.10.2".
	Pause string
	// CNIPlugins is the github.com/containernetworking/plugins release, e.g. "v1.9.1".
	CNIPlugins string
	// Flannel is the flannel release, e.g. "v0.28.10"; its image tag.
	Flannel string
	// NetworkPolicy is the sigs.k8s.io/kube-network-policies release (SIG Network's
	// NetworkPolicy agent), e.g. "v0.8.0"; its image tag.
	NetworkPolicy string
	// MetricsServer is the sigs.k8s.io/metrics-server release (the resource metrics API:
	// kubectl top, HorizontalPodAutoscalers), e.g. "v0.8.0"; its image tag.
	MetricsServer string
	// LocalPath is the github.com/rancher/local-path-provisioner release (the local volumes'
	// default StorageClass), e.g. "v0.0.30"; its image tag, and the tag of kforge's helper image
	// that serves it.
	LocalPath string

	// Containerd is the containerd 2 release the bundle brings for this minor: one that
	// containerd's own support matrix (RELEASES.md, "Kubernetes support") lists for it, e.g.
	// "v2.3.7". Runc is the runc release that containerd pins (script/setup/runc-version).
	// crictl is not bundled: sigs.k8s.io/cri-tools is not served by the Go module proxy.
	Containerd string
	Runc       string
	// HostContainerdMajor is the oldest containerd major release this minor's kubelet runs
	// on, for hosts that bring their own runtime (containerRuntime.install: host).
	HostContainerdMajor int
}

// releases is the catalogue, one row per supported Kubernetes minor, oldest first. The
// etcd, CoreDNS and pause columns are what kubeadm of that minor pins
// (cmd/kubeadm/app/constants); the CNI plugins and flannel columns are the releases kforge
// has been proven with on that minor. `kforge bundle build` checks the image columns against
// the built kubeadm's `kubeadm config images list`. The containerd column is the newest line
// containerd's support matrix lists first for the minor (v2.4.2's RELEASES.md: 1.35 "2.2.0+,
// 2.1.5+", 1.36 "2.3.0+, 2.2.0+", 1.37 "2.4.0+, 2.3.0+"), at its latest patch release on the
// module proxy; runc is what that containerd pins.
var releases = []Release{
	{Minor: "v1.35", Kubernetes: "v1.35.4", Etcd: "v3.6.6", EtcdImageTag: "3.6.6-0", CoreDNS: "v1.13.1", Pause: "3.10.1", CNIPlugins: "v1.9.1", Flannel: "v0.28.10", NetworkPolicy: "v0.8.0", MetricsServer: "v0.8.0", LocalPath: "v0.0.30",
		Containerd: "v2.2.9", Runc: "v1.3.6", HostContainerdMajor: 1},
	// v1.36 is the last minor that runs on containerd 1.x.
	{Minor: "v1.36", Kubernetes: "v1.36.3", Etcd: "v3.6.8", EtcdImageTag: "3.6.8-0", CoreDNS: "v1.14.2", Pause: "3.10.2", CNIPlugins: "v1.9.1", Flannel: "v0.28.10", NetworkPolicy: "v0.8.0", MetricsServer: "v0.8.0", LocalPath: "v0.0.30",
		Containerd: "v2.3.7", Runc: "v1.5.2", HostContainerdMajor: 1},
	// v1.37's kubelet needs containerd 2; etcd 3.7 is what kubeadm v1.37 defaults to.
	{Minor: "v1.37", Kubernetes: "v1.37.2", Etcd: "v3.7.0", EtcdImageTag: "3.7.0-0", CoreDNS: "v1.14.6", Pause: "3.10.2", CNIPlugins: "v1.9.1", Flannel: "v0.28.10", NetworkPolicy: "v0.8.0", MetricsServer: "v0.8.0", LocalPath: "v0.0.30",
		Containerd: "v2.4.2", Runc: "v1.5.2", HostContainerdMajor: 2},
}

// olderPatches are, by minor, the patch releases before its row's Kubernetes that kforge is
// proven with, oldest first: those the Go module proxy serves (k8s.io/kubernetes v1.36.1 and
// v1.36.3; v1.35 and v1.37 have one each). kubeadm of each pins its row's etcd, CoreDNS and
// pause (v1.36.1's constants are v1.36.3's), and `kforge bundle build` checks that again. A
// patch upgrade goes from one of these to its row's release, through the same upgrade as a
// minor's.
var olderPatches = map[string][]string{
	"v1.36": {"v1.36.1"},
}

// defaultMinor is the minor kforge installs when the inventory names no version; its row's
// Kubernetes is Default.
const defaultMinor = "v1.36"

// DefaultImageRepository is the registry kubeadm names the Kubernetes images under.
const DefaultImageRepository = "registry.k8s.io"

// flannelImage is where flannel publishes its image; it does not follow the image repository.
const flannelImage = "ghcr.io/flannel-io/flannel"

// metricsServerImage is where SIG Instrumentation publishes metrics-server's image; it does not
// follow the image repository either.
const metricsServerImage = "registry.k8s.io/metrics-server/metrics-server"

// localPathImage is where Rancher publishes local-path-provisioner's image; it does not follow
// the image repository either.
const localPathImage = "docker.io/rancher/local-path-provisioner"

// localPathHelperImage is kforge's own image that makes and removes the local volumes'
// directories on the nodes (bundle/internal/localpath), named under kforge's domain: only a
// bundle has it.
const localPathHelperImage = "kforge.dev/local-path-helper"

// networkPolicyImage is where SIG Network publishes kube-network-policies' image; it does not
// follow the image repository either.
const networkPolicyImage = "registry.k8s.io/networking/kube-network-policies"

// Supported returns the supported minors in order, e.g. ["v1.35", "v1.36", "v1.37"].
func Supported() []string {
	out := make([]string, len(releases))
	for i, r := range releases {
		out[i] = r.Minor
	}
	return out
}

// All returns a copy of the catalogue, one release per supported minor, oldest first, each
// with its minor's default Kubernetes version.
func All() []Release {
	out := slices.Clone(releases)
	for i := range out {
		out[i].Semver, _ = parseSemver(out[i].Kubernetes)
	}
	return out
}

// Catalogued returns every Kubernetes release the catalogue names, oldest first: each minor's
// older patches, then its row's release, e.g. [v1.35.4 v1.36.1 v1.36.3 v1.37.2].
func Catalogued() []string {
	var out []string
	for _, r := range releases {
		out = append(append(out, olderPatches[r.Minor]...), r.Kubernetes)
	}
	return out
}

// Patches returns the catalogued releases of minor ("v1.36"), oldest first, its row's last;
// nil for a minor the catalogue does not have.
func Patches(minor string) []string {
	var out []string
	for _, v := range Catalogued() {
		if p, err := parse(v); err == nil && p.minorString() == minor {
			out = append(out, v)
		}
	}
	return out
}

// Default returns the Kubernetes version kforge installs when none is named, e.g. "v1.36.3".
func Default() string {
	for _, r := range releases {
		if r.Minor == defaultMinor {
			return r.Kubernetes
		}
	}
	panic("release: the default minor " + defaultMinor + " has no row in the catalogue")
}

// VersionError is the error of For for a version it cannot install: what is wrong and what to
// use instead.
type VersionError struct {
	Version string
	Msg     string // e.g. "Kubernetes v1.29.0 is not supported by this kforge"
	Hint    string // e.g. "use v1.36.x (default v1.36.3)"
}

func (e *VersionError) Error() string { return e.Msg + "; " + e.Hint }

// For returns the release of Kubernetes version (vMAJOR.MINOR.PATCH, optionally with a
// pre-release suffix such as -rc.1), with Kubernetes set to version. A malformed version or
// one of a minor this kforge does not install is a *VersionError that lists the supported
// minors.
func For(version string) (Release, error) {
	v, err := parse(version)
	if err != nil {
		return Release{}, err
	}
	for _, r := range releases {
		if r.Minor == v.minorString() {
			r.Kubernetes = version
			r.Semver, _ = parseSemver(version) // parse checked it
			return r, nil
		}
	}
	return Release{}, &VersionError{
		Version: version,
		Msg:     fmt.Sprintf("Kubernetes %s is not supported by this kforge", version),
		Hint:    "use " + SupportedList() + " (default " + Default() + ")",
	}
}

// SupportedList is the supported minors for a person: "v1.35.x, v1.36.x or v1.37.x".
func SupportedList() string {
	var use []string
	for _, m := range Supported() {
		use = append(use, m+".x")
	}
	if len(use) == 1 {
		return use[0]
	}
	return strings.Join(use[:len(use)-1], ", ") + " or " + use[len(use)-1]
}

// Images are the image references of one release's components, exactly as the static pods,
// the addons, containerd's sandbox image and a bundle's manifest name them.
type Images struct {
	APIServer         string // <repo>/kube-apiserver:v1.36.3
	ControllerManager string // <repo>/kube-controller-manager:v1.36.3
	Scheduler         string // <repo>/kube-scheduler:v1.36.3
	KubeProxy         string // <repo>/kube-proxy:v1.36.3
	Etcd              string // <repo>/etcd:3.6.8-0
	CoreDNS           string // <repo>/coredns/coredns:v1.14.2
	Pause             string // <repo>/pause:3.10.2
	Flannel           string // ghcr.io/flannel-io/flannel:v0.28.10, whatever the repo
	NetworkPolicy     string // registry.k8s.io/networking/kube-network-policies:v0.8.0, whatever the repo
	MetricsServer     string // registry.k8s.io/metrics-server/metrics-server:v0.8.0, whatever the repo
	LocalPath         string // docker.io/rancher/local-path-provisioner:v0.0.30, whatever the repo
	LocalPathHelper   string // kforge.dev/local-path-helper:v0.0.30, whatever the repo
}

// Images returns the release's images under the image repository repo ("" =
// DefaultImageRepository), with the repository paths kubeadm uses (`kubeadm config images
// list --image-repository repo`). flannel's, kube-network-policies', metrics-server's and
// local-path-provisioner's images are always upstream's, and the local volumes' helper is
// kforge's own.
func (r Release) Images(repo string) Images {
	if repo == "" {
		repo = DefaultImageRepository
	}
	return Images{
		APIServer:         repo + "/kube-apiserver:" + r.Kubernetes,
		ControllerManager: repo + "/kube-controller-manager:" + r.Kubernetes,
		Scheduler:         repo + "/kube-scheduler:" + r.Kubernetes,
		KubeProxy:         repo + "/kube-proxy:" + r.Kubernetes,
		Etcd:              repo + "/etcd:" + r.EtcdImageTag,
		CoreDNS:           repo + "/coredns/coredns:" + r.CoreDNS,
		Pause:             repo + "/pause:" + r.Pause,
		Flannel:           flannelImage + ":" + r.Flannel,
		NetworkPolicy:     networkPolicyImage + ":" + r.NetworkPolicy,
		MetricsServer:     metricsServerImage + ":" + r.MetricsServer,
		LocalPath:         localPathImage + ":" + r.LocalPath,
		LocalPathHelper:   localPathHelperImage + ":" + r.LocalPath,
	}
}

// ByComponent returns the images by component name: kube-apiserver,
// kube-controller-manager, kube-scheduler, kube-proxy, etcd, coredns, pause, flannel,
// kube-network-policies, metrics-server, local-path-provisioner and local-path-helper.
func (im Images) ByComponent() map[string]string {
	return map[string]string{
		"kube-apiserver":          im.APIServer,
		"kube-controller-manager": im.ControllerManager,
		"kube-scheduler":          im.Scheduler,
		"kube-proxy":              im.KubeProxy,
		"etcd":                    im.Etcd,
		"coredns":                 im.CoreDNS,
		"pause":                   im.Pause,
		"flannel":                 im.Flannel,
		"kube-network-policies":   im.NetworkPolicy,
		"metrics-server":          im.MetricsServer,
		"local-path-provisioner":  im.LocalPath,
		"local-path-helper":       im.LocalPathHelper,
	}
}
