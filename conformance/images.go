package conformance

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/kforge/kforge/internal/fsx"
	"github.com/kforge/kforge/progress"
)

// basePackages make the one Debian layer every test image shares: what upstream's Alpine, busybox
// and nginx bases give the suite's shell commands (a POSIX shell that keeps any environment
// variable, wget, nc, dig and nslookup, ip, ping, ps, nginx).
var basePackages = []string{
	"bash", "busybox-static", "nginx-light", "bind9-dnsutils", "curl", "netcat-openbsd",
	"iproute2", "iputils-ping", "procps",
}

// baseRecipe names the base tree's build steps (customizeBase): bump it when they change.
const baseRecipe = "kforge-e2e-base/2"

// customizeBase finishes the base tree:
//   - /bin/sh is bash, as in upstream's agnhost (Alpine's ash, with netcat-openbsd's nc and no
//     applets before PATH; Debian's static busybox runs its own nc first). The busybox images
//     put e2e-sh over it (bundle/internal/e2esh);
//   - every busybox applet is in /bin, as in busybox's image: Debian's tool where it has one
//     (/bin/sysctl is procps'), else busybox (wget, for one);
//   - agnhost's users and groups (user-defined-in-image 1000, group-defined-in-image 50000);
//   - nginx logs to the container's output, as upstream's image does;
//   - no apt caches.
func customizeBase(dir string) error {
	sh := filepath.Join(dir, "usr/bin/sh")
	_ = os.Remove(sh)
	if err := os.Symlink("bash", sh); err != nil {
		return err
	}
	out, err := exec.Command(filepath.Join(dir, "usr/bin/busybox"), "--list").Output()
	if err != nil {
		return fmt.Errorf("busybox --list: %w", err)
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" || strings.ContainsRune(applet, '/') {
			continue
		}
		// Specs run busybox's applets as /bin/<applet> (/bin/sysctl): Debian's own tool where
		// there is one, else busybox's.
		if exists(dir, "usr/bin/"+applet) {
			continue
		}
		to := "busybox"
		if exists(dir, "usr/sbin/"+applet) {
			to = "../sbin/" + applet
		}
		if err := os.Symlink(to, filepath.Join(dir, "usr/bin", applet)); err != nil {
			return err
		}
	}
	for f, line := range map[string]string{
		"etc/passwd": "user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n",
		"etc/group":  "user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n",
	} {
		if err := appendFile(filepath.Join(dir, f), line); err != nil {
			return err
		}
	}
	for link, to := range map[string]string{"var/log/nginx/access.log": "/dev/stdout", "var/log/nginx/error.log": "/dev/stderr"} {
		_ = os.Remove(filepath.Join(dir, link))
		if err := os.Symlink(to, filepath.Join(dir, link)); err != nil {
			return err
		}
	}
	for _, g := range []string{"var/cache/apt/archives/*.deb", "var/lib/apt/lists/*_*"} {
		m, _ := filepath.Glob(filepath.Join(dir, g))
		for _, f := range m {
			_ = os.Remove(f)
		}
	}
	return nil
}

func exists(dir, p string) bool {
	_, err := os.Lstat(filepath.Join(dir, p))
	return err == nil
}

func appendFile(p, s string) error {
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// inputs are where the images' files come from.
type inputs struct {
	bins    string // ConformanceBinaries: agnhost, nnp, sample-apiserver
	coredns string // the coredns binary
	base    string // the Debian base tree
	src     string // k8s.io/kubernetes's module source
}

// imageSpec is one test image: the base layer plus files, and its configuration.
type imageSpec struct {
	Ref             string
	Files           []file
	Entrypoint, Cmd []string
	User            string
}

// file is one entry of an image's own layer: a copy of a local file (Src), or a directory.
type file struct {
	Path string
	Src  string
	Mode int64 // permission bits (setuid included); 0: the source's
	Dir  bool
}

type how int

const (
	missing how = iota
	built
	fromBundle
)

// specFor says how the kit makes the image ref: built (with its spec), already on every node
// from the bundle, or missing.
func specFor(ref string, in inputs) (imageSpec, how) {
	repo := ref
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	agnhost := []file{
		{Path: "/agnhost", Src: filepath.Join(in.bins, "agnhost")},
		{Path: "/agnhost-2", Src: filepath.Join(in.bins, "agnhost")},
		{Path: "/coredns", Src: in.coredns},
		{Path: "/localhost.crt", Src: filepath.Join(in.src, "test/images/agnhost/porter/localhost.crt"), Mode: 0o644},
		{Path: "/localhost.key", Src: filepath.Join(in.src, "test/images/agnhost/porter/localhost.key"), Mode: 0o644},
		{Path: "/uploads", Dir: true},
	}
	page := func(which string) []file {
		return append(agnhost[:len(agnhost):len(agnhost)],
			file{Path: "/" + which + ".jpg", Src: filepath.Join(in.src, "test/images", which, "html", which+".jpg"), Mode: 0o644},
			file{Path: "/data.json", Src: filepath.Join(in.src, "test/images", which, "html/data.json"), Mode: 0o644})
	}
	// busybox's images: ash as /bin/sh (e2e-sh), and busybox's applets before PATH, as upstream.
	ash := []file{{Path: "/usr/bin/sh", Src: filepath.Join(in.bins, "e2e-sh")}}
	switch path.Base(repo) {
	case "agnhost":
		if strings.Contains(repo, "e2e-test-images/agnhost") {
			return imageSpec{Ref: ref, Files: agnhost, Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}}, built
		}
	case "kitten", "nautilus":
		return imageSpec{Ref: ref, Files: page(path.Base(repo)), Entrypoint: []string{"/agnhost"}, Cmd: []string{"test-webserver"}}, built
	case "busybox":
		return imageSpec{Ref: ref, Files: ash, Cmd: []string{"sh"}}, built
	case "nonroot":
		return imageSpec{Ref: ref, Files: ash, User: "1234", Cmd: []string{"sh"}}, built
	case "nonewprivs":
		return imageSpec{Ref: ref, Files: append(ash, file{Path: "/usr/local/bin/nnp", Src: filepath.Join(in.bins, "nnp"), Mode: 0o4755}), Cmd: []string{"nnp"}}, built
	case "nginx":
		return imageSpec{Ref: ref, Cmd: []string{"nginx", "-g", "daemon off;"}}, built
	case "glibc-dns-testing":
		return imageSpec{Ref: ref, Files: []file{{Path: "/coredns", Src: in.coredns}}, Cmd: []string{"sh"}}, built
	case "sample-apiserver":
		return imageSpec{Ref: ref, Files: []file{{Path: "/sample-apiserver", Src: filepath.Join(in.bins, "sample-apiserver")}}, Entrypoint: []string{"/sample-apiserver"}}, built
	case "pause", "etcd":
		if strings.HasPrefix(ref, "registry.k8s.io/") {
			return imageSpec{}, fromBundle
		}
	}
	return imageSpec{}, missing
}

