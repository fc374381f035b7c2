package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// imageSpec is one single-layer image: its name and the files of its layer.
type imageSpec struct {
	Component  string // "kube-apiserver", "etcd", ...
	Name       string // registry.k8s.io/kube-apiserver:v1.36.3
	Files      []imageFile
	Entrypoint []string
}

// imageFile is one entry of an image's layer: a copy of a local file, or a symlink.
type imageFile struct {
	Path string      // absolute path inside the image
	Src  string      // local file whose content (symlinks followed) lands at Path
	Link string      // or: Path is a symlink to Link
	Mode os.FileMode // 0: the source's permission bits
}

// imageEpoch is the timestamp of every file and of the image config, so that the same inputs
// give the same image digest.
var imageEpoch = time.Unix(0, 0).UTC()

// imageEnv is the environment of every image.
var imageEnv = []string{"PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"}

// ImageArchive is what writing an image archive produced.
type ImageArchive struct {
	// Digest is the image manifest's digest: after `ctr images import`, containerd's image
	// record points at it (ctr images ls shows it in the DIGEST column).
	Digest string
	// ID is the image config's digest, what the CRI reports as the image ID.
	ID string
}

// writeImageArchive writes spec as an image archive at out and returns its digests. The archive
// holds the image twice over the same blobs: as an OCI image layout (oci-layout, index.json,
// blobs/sha256/...; containerd imports this, so the image keeps the manifest digest computed
// here) and as a docker-archive manifest.json (docker load, and go-containerregistry's tarball
// reader used by verify). The layer is gzip-compressed so containerd stores it as is.
func writeImageArchive(spec imageSpec, out string, tmpDir string) (ImageArchive, error) {
	gz, err := os.CreateTemp(tmpDir, "layer-*.tar.gz")
	if err != nil {
		return ImageArchive{}, err
	}
	defer os.Remove(gz.Name())
	defer gz.Close()
	if err := writeLayer(gz, spec.Files); err != nil {
		return ImageArchive{}, fmt.Errorf("image %s: %w", spec.Name, err)
	}
	if err := gz.Close(); err != nil {
		return ImageArchive{}, err
	}
	layer, err := tarball.LayerFromFile(gz.Name(), tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return ImageArchive{}, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return ImageArchive{}, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return ImageArchive{}, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: imageEpoch}
	cf.Config.Env = imageEnv
	cf.Config.Entrypoint = spec.Entrypoint
	cf.Config.WorkingDir = "/"
	cf.History = []v1.History{{Created: v1.Time{Time: imageEpoch}, CreatedBy: "kforge bundle build", Comment: spec.Component}}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return ImageArchive{}, err
	}

	rawManifest, err := img.RawManifest()
	if err != nil {
		return ImageArchive{}, err
	}
	rawConfig, err := img.RawConfigFile()
	if err != nil {
		return ImageArchive{}, err
	}
	mDigest, err := img.Digest()
	if err != nil {
		return ImageArchive{}, err
	}
	cDigest, err := img.ConfigName()
	if err != nil {
		return ImageArchive{}, err
	}
	lDigest, err := layer.Digest()
	if err != nil {
		return ImageArchive{}, err
	}
	lSize, err := layer.Size()
	if err != nil {
		return ImageArchive{}, err
	}
	index := v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.OCIManifestSchema1,
			Digest:    mDigest,
			Size:      int64(len(rawManifest)),
			Platform:  &v1.Platform{OS: "linux", Architecture: "amd64"},
			Annotations: map[string]string{
				"io.containerd.image.name":          spec.Name,
				"org.opencontainers.image.ref.name": imageTag(spec.Name),
			},
		}},
	}
	rawIndex, err := json.Marshal(index)
	if err != nil {
		return ImageArchive{}, err
	}
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
	dockerManifest, err := json.Marshal([]tarball.Descriptor{{
		Config:   blob(cDigest),
		RepoTags: []string{spec.Name},
		Layers:   []string{blob(lDigest)},
	}})
	if err != nil {
		return ImageArchive{}, err
	}

	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-")
	if err != nil {
		return ImageArchive{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	tw := tar.NewWriter(f)
	put := func(name string, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o444, Size: size, ModTime: imageEpoch, Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}); err != nil {
			return err
		}
		_, err := io.Copy(tw, r)
		return err
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Mode: 0o755, ModTime: imageEpoch, Typeflag: tar.TypeDir, Format: tar.FormatUSTAR}); err != nil {
			return ImageArchive{}, err
		}
	}
	lr, err := layer.Compressed()
	if err != nil {
		return ImageArchive{}, err
	}
	defer lr.Close()
	for _, e := range []struct {
		name string
		size int64
		r    io.Reader
	}{
		{"oci-layout", int64(len(ociLayout)), strings.NewReader(ociLayout)},
		{blob(lDigest), lSize, lr},
		{blob(cDigest), int64(len(rawConfig)), bytes.NewReader(rawConfig)},
		{blob(mDigest), int64(len(rawManifest)), bytes.NewReader(rawManifest)},
		{"index.json", int64(len(rawIndex)), bytes.NewReader(rawIndex)},
		{"manifest.json", int64(len(dockerManifest)), bytes.NewReader(dockerManifest)},
	} {
		if err := put(e.name, e.size, e.r); err != nil {
			return ImageArchive{}, fmt.Errorf("write %s: %s: %w", out, e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return ImageArchive{}, err
	}
	if err := f.Chmod(0o444); err != nil {
		return ImageArchive{}, err
	}
	if err := f.Close(); err != nil {
		return ImageArchive{}, err
	}
	if err := os.Rename(f.Name(), out); err != nil {
		return ImageArchive{}, err
	}
	return ImageArchive{Digest: mDigest.String(), ID: cDigest.String()}, nil
}

const ociLayout = `{"imageLayoutVersion":"1.0.0"}`

// imageTag returns the tag of an image reference ("v1.36.3" of "registry.k8s.io/x:v1.36.3").
func imageTag(ref string) string {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return "latest"
	}
	return ref[i+1:]
}

