package bundle

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/kforge/kforge/release"
)

// KubernetesCommands are the Kubernetes binaries KubernetesBinaries builds, by file name.
var KubernetesCommands = []string{
	"kubeadm", "kubelet", "kubectl",
	"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy",
}

var kubeVersionRE = regexp.MustCompile(`^v1\.(\d+)\.(\d+)$`)

// KubernetesBinaries returns a directory holding kubeadm, kubelet, kubectl, kube-apiserver,
// kube-controller-manager, kube-scheduler and kube-proxy of version o.Version (e.g. "v1.36.3"),
// each reporting that version. They are built from the Go module k8s.io/kubernetes with the
// local Go toolchain (CGO_ENABLED=0) on first use and cached under
// <cache>/bin/kubernetes/<version>-<recipe hash>; later calls return the cached directory at once. The
// directory must be treated as read-only.
func KubernetesBinaries(ctx context.Context, o BuildOptions) (string, error) {
	m, err := kubernetesModule(o.Version)
	if err != nil {
		return "", err
	}
	return binaries(ctx, o, m)
}

// EtcdBinaries returns a directory holding etcd and etcdctl of the version bundled with
// Kubernetes o.Version, built and cached like KubernetesBinaries (tests run a real etcd with it).
func EtcdBinaries(ctx context.Context, o BuildOptions) (string, error) {
	v, err := release.For(o.Version)
	if err != nil {
		return "", err
	}
	return binaries(ctx, o, etcdModule(v.Etcd))
}

// RegistryVersion is the CNCF distribution release RegistryBinaries builds.
const RegistryVersion = "v3.1.2"

// RegistryFile is the bundle file of the masters' registry: `registry`, the CNCF distribution
// registry, installed on masters only (hostpath.RegistryPath).
const RegistryFile = "kforge-registry"

// RegistryBinaries returns a directory holding `registry`, the CNCF distribution registry
// (github.com/distribution/distribution/v3), built and cached like KubernetesBinaries: the
// bundle's RegistryFile, and the private registry tests run for nodes to pull from through a
// mirror.
func RegistryBinaries(ctx context.Context, o BuildOptions) (string, error) {
	return binaries(ctx, o, registryModule(RegistryVersion))
}

//go:embed internal/e2esh/main.go
var e2eshMain []byte

// ConformanceBinaries returns a directory holding Kubernetes o.Version's conformance suite and
// what its test images run, built from the module k8s.io/kubernetes like KubernetesBinaries:
// e2e.test (go test -c of test/e2e), ginkgo (the CLI of the ginkgo release Kubernetes requires,
// which runs e2e.test in parallel), agnhost, nnp (nonewprivs' program) and sample-apiserver. Not
// part of any bundle: the conformance run (package conformance) uses it. e2e-sh is the busybox
// images' /bin/sh (internal/e2esh).
func ConformanceBinaries(ctx context.Context, o BuildOptions) (string, error) {
	m, err := kubernetesModule(o.Version)
	if err != nil {
		return "", err
	}
	m.Name = "conformance"
	m.Packages = []string{
		"github.com/onsi/ginkgo/v2/ginkgo",
		"k8s.io/kubernetes/test/images/agnhost",
		"k8s.io/sample-apiserver",
		"k8s.io/kubernetes/test/images/nonewprivs",
	}
	m.Output = map[string]string{"k8s.io/kubernetes/test/images/nonewprivs": "nnp"}
	m.Tests = map[string]string{"k8s.io/kubernetes/test/e2e": "e2e.test"}
	m.Local, m.LocalName = map[string][]byte{"main.go": e2eshMain}, "e2e-sh"
	return binaries(ctx, o, m)
}

// CoreDNSBinaries returns a directory holding `coredns` of the release Kubernetes o.Version
// installs, built and cached as the bundle builds it (agnhost's test image carries one).
func CoreDNSBinaries(ctx context.Context, o BuildOptions) (string, error) {
	v, err := release.For(o.Version)
	if err != nil {
		return "", err
	}
	return binaries(ctx, o, corednsModule(v.CoreDNS))
}