// epoch is every file's and image's timestamp: the same inputs give the same digests.
var epoch = time.Unix(0, 0).UTC()

// writeImages writes the archive of specs (cached by their inputs) and returns its path.
func writeImages(ctx context.Context, cache, version string, in inputs, specs []imageSpec, r progress.Reporter) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n%s\n%s\n", baseRecipe, in.base, in.bins, in.coredns, in.src)
	for _, s := range specs {
		fmt.Fprintf(h, "%+v\n", s)
	}
	dir := filepath.Join(cache, "conformance")
	out := filepath.Join(dir, version+"-"+hex.EncodeToString(h.Sum(nil))[:16]+".tar")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	unlock, err := fsx.Lock(ctx, filepath.Join(dir, version+".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("test images of %s: %d, on one Debian layer (once; cached in %s)", version, len(specs), out)})
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	baseLayer, err := layerFile(filepath.Join(tmp, "base.tar.gz"), func(tw *tar.Writer) error { return addTree(tw, in.base) })
	if err != nil {
		return "", fmt.Errorf("the base layer from %s: %w", in.base, err)
	}
	images := map[name.Reference]v1.Image{}
	for i, s := range specs {
		img, err := mutate.AppendLayers(empty.Image, baseLayer)
		if err != nil {
			return "", err
		}
		if len(s.Files) > 0 {
			l, err := layerFile(filepath.Join(tmp, fmt.Sprintf("%d.tar.gz", i)), func(tw *tar.Writer) error { return addFiles(tw, s.Files) })
			if err != nil {
				return "", fmt.Errorf("image %s: %w", s.Ref, err)
			}
			if img, err = mutate.AppendLayers(img, l); err != nil {
				return "", err
			}
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return "", err
		}
		cf = cf.DeepCopy()
		cf.Architecture, cf.OS, cf.Created = "amd64", "linux", v1.Time{Time: epoch}
		cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
		cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User, cf.Config.WorkingDir = s.Entrypoint, s.Cmd, s.User, "/"
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			return "", err
		}
		ref, err := name.ParseReference(s.Ref)
		if err != nil {
			return "", err
		}
		images[ref] = img
	}
	part := filepath.Join(tmp, "images.tar")
	if err := tarball.MultiRefWriteToFile(part, images); err != nil {
		return "", fmt.Errorf("write %s: %w", part, err)
	}
	if err := os.Rename(part, out); err != nil {
		return "", err
	}
	return out, nil
}

// layerFile writes a gzip-compressed layer with fill and opens it as a layer.
func layerFile(p string, fill func(*tar.Writer) error) (v1.Layer, error) {
	f, err := os.Create(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zw, err := gzip.NewWriterLevel(f, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	if err := fill(tw); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return tarball.LayerFromFile(p)
}

// addTree adds the tree at root: directories, regular files and symlinks with their owners and
// modes (setuid included); device nodes, sockets and the contents of /dev, /proc and /sys are
// left out (the runtime provides them).
func addTree(tw *tar.Writer, root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() && (rel == "dev" || rel == "proc" || rel == "sys") {
			if err := tw.WriteHeader(&tar.Header{Name: rel + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
				return err
			}
			return filepath.SkipDir
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.IsDir() && !info.Mode().IsRegular() && info.Mode()&fs.ModeSymlink == 0 {
			return nil
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name, hdr.ModTime, hdr.Format = rel, epoch, tar.FormatPAX
		hdr.AccessTime, hdr.ChangeTime, hdr.Uname, hdr.Gname = time.Time{}, time.Time{}, "", ""
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
		}
		if info.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			return copyInto(tw, p)
		}
		return nil
	})
}

// addFiles adds an image's own files, owned by root.
func addFiles(tw *tar.Writer, files []file) error {
	for _, f := range files {
		hdr := &tar.Header{Name: strings.TrimPrefix(f.Path, "/"), ModTime: epoch, Format: tar.FormatPAX}
		if f.Dir {
			hdr.Name, hdr.Typeflag, hdr.Mode = hdr.Name+"/", tar.TypeDir, 0o755
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			continue
		}
		st, err := os.Stat(f.Src)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Size, hdr.Mode = tar.TypeReg, st.Size(), f.Mode
		if hdr.Mode == 0 {
			hdr.Mode = int64(st.Mode().Perm())
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if err := copyInto(tw, f.Src); err != nil {
			return err
		}
	}
	return nil
}

func copyInto(w io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}
