package bundle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/progress"

	"github.com/kforge/kforge/internal/fsx"
	"github.com/kforge/kforge/release"

	"golang.org/x/sync/errgroup"
)

// Options for Build.
type Options struct {
	// BuildOptions.Version is the Kubernetes version when Versions is empty; the other
	// components' versions follow from it (release.For).
	BuildOptions
	// Versions are the Kubernetes versions the bundle holds (e.g. v1.36.3 and v1.37.2, for an
	// upgrade from one to the other); empty: BuildOptions.Version alone.
	Versions []string
	// Out is the bundle directory to write. It must not exist, be empty, or hold a bundle
	// (which is replaced).
	Out string
}

// versions are the Kubernetes versions to bundle, oldest first, each once.
func (o Options) versions() []string {
	if len(o.Versions) == 0 {
		return []string{o.Version}
	}
	return release.SortVersions(o.Versions)
}

// releasePart is what one release of a bundle is built from: its binaries' cache
// directories by component and its images' specs.
type releasePart struct {
	r     release.Release
	dirs  map[string]string
	specs []imageSpec
}

// Build builds every artifact of a bundle for each of o's Kubernetes versions from Go modules
// (or takes it from the cache) and writes the bundle directory o.Out: bin/ (kubeadm, kubelet,
// kubectl), cni/ (bridge, host-local, loopback, portmap), runtime/ (containerd, its shim, ctr,
// runc), images/ (one archive per image) and manifest.json. An artifact several releases share
// (the same CNI plugins, the same pause or flannel image) is in the bundle once; one that
// belongs to some of its releases only is put under a name carrying its version
// (bin/v1.37.2/kubelet, images/etcd-3.7.0-0.tar), so a one-release bundle keeps the plain
// layout. Artifacts are copied from the cache (in the kernel, with copy_file_range), never
// hard-linked: writing into a bundle file must not change the cache.
func Build(ctx context.Context, o Options) (*Manifest, error) {
	if o.Out == "" {
		return nil, errors.New("bundle build: no output directory given")
	}
	var rels []release.Release
	for _, version := range o.versions() {
		r, err := release.For(version)
		if err != nil {
			return nil, err
		}
		rels = append(rels, r)
	}
	if err := checkOut(o.Out); err != nil {
		return nil, err
	}

	// Binaries, one cached build per component and version, then the images made from them.
	var parts []releasePart
	for i, v := range rels {
		km, err := kubernetesModule(v.Kubernetes)
		if err != nil {
			return nil, err
		}
		then := fmt.Sprintf("%d images", len(ImageComponents))
		if later := len(rels) - i - 1; later > 0 {
			then = fmt.Sprintf("%d more releases, then the images", later)
		}
		bo := o.BuildOptions
		bo.Version = v.Kubernetes
		dirs, err := bo.buildModules(ctx, []goModule{
			km,
			etcdModule(v.Etcd),
			corednsModule(v.CoreDNS),
			cniModule(v.CNIPlugins),
			flannelModule(v.Flannel),
			netpolModule(v.NetworkPolicy),
			metricsServerModule(v.MetricsServer),
			localPathModule(v.LocalPath),
			localPathHelperModule(v.LocalPath),
			pauseModule(v.Pause),
			containerdModule(v.Containerd),
			runcModule(v.Runc),
			apiproxyModule(),
			vipModule(),
			etcdsnapModule(),
			registryModule(RegistryVersion),
		}, then)
		if err != nil {
			if len(rels) > 1 {
				err = fmt.Errorf("Kubernetes %s: %w", v.Kubernetes, err)
			}
			return nil, err
		}
		names := v.Images("").ByComponent()
		if err := checkKubeadmImages(ctx, filepath.Join(dirs["kubernetes"], "kubeadm"), v, names); err != nil {
			return nil, err
		}
		specs, err := imageSpecs(names, dirs)
		if err != nil {
			return nil, err
		}
		parts = append(parts, releasePart{r: v, dirs: dirs, specs: specs})
	}

	// One image per name: releases naming the same image build it from the same cached
	// binaries, so it is written (or taken from the cache) once.
	var images []sharedImage
	byName := map[string]int{}
	for _, p := range parts {
		for _, sp := range p.specs {
			key, err := imageKey(sp)
			if err != nil {
				return nil, err
			}
			if i, ok := byName[sp.Name]; ok {
				if images[i].key != key {
					return nil, fmt.Errorf("image %s: Kubernetes %s and %s would build it from different inputs; the release catalogue (release/release.go) must not name one image for two different builds",
						sp.Name, images[i].ks[0], p.r.Kubernetes)
				}
				images[i].ks = append(images[i].ks, p.r.Kubernetes)
				continue
			}
			byName[sp.Name] = len(images)
			images = append(images, sharedImage{spec: sp, key: key, ks: []string{p.r.Kubernetes}})
		}
	}
	specs := make([]imageSpec, len(images))
	for i, si := range images {
		specs[i] = si.spec
	}
	archives, err := o.imageArchives(ctx, specs)
	if err != nil {
		return nil, err
	}

	var m *Manifest
	if err := progress.Task(o.reporter(), "bundle", "write "+o.Out, func(progress.Reporter) (err error) {
		m, err = writeBundle(o.Out, parts, images, archives)
		return err
	}); err != nil {
		return nil, err
	}
	return m, nil
}

