package bundle

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kforge/kforge/internal/fsx"
	"github.com/kforge/kforge/release"
	"github.com/kforge/kforge/remote"
)

// ManifestFile is the name of the manifest in a bundle directory.
const ManifestFile = "manifest.json"

// SchemaVersion is the manifest schema this kforge writes. Schema 2 lists the Kubernetes
// releases a bundle holds ("releases") and says which artifacts belong to which; schema 1,
// which LoadManifest still reads, held one release ("versions").
const SchemaVersion = 2

// Manifest describes a bundle directory: the Kubernetes releases it holds, what artifacts it
// has for them, where each artifact is inside the directory, its sha256, and where it goes on
// a host. `kforge bundle build` fills it from Go modules (Source "built"); a download-based
// builder can fill the same layout from official release artifacts (Source "fetched") —
// consumers only read this file.
//
// A bundle may hold several releases (for an upgrade from one to the next); a cluster uses
// one of them at a time: ForVersion gives the manifest of that release alone, which is what
// preflight, shipping and the addons read.
type Manifest struct {
	// SchemaVersion is 2 (SchemaVersion); LoadManifest converts a schema-1 manifest.
	SchemaVersion int `json:"schemaVersion"`
	// Platform is the OS/architecture of every artifact, e.g. linux/amd64.
	Platform string `json:"platform"`
	// Source says how the artifacts were obtained: "built" (from Go modules) or "fetched".
	Source string `json:"source"`
	// Releases are the versions of the components of each Kubernetes release the bundle
	// holds, oldest first.
	Releases []Versions `json:"releases"`
	// Files are binaries to install on hosts.
	Files []File `json:"files"`
	// Images are container image archives to import into containerd's k8s.io namespace.
	Images []Image `json:"images"`
}

// File is one binary of a bundle.
type File struct {
	// Name is the binary's name, e.g. kubelet.
	Name string `json:"name"`
	// Kubernetes are the Kubernetes versions (of Releases) the file belongs to; empty: every
	// release of the bundle.
	Kubernetes []string `json:"kubernetes,omitempty"`
	// Path is where the file is, relative to the bundle directory (slash-separated).
	Path string `json:"path"`
	// SHA256 is the hex sha256 of the file.
	SHA256 string `json:"sha256"`
	// Size in bytes.
	Size int64 `json:"size"`
	// Install is the absolute path the file is installed to on hosts.
	Install string `json:"install"`
	// Mode is the permission bits of the installed file, in octal, e.g. "0755".
	Mode string `json:"mode"`
}

// Image is one image archive of a bundle.
type Image struct {
	// Component is what the image runs: kube-apiserver, kube-controller-manager,
	// kube-scheduler, kube-proxy, etcd, coredns, pause, flannel, kube-network-policies,
	// metrics-server, local-path-provisioner or local-path-helper.
	Component string `json:"component"`
	// Kubernetes are the Kubernetes versions (of Releases) the image belongs to; empty: every
	// release of the bundle.
	Kubernetes []string `json:"kubernetes,omitempty"`
	// Name is the image reference, exactly as static-pod manifests and addons use it.
	Name string `json:"name"`
	// Path is where the archive is, relative to the bundle directory (slash-separated).
	Path string `json:"path"`
	// SHA256 and Size are those of the archive file.
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// Digest is the digest of the image manifest that containerd records as the image's target
	// once the archive is imported (`ctr -n k8s.io images ls` DIGEST column): a host whose image
	// of this Name has another digest gets this one imported.
	Digest string `json:"digest"`
	// ID is the digest of the image config (the CRI's image ID).
	ID string `json:"id"`
	// ControlPlaneOnly images are needed on control-plane hosts only.
	ControlPlaneOnly bool `json:"controlPlaneOnly,omitempty"`
}

