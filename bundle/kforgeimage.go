package bundle

import (
	"debug/elf"
	"fmt"
	"os"
)

// KforgeBinary is where kforge is in its own image, which is its entrypoint.
const KforgeBinary = "/kforge"

// KforgeImageName is kforge's image at version: what kforge controller runs.
func KforgeImageName(version string) string { return "kforge.dev/kforge:" + version }

// WriteKforgeImage writes an image archive of the kforge binary at self (os.Executable()) as
// name, at out: one layer holding KforgeBinary, its entrypoint. The image is the very binary
// that wrote it, so the controller runs what the CLI runs. self must be statically linked
// (CGO_ENABLED=0, as `make build` builds kforge): the image has no C library.
func WriteKforgeImage(self, name, out string) (ImageArchive, error) {
	f, err := elf.Open(self)
	if err != nil {
		return ImageArchive{}, fmt.Errorf("kforge's image: %s: %w", self, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return ImageArchive{}, fmt.Errorf("kforge's image: %s is linked against the C library (built with cgo), which the image does not hold: build kforge with CGO_ENABLED=0 (make build does)", self)
		}
	}
	tmp, err := os.MkdirTemp("", "kforge-image-")
	if err != nil {
		return ImageArchive{}, err
	}
	defer os.RemoveAll(tmp)
	return writeImageArchive(imageSpec{Component: "kforge", Name: name,
		Files: []imageFile{{Path: KforgeBinary, Src: self, Mode: 0o755}}, Entrypoint: []string{KforgeBinary}}, out, tmp)
}