// sharedImage is one image of a bundle and the Kubernetes versions that name it.
type sharedImage struct {
	spec imageSpec
	key  string
	ks   []string
}

// bundleFile is one file of a bundle: where it comes from, the version of what it is
// (Kubernetes, CNI plugins, containerd or runc) and the releases it belongs to.
type bundleFile struct {
	f   File
	src string
	ver string
	ks  []string
}

// releaseFiles are the files of one release's part: the Kubernetes tools, the CNI plugins and
// the container runtime.
func releaseFiles(p releasePart) []bundleFile {
	var out []bundleFile
	add := func(f File, src, ver string) {
		out = append(out, bundleFile{f: f, src: src, ver: ver, ks: []string{p.r.Kubernetes}})
	}
	for _, c := range []string{"kubeadm", "kubelet", "kubectl"} {
		add(File{Name: c, Path: "bin/" + c, Install: "/usr/bin/" + c, Mode: "0755"}, filepath.Join(p.dirs["kubernetes"], c), p.r.Kubernetes)
	}
	for _, c := range sortedKeys(CNIPlugins) {
		add(File{Name: c, Path: "cni/" + c, Install: hostpath.DefaultCNIBinDir + "/" + c, Mode: "0755"}, filepath.Join(p.dirs["cni-plugins"], c), p.r.CNIPlugins)
	}
	for _, c := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		add(File{Name: c, Path: "runtime/" + c, Install: hostpath.RuntimeBinDir + "/" + c, Mode: "0755"}, filepath.Join(p.dirs["containerd"], c), p.r.Containerd)
	}
	add(File{Name: "runc", Path: "runtime/runc", Install: hostpath.RuncPath, Mode: "0755"}, filepath.Join(p.dirs["runc"], "runc"), p.r.Runc)
	add(File{Name: APIProxyFile, Path: "bin/" + APIProxyFile, Install: hostpath.APIProxyPath, Mode: "0755"}, filepath.Join(p.dirs["apiproxy"], APIProxyFile), TCPProxyVersion)
	add(File{Name: VIPFile, Path: "bin/" + VIPFile, Install: hostpath.VIPPath, Mode: "0755"}, filepath.Join(p.dirs["vip"], VIPFile), vipModule().Version)
	add(File{Name: EtcdSnapshotFile, Path: "bin/" + EtcdSnapshotFile, Install: hostpath.EtcdSnapshotPath, Mode: "0755"}, filepath.Join(p.dirs["etcdsnap"], EtcdSnapshotFile), etcdsnapModule().Version)
	add(File{Name: RegistryFile, Path: "bin/" + RegistryFile, Install: hostpath.RegistryPath, Mode: "0755"}, filepath.Join(p.dirs["registry"], "registry"), RegistryVersion)
	return out
}