// Components of the images a bundle holds, in manifest order.
var ImageComponents = []string{
	"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy",
	"etcd", "coredns", "pause", "flannel", "kube-network-policies", "metrics-server",
	"local-path-provisioner", "local-path-helper",
}

// controlPlaneOnly components run on control-plane hosts only.
var controlPlaneOnly = map[string]bool{
	"kube-apiserver": true, "kube-controller-manager": true, "kube-scheduler": true, "etcd": true,
}

// Image returns the manifest's image of component, or false.
func (m *Manifest) Image(component string) (Image, bool) {
	for _, im := range m.Images {
		if im.Component == component {
			return im, true
		}
	}
	return Image{}, false
}

// HasImages returns nil when the bundle holds an image of each of names (references such as
// registry.k8s.io/kube-proxy:v1.36.3, release.Images), or an error naming those it lacks:
// what a cluster runs from a bundle must be in it, or the hosts would pull it.
func (m *Manifest) HasImages(names ...string) error {
	var missing []string
	for _, n := range names {
		if !slices.ContainsFunc(m.Images, func(im Image) bool { return im.Name == n }) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no image %s (rebuild the bundle with this kforge: kforge bundle build -o DIR)", strings.Join(missing, ", "))
	}
	return nil
}

// File returns the manifest's file named name, or false.
func (m *Manifest) File(name string) (File, bool) {
	for _, f := range m.Files {
		if f.Name == name {
			return f, true
		}
	}
	return File{}, false
}

// Kubernetes returns the Kubernetes versions the bundle holds, oldest first.
func (m *Manifest) Kubernetes() []string {
	out := make([]string, len(m.Releases))
	for i, r := range m.Releases {
		out[i] = r.Kubernetes
	}
	return out
}

// Release returns the versions of the components of the bundle's release of Kubernetes
// version, or false.
func (m *Manifest) Release(version string) (Versions, bool) {
	for _, r := range m.Releases {
		if r.Kubernetes == version {
			return r, true
		}
	}
	return Versions{}, false
}

// belongs reports whether an artifact of releases ks (empty: every release) is part of
// Kubernetes version.
func belongs(ks []string, version string) bool { return len(ks) == 0 || slices.Contains(ks, version) }

// ForVersion returns the manifest of the bundle's release of Kubernetes version alone: that
// release, and the files and images that belong to it (paths stay relative to the same
// bundle directory). A bundle that does not hold version is a *MissingReleaseError.
func (m *Manifest) ForVersion(version string) (*Manifest, error) {
	r, ok := m.Release(version)
	if !ok {
		return nil, &MissingReleaseError{Version: version, Holds: m.Kubernetes()}
	}
	one := *m
	one.Releases = []Versions{r}
	one.Files, one.Images = nil, nil
	for _, f := range m.Files {
		if belongs(f.Kubernetes, version) {
			one.Files = append(one.Files, f)
		}
	}
	for _, im := range m.Images {
		if belongs(im.Kubernetes, version) {
			one.Images = append(one.Images, im)
		}
	}
	return &one, nil
}

// MissingReleaseError is a bundle that does not hold the Kubernetes version a cluster runs.
type MissingReleaseError struct {
	Dir     string   // the bundle directory (LoadRelease sets it)
	Version string   // the version asked for
	Holds   []string // the versions the bundle holds
}

func (e *MissingReleaseError) Error() string {
	dir := e.Dir
	if dir == "" {
		dir = "DIR"
	}
	all := append(slices.Clone(e.Holds), e.Version)
	return fmt.Sprintf("bundle %s does not hold Kubernetes %s (it holds %s); build one that does: kforge bundle build --kubernetes %s -o %s",
		dir, e.Version, strings.Join(e.Holds, ", "), strings.Join(release.SortVersions(all), ","), remote.Quote(dir))
}

