// Package conformance runs Kubernetes' own conformance suite against a kforge cluster, offline.
//
// A Kit is built from Go modules and Debian packages only, once per Kubernetes version, and
// cached beside the bundle's builds: e2e.test and the ginkgo CLI of that release, kubectl, and
// the test images the suite runs, under the exact names the suite expects (e2e.test
// --list-images), in one archive (a registry serves them to the nodes: e2e's TestConformance
// pushes them to the lab registry, which containerd uses as a mirror of registry.k8s.io). Images
// that cannot be made offline are named in Kit.Missing. Run runs the suite in parallel and
// ReadJUnit reads its JUnit report by SIG.
package conformance

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/progress"
)

// Kit is what a conformance run needs, for one Kubernetes version.
type Kit struct {
	Version string
	// E2ETest, Ginkgo and Kubectl are the binaries (read-only, in the build cache).
	E2ETest, Ginkgo, Kubectl string
	// Images is an image archive holding every image in Built, sharing one Debian base layer.
	Images string
	// Built are the image references in Images.
	Built []string
	// FromBundle are references the suite lists that the bundle holds (pause, etcd: the
	// cluster's own images, which workers lack); a run serves them from the bundle's archives.
	FromBundle []string
	// Missing are references the suite lists that the kit cannot build offline; the specs that
	// need them fail to pull.
	Missing []string
}

// Build returns the kit of Kubernetes o.Version, building what is not cached yet (about 3
// minutes for e2e.test on a warm Go cache; the Debian base is debootstrapped once).
func Build(ctx context.Context, o bundle.BuildOptions) (Kit, error) {
	r := o.Report
	if r == nil {
		r = progress.Discard
	}
	bins, err := bundle.ConformanceBinaries(ctx, o)
	if err != nil {
		return Kit{}, fmt.Errorf("conformance %s: %w", o.Version, err)
	}
	kube, err := bundle.KubernetesBinaries(ctx, o)
	if err != nil {
		return Kit{}, fmt.Errorf("conformance %s: %w", o.Version, err)
	}
	coredns, err := bundle.CoreDNSBinaries(ctx, o)
	if err != nil {
		return Kit{}, fmt.Errorf("conformance %s: %w", o.Version, err)
	}
	k := Kit{
		Version: o.Version,
		E2ETest: filepath.Join(bins, "e2e.test"),
		Ginkgo:  filepath.Join(bins, "ginkgo"),
		Kubectl: filepath.Join(kube, "kubectl"),
	}
	refs, err := listImages(ctx, k.E2ETest)
	if err != nil {
		return Kit{}, err
	}
	cache := o.CacheRoot()
	base, err := lab.EnsureDebianTree(ctx, cache, "e2e-base", baseRecipe, basePackages, customizeBase, r)
	if err != nil {
		return Kit{}, fmt.Errorf("conformance %s: the test images' Debian base: %w", o.Version, err)
	}
	// The test images' data files (agnhost's porter certificate, kitten's and nautilus' pages).
	src, err := bundle.ModuleSource(ctx, o, "k8s.io/kubernetes", o.Version)
	if err != nil {
		return Kit{}, fmt.Errorf("conformance %s: %w", o.Version, err)
	}
	in := inputs{bins: bins, coredns: filepath.Join(coredns, "coredns"), base: base, src: src}
	var specs []imageSpec
	for _, ref := range refs {
		switch s, how := specFor(ref, in); how {
		case built:
			specs = append(specs, s)
			k.Built = append(k.Built, ref)
		case fromBundle:
			k.FromBundle = append(k.FromBundle, ref)
		default:
			k.Missing = append(k.Missing, ref)
		}
	}
	if k.Images, err = writeImages(ctx, cache, o.Version, in, specs, r); err != nil {
		return Kit{}, fmt.Errorf("conformance %s: %w", o.Version, err)
	}
	return k, nil
}

// listImages asks e2e.test which images its specs use.
func listImages(ctx context.Context, e2eTest string) ([]string, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, e2eTest, "--list-images")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s --list-images: %w\n%s", e2eTest, err, errb.String())
	}
	var refs []string
	for _, l := range strings.Split(out.String(), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "I") && strings.Contains(l, "/") {
			refs = append(refs, l)
		}
	}
	sort.Strings(refs)
	if len(refs) == 0 {
		return nil, fmt.Errorf("%s --list-images listed no image", e2eTest)
	}
	return refs, nil
}