// writeBundle writes the bundle directory out from the releases' built binaries and the
// image archives (archives[i] of images[i]).
func writeBundle(out string, parts []releasePart, images []sharedImage, archives []cachedArchive) (*Manifest, error) {
	m := &Manifest{SchemaVersion: SchemaVersion, Platform: "linux/amd64", Source: "built"}
	for _, p := range parts {
		m.Releases = append(m.Releases, versionsOf(p.r))
	}
	// ofSome is the Kubernetes field of an artifact of releases ks: nil when it is every one.
	ofSome := func(ks []string) []string {
		if len(ks) == len(parts) {
			return nil
		}
		return ks
	}
	// One file per source in the cache: releases of one CNI plugins or runtime version share
	// them.
	var files []bundleFile
	bySrc := map[string]int{}
	for _, p := range parts {
		for _, bf := range releaseFiles(p) {
			if i, ok := bySrc[bf.src]; ok {
				files[i].ks = append(files[i].ks, p.r.Kubernetes)
				continue
			}
			bySrc[bf.src] = len(files)
			files = append(files, bf)
		}
	}

	// Assembled beside out and swapped in.
	parent := filepath.Dir(filepath.Clean(out))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(out)+".tmp-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, err
	}
	m.Files = make([]File, len(files))
	g := new(errgroup.Group)
	g.SetLimit(max(1, runtime.NumCPU()))
	for i, bf := range files {
		f := bf.f
		f.Kubernetes = ofSome(bf.ks)
		if f.Kubernetes != nil {
			dir, base := path.Split(f.Path)
			f.Path = dir + bf.ver + "/" + base // bin/v1.37.2/kubelet, runtime/v2.4.2/containerd
		}
		g.Go(func() error {
			dst := filepath.Join(tmp, filepath.FromSlash(f.Path))
			if err := copyFile(bf.src, dst); err != nil {
				return err
			}
			var err error
			f.SHA256, f.Size, err = sha256File(dst)
			m.Files[i] = f
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for i, si := range images {
		a := archives[i]
		im := Image{
			Component:        si.spec.Component,
			Kubernetes:       ofSome(si.ks),
			Name:             si.spec.Name,
			Path:             "images/" + si.spec.Component + ".tar",
			SHA256:           a.SHA256,
			Size:             a.Size,
			Digest:           a.Digest,
			ID:               a.ID,
			ControlPlaneOnly: controlPlaneOnly[si.spec.Component],
		}
		if im.Kubernetes != nil {
			im.Path = "images/" + si.spec.Component + "-" + imageTag(si.spec.Name) + ".tar" // images/etcd-3.7.0-0.tar
		}
		if err := copyFile(a.path, filepath.Join(tmp, filepath.FromSlash(im.Path))); err != nil {
			return nil, err
		}
		m.Images = append(m.Images, im)
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("bundle build: the manifest it would write is wrong: %w", err)
	}
	if err := writeManifest(tmp, m); err != nil {
		return nil, err
	}
	if err := swapDir(tmp, out); err != nil {
		return nil, err
	}
	return m, nil
}

// buildModules builds each module's binaries in order, or takes them from the cache, each as a
// task of its own. While one builds, a heartbeat says which, for how long, and what is left
// (the modules after it, then "then"). It returns each module's directory by name.
func (o BuildOptions) buildModules(ctx context.Context, mods []goModule, then string) (map[string]string, error) {
	dirs := map[string]string{}
	for i, m := range mods {
		var left []string
		for _, l := range mods[i+1:] {
			left = append(left, l.Name)
		}
		if then != "" {
			left = append(left, then)
		}
		if len(left) == 0 {
			left = append(left, "nothing")
		}
		what := m.Version + " from the cache"
		if _, ok := cachedBinaries(o, m); !ok {
			what = m.Version + ", not in the cache: building it from Go modules"
		}
		err := progress.Task(o.reporter(), m.Name, what, func(r progress.Reporter) error {
			defer progress.Every(r, o.heartbeat(), func(el time.Duration) progress.Event {
				return progress.Event{Kind: progress.Info, Duration: el, Message: fmt.Sprintf("building %s %s from Go modules: %s so far; left: %s",
					m.Name, m.Version, progress.Round(el), strings.Join(left, ", "))}
			})()
			mo := o
			mo.Report = r
			d, err := binaries(ctx, mo, m)
			dirs[m.Name] = d
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("build %s: %w", m.Name, err)
		}
	}
	return dirs, nil
}

// imageArchives returns the archive of each image, each written (or taken from the cache) as a
// task of its own, "image <component>". gzip is CPU-bound, so at most one is written per core;
// while one is written, a heartbeat says so.
func (o BuildOptions) imageArchives(ctx context.Context, specs []imageSpec) ([]cachedArchive, error) {
	archives := make([]cachedArchive, len(specs))
	var done atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, runtime.NumCPU()))
	for i, s := range specs {
		g.Go(func() error {
			defer done.Add(1)
			base, a, ok, err := cachedImage(o, s)
			if err != nil {
				return err
			}
			what := s.Name + " from the cache"
			if !ok {
				what = s.Name + ", not in the cache: writing its archive"
			}
			return progress.Task(o.reporter(), "image "+s.Component, what, func(r progress.Reporter) error {
				if ok {
					archives[i] = a
					return nil
				}
				defer progress.Every(r, o.heartbeat(), func(el time.Duration) progress.Event {
					return progress.Event{Kind: progress.Info, Duration: el, Message: fmt.Sprintf("writing image %s: %s so far; %d of %d images done",
						s.Name, progress.Round(el), done.Load(), len(specs))}
				})()
				var err error
				archives[i], err = writeImage(gctx, s, base)
				if err == nil {
					r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("image %s: %d MB", s.Name, archives[i].Size>>20)})
				}
				return err
			})
		})
	}
	return archives, g.Wait()
}