// LoadRelease reads the manifest of the bundle directory dir (LoadManifest) and returns the
// manifest of its release of Kubernetes version alone (ForVersion).
func LoadRelease(dir, version string) (*Manifest, error) {
	m, err := LoadManifest(dir)
	if err != nil {
		return nil, err
	}
	one, err := m.ForVersion(version)
	var me *MissingReleaseError
	if errors.As(err, &me) {
		me.Dir = dir
	}
	return one, err
}

// manifestV1 is what schema 1 had where schema 2 has Releases.
type manifestV1 struct {
	Versions *Versions `json:"versions"`
}

// LoadManifest reads the manifest of the bundle directory dir and checks that it is complete.
// A schema-1 manifest (one release, in "versions") reads as schema 2 with that one release.
func LoadManifest(dir string) (*Manifest, error) {
	p := filepath.Join(dir, ManifestFile)
	b, err := os.ReadFile(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s is not a bundle: no %s (create one with: kforge bundle build -o %s)", dir, ManifestFile, dir)
		}
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if m.SchemaVersion == 1 {
		var v1 manifestV1
		if err := json.Unmarshal(b, &v1); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if v1.Versions != nil {
			m.Releases = []Versions{*v1.Versions}
		}
		m.SchemaVersion = SchemaVersion
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return &m, nil
}

// check says whether the manifest is usable: a known schema, at least one release, every
// artifact belonging to releases the bundle holds, with a relative path inside the bundle, a
// sha256 and (for files) an absolute install path.
func (m *Manifest) check() error {
	if m.SchemaVersion != SchemaVersion {
		return fmt.Errorf("schemaVersion %d: this kforge reads schema versions 1 and %d", m.SchemaVersion, SchemaVersion)
	}
	var errs []error
	if len(m.Releases) == 0 {
		errs = append(errs, errors.New("no releases: the bundle holds no Kubernetes version"))
	}
	seen := map[string]bool{}
	for _, r := range m.Releases {
		if r.Kubernetes == "" || seen[r.Kubernetes] {
			errs = append(errs, fmt.Errorf("releases: Kubernetes version %q is empty or listed twice", r.Kubernetes))
		}
		seen[r.Kubernetes] = true
	}
	ofReleases := func(what string, ks []string) {
		for _, k := range ks {
			if !seen[k] {
				errs = append(errs, fmt.Errorf("%s: belongs to Kubernetes %s, which the bundle's releases do not list", what, k))
			}
		}
	}
	for _, f := range m.Files {
		ofReleases("file "+f.Name, f.Kubernetes)
	}
	for _, im := range m.Images {
		ofReleases("image "+im.Name, im.Kubernetes)
	}
	inside := func(what, p string) {
		if p == "" || filepath.IsAbs(p) || strings.HasPrefix(filepath.Clean(filepath.FromSlash(p)), "..") {
			errs = append(errs, fmt.Errorf("%s: path %q must be relative and inside the bundle", what, p))
		}
	}
	for _, f := range m.Files {
		inside("file "+f.Name, f.Path)
		if len(f.SHA256) != 64 {
			errs = append(errs, fmt.Errorf("file %s: sha256 %q is not 64 hex digits", f.Name, f.SHA256))
		}
		if !strings.HasPrefix(f.Install, "/") {
			errs = append(errs, fmt.Errorf("file %s: install path %q is not absolute", f.Name, f.Install))
		}
	}
	for _, im := range m.Images {
		inside("image "+im.Name, im.Path)
		if len(im.SHA256) != 64 {
			errs = append(errs, fmt.Errorf("image %s: sha256 %q is not 64 hex digits", im.Name, im.SHA256))
		}
		if !strings.HasPrefix(im.Digest, "sha256:") {
			errs = append(errs, fmt.Errorf("image %s: digest %q is not sha256:...", im.Name, im.Digest))
		}
	}
	return errors.Join(errs...)
}

// writeManifest writes m into dir atomically.
func writeManifest(dir string, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return fsx.WriteFile(filepath.Join(dir, ManifestFile), append(b, '\n'), 0o644)
}