// writeLayer writes the gzip-compressed tar of files to w: entries sorted by path, parent
// directories added, owned by root, timestamps at imageEpoch, so that equal inputs give equal
// bytes. /tmp (sticky, world-writable), /etc, /run and /var/run exist in every image.
func writeLayer(w io.Writer, files []imageFile) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	byPath := map[string]imageFile{}
	dirs := map[string]os.FileMode{"tmp": os.ModeSticky | 0o777 | os.ModeDir, "etc": 0o755 | os.ModeDir, "run": 0o755 | os.ModeDir, "var": 0o755 | os.ModeDir}
	byPath["var/run"] = imageFile{Path: "/var/run", Link: "../run"}
	for _, f := range files {
		p := strings.TrimPrefix(path.Clean(f.Path), "/")
		if _, dup := byPath[p]; dup {
			return fmt.Errorf("%s is in the layer twice", f.Path)
		}
		byPath[p] = f
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := dirs[d]; !ok {
				dirs[d] = 0o755 | os.ModeDir
			}
		}
	}
	var names []string
	for d := range dirs {
		names = append(names, d)
	}
	for p := range byPath {
		names = append(names, p)
	}
	slices.Sort(names)
	for _, name := range names {
		hdr := &tar.Header{Name: name, ModTime: imageEpoch, Uname: "root", Gname: "root", Format: tar.FormatPAX}
		if mode, ok := dirs[name]; ok {
			hdr.Name += "/"
			hdr.Typeflag = tar.TypeDir
			hdr.Mode = int64(mode.Perm())
			if mode&os.ModeSticky != 0 {
				hdr.Mode |= 0o1000
			}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			continue
		}
		f := byPath[name]
		if f.Link != "" {
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, f.Link, 0o777
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			continue
		}
		if err := addFile(tw, hdr, f); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

func addFile(tw *tar.Writer, hdr *tar.Header, f imageFile) error {
	src, err := os.Open(f.Src)
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", f.Src)
	}
	mode := f.Mode
	if mode == 0 {
		mode = st.Mode().Perm()
	}
	hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, int64(mode.Perm()), st.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.Copy(tw, src); err != nil {
		return fmt.Errorf("%s: %w", f.Src, err)
	}
	return nil
}

// sha256File returns the hex sha256 and the size of a file.
func sha256File(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
