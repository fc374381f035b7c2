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
)

// ManifestFile is the name of the manifest in a bundle directory.
const ManifestFile = "manifest.json"

// Manifest describes a bundle directory: what it holds, where each artifact is inside the
// directory, its sha256, and where it goes on a host. `kforge bundle build` fills it from Go
// modules (Source "built"); a download-based builder can fill the same layout from official
// release artifacts (Source "fetched") — consumers only read this file.
type Manifest struct {
	// SchemaVersion is 1.
	SchemaVersion int `json:"schemaVersion"`
	// Platform is the OS/architecture of every artifact, e.g. linux/amd64.
	Platform string `json:"platform"`
	// Source says how the artifacts were obtained: "built" (from Go modules) or "fetched".
	Source string `json:"source"`
	// Versions of the components.
	Versions Versions `json:"versions"`
	// Files are binaries to install on hosts.
	Files []File `json:"files"`
	// Images are container image archives to import into containerd's k8s.io namespace.
	Images []Image `json:"images"`
}

// File is one binary of a bundle.
type File struct {
	// Name is the binary's name, e.g. kubelet.
	Name string `json:"name"`
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
	// kube-scheduler, kube-proxy, etcd, coredns, pause or flannel.
	Component string `json:"component"`
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
	"etcd", "coredns", "pause", "flannel",
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

// LoadManifest reads the manifest of the bundle directory dir and checks that it is complete.
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
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return &m, nil
}

// check says whether the manifest is usable: a known schema, and every artifact with a
// relative path inside the bundle, a sha256 and (for files) an absolute install path.
func (m *Manifest) check() error {
	if m.SchemaVersion != 1 {
		return fmt.Errorf("schemaVersion %d: this kforge reads schema version 1", m.SchemaVersion)
	}
	var errs []error
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