// checkOut refuses to replace a directory that is neither empty nor a bundle.
func checkOut(out string) error {
	entries, err := os.ReadDir(out)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bundle output %s: %w", out, err)
	}
	if len(entries) == 0 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(out, ManifestFile)); err != nil {
		return fmt.Errorf("bundle output %s exists and holds no bundle (no %s); give an empty or new directory", out, ManifestFile)
	}
	return nil
}

// swapDir puts the directory tmp at out, replacing what checkOut allowed to be there.
func swapDir(tmp, out string) error {
	if _, err := os.Stat(out); err == nil {
		old := tmp + ".old"
		if err := os.Rename(out, old); err != nil {
			return err
		}
		defer os.RemoveAll(old)
	}
	return os.Rename(tmp, out)
}

// copyFile copies src to a new file dst with src's permission bits.
func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return out.Close()
}

// checkKubeadmImages asks the built kubeadm which images it uses and fails if the bundle would
// name any of them differently: the bundle must hold exactly what the static pods reference.
func checkKubeadmImages(ctx context.Context, kubeadm string, v release.Release, names map[string]string) error {
	out, err := exec.CommandContext(ctx, kubeadm, "config", "images", "list",
		"--kubernetes-version", v.Kubernetes, "--image-repository", "registry.k8s.io").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("%s config images list: %w: %s", kubeadm, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return fmt.Errorf("%s config images list: %w", kubeadm, err)
	}
	want := map[string]bool{}
	for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "etcd", "coredns", "pause"} {
		want[names[c]] = true
	}
	var got []string
	for _, l := range strings.Fields(string(out)) {
		got = append(got, l)
		if !want[l] {
			return fmt.Errorf("kubeadm %s uses image %s, which kforge's bundle for it does not name (bundle names: %s); the %s row of the release catalogue (release/release.go) needs updating",
				v.Kubernetes, l, strings.Join(sortedKeys(want), ", "), v.Minor)
		}
	}
	if len(got) != len(want) {
		return fmt.Errorf("kubeadm %s lists images %s; the bundle expects %s", v.Kubernetes, strings.Join(got, ", "), strings.Join(sortedKeys(want), ", "))
	}
	return nil
}