// kubernetesModule is the recipe for the Kubernetes binaries: a scratch module requiring
// k8s.io/kubernetes with each of its staging modules (which its go.mod replaces by ./staging
// paths that do not exist in the published module) replaced by the published v0.MINOR.PATCH,
// and the version stamped into component-base and client-go, or every binary says v0.0.0.
func kubernetesModule(version string) (goModule, error) {
	sub := kubeVersionRE.FindStringSubmatch(version)
	if sub == nil {
		return goModule{}, fmt.Errorf("kubernetes version %q: want the form v1.MINOR.PATCH, e.g. v1.36.3", version)
	}
	minor, patch := sub[1], sub[2]
	var ld []string
	for _, p := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		ld = append(ld,
			"-X", p+".gitVersion="+version,
			"-X", p+".gitMajor=1",
			"-X", p+".gitMinor="+minor,
			"-X", p+".gitTreeState=clean",
			"-X", p+".gitCommit=", // unknown in a module build; empty rather than "$Format:%H$"
		)
	}
	var pkgs []string
	for _, c := range KubernetesCommands {
		pkgs = append(pkgs, "k8s.io/kubernetes/cmd/"+c)
	}
	const mod = "k8s.io/kubernetes"
	return goModule{
		Name:     "kubernetes",
		Version:  version,
		Require:  map[string]string{mod: version},
		Packages: pkgs,
		Ldflags:  strings.Join(ld, " "),
		Prepare: func(ctx context.Context, r *goRunner, dir string) error {
			info, err := r.download(ctx, dir, mod+"@"+version)
			if err != nil {
				return err
			}
			kgomod, err := os.ReadFile(info.GoMod)
			if err != nil {
				return err
			}
			repl := stagingReplaces(kgomod, "v0."+minor+"."+patch)
			if len(repl) == 0 {
				return fmt.Errorf("%s: no staging replaces found in %s; cannot build Kubernetes from modules", mod, info.GoMod)
			}
			var b strings.Builder
			b.WriteString("\nreplace (\n")
			for _, p := range sortedKeys(repl) {
				fmt.Fprintf(&b, "\t%s => %s\n", p, repl[p])
			}
			b.WriteString(")\n")
			f, err := os.OpenFile(filepath.Join(dir, "go.mod"), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			if _, err := f.WriteString(b.String()); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			return copyGodebug(ctx, r, dir, info.GoMod)
		},
		Stamp: func(ctx context.Context, r *goRunner, dir string) (string, error) {
			// The build date is the release's publication time, so rebuilds are reproducible.
			out, err := r.run(ctx, dir, nil, "list", "-m", "-json", mod)
			if err != nil {
				return "", err
			}
			var info modInfo
			if err := json.Unmarshal(out, &info); err != nil || info.Time == "" {
				return "", fmt.Errorf("go list -m %s: no release time (%v)", mod, err)
			}
			var s []string
			for _, p := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
				s = append(s, "-X", p+".buildDate="+info.Time)
			}
			return strings.Join(s, " "), nil
		},
	}, nil
}

// copyGodebug gives the scratch module in dir the godebug settings of the go.mod at from
// (Kubernetes v1.35 says "godebug default=go1.25"): GODEBUG defaults follow the main module,
// so without them a v1.35 binary built with Go 1.26 would take Go 1.26's defaults where
// upstream's, built with Go 1.25, have Go 1.25's. They are a function of the Kubernetes
// version, which is in the recipe.
func copyGodebug(ctx context.Context, r *goRunner, dir, from string) error {
	out, err := r.run(ctx, dir, nil, "mod", "edit", "-json", from)
	if err != nil {
		return err
	}
	var mod struct{ GoDebug []struct{ Key, Value string } }
	if err := json.Unmarshal(out, &mod); err != nil {
		return fmt.Errorf("go mod edit -json %s: %w", from, err)
	}
	if len(mod.GoDebug) == 0 {
		return nil
	}
	args := []string{"mod", "edit"}
	for _, g := range mod.GoDebug {
		args = append(args, "-godebug="+g.Key+"="+g.Value)
	}
	_, err = r.run(ctx, dir, nil, args...)
	return err
}
