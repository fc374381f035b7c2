package bundle

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"golang.org/x/sync/errgroup"
)

// VerifyError lists every problem Verify found in a bundle.
type VerifyError struct {
	Dir      string
	Problems []string
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("bundle %s: %d problem(s) found; rebuild it with: kforge bundle build -o %s", e.Dir, len(e.Problems), e.Dir)
}

// Details lists the problems, one per line, for the error printer.
func (e *VerifyError) Details() []string {
	out := []string{"kforge: error: " + e.Error()}
	for _, p := range e.Problems {
		out = append(out, "  "+p)
	}
	return out
}

// Verify checks the bundle directory dir: its manifest is complete, every file and archive has
// the size and sha256 the manifest records, and each image archive loads — its OCI index names
// the image and points at the recorded manifest digest, and the image's config and layers match
// their digests (layers decompressed and checked against the config's diff IDs).
func Verify(ctx context.Context, dir string) (*Manifest, error) {
	m, err := LoadManifest(dir)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var problems []string
	report := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, runtime.NumCPU()))
	check := func(what, rel, sum string, size int64) bool {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		got, n, err := sha256File(p)
		switch {
		case err != nil:
			report("%s: %v", what, err)
		case n != size:
			report("%s: %s has %d bytes, the manifest says %d", what, rel, n, size)
		case got != sum:
			report("%s: %s has sha256 %s, the manifest says %s", what, rel, got, sum)
		default:
			return true
		}
		return false
	}
	for _, f := range m.Files {
		g.Go(func() error {
			check("file "+f.Name, f.Path, f.SHA256, f.Size)
			return gctx.Err()
		})
	}
	for _, im := range m.Images {
		g.Go(func() error {
			if !check("image "+im.Name, im.Path, im.SHA256, im.Size) {
				return gctx.Err()
			}
			if err := verifyArchive(filepath.Join(dir, filepath.FromSlash(im.Path)), im); err != nil {
				report("image %s: %s: %v", im.Name, im.Path, err)
			}
			return gctx.Err()
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if problems != nil {
		return m, &VerifyError{Dir: dir, Problems: problems}
	}
	return m, nil
}

// verifyArchive checks that the archive at p holds image im, as containerd and as
// go-containerregistry (docker-archive) read it.
func verifyArchive(p string, im Image) error {
	idx, mf, err := readOCIManifest(p, im.Digest)
	if err != nil {
		return err
	}
	if len(idx.Manifests) != 1 {
		return fmt.Errorf("index.json lists %d images, want 1", len(idx.Manifests))
	}
	d := idx.Manifests[0]
	if name := d.Annotations["io.containerd.image.name"]; name != im.Name {
		return fmt.Errorf("index.json names the image %q, the manifest says %q", name, im.Name)
	}
	if d.Digest.String() != im.Digest {
		return fmt.Errorf("index.json points at manifest %s, the bundle manifest says %s", d.Digest, im.Digest)
	}
	if mf.Config.Digest.String() != im.ID {
		return fmt.Errorf("image config is %s, the bundle manifest says %s", mf.Config.Digest, im.ID)
	}
	img, err := tarball.ImageFromPath(p, nil)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	if err := validate.Image(img); err != nil {
		return fmt.Errorf("load: %w", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	if len(layers) != len(mf.Layers) {
		return fmt.Errorf("docker manifest.json lists %d layers, the OCI manifest %d", len(layers), len(mf.Layers))
	}
	for i, l := range layers {
		ld, err := l.Digest()
		if err != nil {
			return err
		}
		if ld != mf.Layers[i].Digest {
			return fmt.Errorf("layer %d is %s in manifest.json, %s in the OCI manifest", i, ld, mf.Layers[i].Digest)
		}
	}
	if cn, err := img.ConfigName(); err != nil || cn != mf.Config.Digest {
		return fmt.Errorf("manifest.json's config %s differs from the OCI manifest's %s (%v)", cn, mf.Config.Digest, err)
	}
	return nil
}

// readOCIManifest reads index.json and the blob of manifest digest want from an image archive,
// checking that the blob's content has that digest.
func readOCIManifest(p, want string) (*v1.IndexManifest, *v1.Manifest, error) {
	h, err := v1.NewHash(want)
	if err != nil {
		return nil, nil, fmt.Errorf("manifest digest %q: %w", want, err)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var idx *v1.IndexManifest
	var raw []byte
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("not a tar archive: %w", err)
		}
		switch filepath.Clean(hdr.Name) {
		case "index.json":
			if idx, err = v1.ParseIndexManifest(tr); err != nil {
				return nil, nil, fmt.Errorf("index.json: %w", err)
			}
		case "blobs/" + h.Algorithm + "/" + h.Hex:
			if raw, err = io.ReadAll(io.LimitReader(tr, 4<<20)); err != nil {
				return nil, nil, err
			}
		}
	}
	if idx == nil {
		return nil, nil, errors.New("no index.json: not an OCI image archive (containerd could not import it)")
	}
	if raw == nil {
		return nil, nil, fmt.Errorf("no blob for manifest %s", want)
	}
	if got, _, _ := v1.SHA256(bytes.NewReader(raw)); got != h {
		return nil, nil, fmt.Errorf("manifest blob has digest %s, not %s", got, h)
	}
	var mf v1.Manifest
	if err := json.Unmarshal(raw, &mf); err != nil {
		return nil, nil, fmt.Errorf("manifest %s: %w", want, err)
	}
	return idx, &mf, nil
}