// imageSpecs lays out each image from the built binaries (dirs by component) and the build
// machine's netfilter userspace (kube-proxy and flannel program iptables).
func imageSpecs(names map[string]string, dirs map[string]string) ([]imageSpec, error) {
	nf, err := netfilterFiles()
	if err != nil {
		return nil, err
	}
	k := dirs["kubernetes"]
	var specs []imageSpec
	for _, c := range ImageComponents {
		s := imageSpec{Component: c, Name: names[c]}
		switch c {
		case "kube-apiserver", "kube-controller-manager", "kube-scheduler":
			s.Files = []imageFile{{Path: "/usr/local/bin/" + c, Src: filepath.Join(k, c)}}
		case "kube-proxy":
			s.Files = append([]imageFile{{Path: "/usr/local/bin/kube-proxy", Src: filepath.Join(k, c)}}, nf...)
		case "etcd":
			s.Files = []imageFile{
				{Path: "/usr/local/bin/etcd", Src: filepath.Join(dirs["etcd"], "etcd")},
				{Path: "/usr/local/bin/etcdctl", Src: filepath.Join(dirs["etcd"], "etcdctl")},
			}
		case "coredns":
			s.Files = []imageFile{{Path: "/coredns", Src: filepath.Join(dirs["coredns"], "coredns")}}
			s.Entrypoint = []string{"/coredns"}
		case "pause":
			s.Files = []imageFile{{Path: "/pause", Src: filepath.Join(dirs["pause"], "pause")}}
			s.Entrypoint = []string{"/pause"}
		case "flannel":
			s.Files = append([]imageFile{{Path: "/opt/bin/flanneld", Src: filepath.Join(dirs["flannel"], "flanneld")}}, nf...)
			s.Entrypoint = []string{"/opt/bin/flanneld"}
		case "kube-network-policies":
			s.Files = []imageFile{{Path: NetworkPolicyBinary, Src: filepath.Join(dirs["kube-network-policies"], "netpol")}}
			s.Entrypoint = []string{NetworkPolicyBinary}
		case "metrics-server":
			s.Files = []imageFile{{Path: "/metrics-server", Src: filepath.Join(dirs["metrics-server"], "metrics-server")}}
			s.Entrypoint = []string{"/metrics-server"}
		case "local-path-provisioner":
			s.Files = []imageFile{{Path: LocalPathBinary, Src: filepath.Join(dirs["local-path-provisioner"], "local-path-provisioner")}}
			s.Entrypoint = []string{LocalPathBinary}
		case "local-path-helper":
			s.Files = []imageFile{{Path: LocalPathHelperBinary, Src: filepath.Join(dirs["local-path-helper"], "local-path-helper")}}
			s.Entrypoint = []string{LocalPathHelperBinary}
		}
		specs = append(specs, s)
	}
	return specs, nil
}

// cachedArchive is an image archive in the cache with what the manifest says of it.
type cachedArchive struct {
	path string
	ImageArchive
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// cachedImage returns where the archive of s is cached (its path without extension) and, when
// an archive from the same inputs (spec, and each source file's path, size, mode and
// modification time) is there, that archive.
func cachedImage(o BuildOptions, s imageSpec) (base string, a cachedArchive, ok bool, err error) {
	key, err := imageKey(s)
	if err != nil {
		return "", cachedArchive{}, false, err
	}
	dir := filepath.Join(o.cacheDir(), "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", cachedArchive{}, false, err
	}
	base = filepath.Join(dir, s.Component+"-"+key[:20])
	a = cachedArchive{path: base + ".tar"}
	if b, err := os.ReadFile(base + ".json"); err == nil && json.Unmarshal(b, &a) == nil {
		if st, err := os.Stat(a.path); err == nil && st.Size() == a.Size {
			touch(base + ".json")
			return base, a, true, nil
		}
	}
	return base, cachedArchive{path: base + ".tar"}, false, nil
}

// writeImage writes the archive of s into the cache at base (from cachedImage).
func writeImage(ctx context.Context, s imageSpec, base string) (cachedArchive, error) {
	if err := ctx.Err(); err != nil {
		return cachedArchive{}, err
	}
	dir := filepath.Dir(base)
	a := cachedArchive{path: base + ".tar"}
	ia, err := writeImageArchive(s, a.path, dir)
	if err != nil {
		return cachedArchive{}, fmt.Errorf("image %s: %w", s.Name, err)
	}
	a.ImageArchive = ia
	if a.SHA256, a.Size, err = sha256File(a.path); err != nil {
		return cachedArchive{}, err
	}
	b, _ := json.Marshal(a)
	if err := fsx.WriteFile(base+".json", b, 0o644); err != nil {
		return cachedArchive{}, err
	}
	pruneImages(dir, s.Component, base)
	return a, nil
}

func imageKey(s imageSpec) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "r%d %s %s %q\n", recipeRevision, s.Component, s.Name, s.Entrypoint)
	files := slices.Clone(s.Files)
	slices.SortFunc(files, func(a, b imageFile) int { return strings.Compare(a.Path, b.Path) })
	for _, f := range files {
		if f.Link != "" {
			fmt.Fprintf(h, "%s -> %s\n", f.Path, f.Link)
			continue
		}
		st, err := os.Stat(f.Src)
		if err != nil {
			return "", fmt.Errorf("image %s: %w", s.Name, err)
		}
		fmt.Fprintf(h, "%s %s %d %o %d %o\n", f.Path, f.Src, st.Size(), st.Mode(), st.ModTime().UnixNano(), f.Mode)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
