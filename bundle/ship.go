package bundle

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/scripts"
)

// HostState is what a host already has of a bundle.
type HostState struct {
	// Arch is the host's `uname -m`, e.g. x86_64.
	Arch string
	// Files maps an install path to the hex sha256 of the file there; absent: no file.
	Files map[string]string
	// Hashed are the files whose sha256 was computed, not taken from InstalledRecord: Ship
	// records those that are the bundle's, so that the next run does not read them again.
	Hashed map[string]bool
	// Images maps an image name in containerd's k8s.io namespace to the digest of its target.
	Images map[string]string
	// Pinned are the images that carry PinLabel.
	Pinned map[string]bool
}

// PinLabel is the containerd image label that keeps an image from kubelet's image garbage
// collection (containerd's CRI reports the image as pinned). The bundle's images are pinned when
// imported: the hosts cannot pull them back, and kubelet, once its image filesystem is over
// imageGCHighThresholdPercent, removes every image no container uses at that moment, such as
// kube-scheduler's while kubelet replaces its static pod (seen on the lab: the new pod never
// started, ErrImagePull from an offline registry).
const PinLabel = "io.cri-containerd.pinned=pinned"

// Need says which part of a bundle a host needs.
type Need struct {
	// ControlPlane hosts also need the kube-apiserver, kube-controller-manager, kube-scheduler
	// and etcd images, and get the kubeadm and kubectl tools; other hosts need kubelet, the
	// CNI plugins and the node images only.
	ControlPlane bool
	// Only, when set, limits this shipment to the files (by name) and images (by component) it
	// accepts: a master ships its control plane first and the rest while the API server starts.
	Only func(name string) bool
	// Runtime also ships the container runtime (containerd, its shim, ctr, runc): only for
	// hosts whose runtime kforge installs (containerRuntime.install: bundle); a host running
	// its own containerd must not get another ctr on its PATH.
	Runtime bool
	// APIProxy also ships the node-local API proxy (kforge-apiproxy): only for the nodes of a
	// cluster without a controlPlaneEndpoint.
	APIProxy bool
	// VIP also ships the control plane's virtual IP runner (kforge-vip): only for the masters
	// of a cluster with a controlPlaneVIP.
	VIP bool
	// EtcdSnapshots also ships the scheduled snapshots' program (kforge-etcd-snapshot): only
	// for the masters of a cluster that takes them.
	EtcdSnapshots bool
	// LocalVolumes also ships the local volumes' images (local-path-provisioner and kforge's
	// helper): only for the nodes of a cluster that serves them (localVolumes.enabled), every
	// node, as a helper pod runs where its volume is.
	LocalVolumes bool
}

// isLocalVolumes says whether the image of component is one of the local volumes'.
func isLocalVolumes(component string) bool {
	return component == "local-path-provisioner" || component == "local-path-helper"
}

// IsRuntime says whether the bundle file named name is part of the container runtime.
func IsRuntime(name string) bool {
	switch name {
	case "containerd", "containerd-shim-runc-v2", "ctr", "runc":
		return true
	}
	return false
}

// controlPlaneFiles are the masters' alone: the tools (IsTool) and the registry the other
// nodes take the bundle from.
var controlPlaneFiles = map[string]bool{"kubeadm": true, "kubectl": true, RegistryFile: true}

// IsTool says whether the bundle file named name is a binary for people rather than for running
// a node (kubeadm, kubectl): masters get them last.
func IsTool(name string) bool { return name == "kubeadm" || name == "kubectl" }

// wantsFile says whether a host with this need gets bundle file f.
func (n Need) wantsFile(f File) bool {
	if IsRuntime(f.Name) && !n.Runtime || f.Name == APIProxyFile && !n.APIProxy || f.Name == VIPFile && !n.VIP || f.Name == EtcdSnapshotFile && !n.EtcdSnapshots {
		return false
	}
	return n.wants(f.Name, controlPlaneFiles[f.Name])
}

// wantsImage says whether a host with this need gets image im.
func (n Need) wantsImage(im Image) bool {
	if isLocalVolumes(im.Component) && !n.LocalVolumes {
		return false
	}
	return n.wants(im.Component, im.ControlPlaneOnly)
}

func (n Need) wants(name string, controlPlaneOnly bool) bool {
	if controlPlaneOnly && !n.ControlPlane {
		return false
	}
	return n.Only == nil || n.Only(name)
}

// HostPlan is what a host lacks: files to upload and install, images to upload and import, and
// images it has that are not pinned (PinLabel) yet.
type HostPlan struct {
	Install []File
	Import  []Image
	Pin     []Image
}

// Empty says whether the host has everything already.
func (p HostPlan) Empty() bool { return len(p.Install) == 0 && len(p.Import) == 0 && len(p.Pin) == 0 }

// Bytes is how much the plan uploads.
func (p HostPlan) Bytes() int64 {
	var n int64
	for _, f := range p.Install {
		n += f.Size
	}
	for _, im := range p.Import {
		n += im.Size
	}
	return n
}

// PlanHost compares a bundle with what a host has: every file whose install path is missing or
// has another sha256 is to be installed; every image the host needs that containerd does not
// have under its name, or has with another digest, is to be imported; one it has unpinned is to
// be pinned.
func PlanHost(m *Manifest, have HostState, need Need) HostPlan {
	var p HostPlan
	for _, f := range m.Files {
		if need.wantsFile(f) && have.Files[f.Install] != f.SHA256 {
			p.Install = append(p.Install, f)
		}
	}
	for _, im := range m.Images {
		if !need.wantsImage(im) {
			continue
		}
		switch {
		case have.Images[im.Name] != im.Digest:
			p.Import = append(p.Import, im)
		case !have.Pinned[im.Name]:
			p.Pin = append(p.Pin, im)
		}
	}
	return p
}

// unameArch maps a bundle platform to the `uname -m` of hosts that run it.
var unameArch = map[string]string{"linux/amd64": "x86_64", "linux/arm64": "aarch64"}

// StagingDir is where image archives are uploaded on hosts before import; each archive is
// deleted once imported.
const StagingDir = "/var/lib/kforge/images"

const imagesMarker = "#kforge-images"

// noRuntime replaces the image list on a host without ctr: no runtime, so no images yet.
const noRuntime = "#kforge-no-runtime"

// InstalledRecord is where a host keeps the sha256 of each bundle file kforge installed, with
// the file's size, modification time and inode when it was installed: "sha256 size mtime inode
// path" per line. A file that still has that size, time and inode is not read again (as make
// and rsync trust a file's time and size); any other is hashed.
const InstalledRecord = "/var/lib/kforge/bundle-files"

// statFormat is what InstalledRecord keeps of a file: size, modification time (ns), inode.
const statFormat = "%s %.9Y %i"

// StateCommand is the one command ReadHostState runs: the host's machine architecture, the
// sha256 of each of the bundle's install paths that exists (from InstalledRecord when the file
// is as kforge installed it, else hashed), then containerd's image list in the k8s.io namespace
// (none on a host without ctr: its runtime is not installed yet; none asked for a manifest
// without images).
func StateCommand(m *Manifest) string { return stateCommand(m, InstalledRecord) }

func stateCommand(m *Manifest, record string) string {
	var paths []string
	for _, f := range m.Files {
		paths = append(paths, f.Install)
	}
	listImages := ""
	if len(m.Images) > 0 {
		listImages = "1"
	}
	return scripts.Command("bundle-state", "paths", scripts.Lines(paths), "record", record, "stat_format", statFormat,
		"images_marker", imagesMarker, "no_runtime", noRuntime, "list_images", listImages)
}

// recordInstalled records files in h's InstalledRecord; nothing to record, no command.
func recordInstalled(ctx context.Context, h remote.Host, files []File) error {
	if len(files) == 0 {
		return nil
	}
	if err := h.Run(ctx, remote.Cmd{Command: recordCommand(files, InstalledRecord)}); err != nil {
		return fmt.Errorf("record the installed files in %s: %w", InstalledRecord, err)
	}
	return nil
}

// recordCommand records in record the files just installed (each landed atomically with its
// sha256 checked), replacing their earlier lines. Two runs racing on the record can lose a
// line: that file is hashed again next time, nothing worse.
func recordCommand(files []File, record string) string {
	var lines []string
	for _, f := range files {
		lines = append(lines, f.SHA256+" "+f.Install)
	}
	return scripts.Command("bundle-record", "record", record, "files", scripts.Lines(lines), "stat_format", statFormat)
}

// ParseState parses StateCommand's output.
func ParseState(out []byte) (HostState, error) {
	s := HostState{Files: map[string]string{}, Hashed: map[string]bool{}, Images: map[string]string{}, Pinned: map[string]bool{}}
	text := string(out)
	files, images, ok := strings.Cut(text, imagesMarker+"\n")
	if !ok {
		return s, fmt.Errorf("no %s line in the output", imagesMarker)
	}
	for _, l := range strings.Split(files, "\n") {
		if a, ok := strings.CutPrefix(l, "arch="); ok {
			s.Arch = a
			continue
		}
		sum, p, ok := strings.Cut(l, "  ")
		if !ok {
			continue
		}
		if recorded, ok := strings.CutPrefix(sum, "="); ok {
			sum = recorded
		} else {
			s.Hashed[p] = true
		}
		s.Files[p] = sum
	}
	if strings.TrimSpace(images) == noRuntime {
		s.Images = map[string]string{}
		return s, nil
	}
	var err error
	s.Images, s.Pinned, err = parseImageList(images)
	return s, err
}

// ParseImageList parses the output of `ctr images ls` into image name -> target digest.
func ParseImageList(out string) (map[string]string, error) {
	images, _, err := parseImageList(out)
	return images, err
}

// parseImageList is ParseImageList, and which images carry PinLabel (the last column, LABELS:
// "-" or "key=value,...").
func parseImageList(out string) (map[string]string, map[string]bool, error) {
	images, pinned := map[string]string{}, map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	header := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if !header {
			if f[0] != "REF" || len(f) < 3 || f[2] != "DIGEST" || f[len(f)-1] != "LABELS" {
				return nil, nil, fmt.Errorf("ctr images ls: unexpected header %q", sc.Text())
			}
			header = true
			continue
		}
		if len(f) < 4 || !strings.HasPrefix(f[2], "sha256:") {
			return nil, nil, fmt.Errorf("ctr images ls: unexpected line %q", sc.Text())
		}
		images[f[0]] = f[2]
		pinned[f[0]] = slices.Contains(strings.Split(f[len(f)-1], ","), PinLabel)
	}
	if !header {
		return nil, nil, fmt.Errorf("ctr images ls: empty output")
	}
	return images, pinned, nil
}

// ReadHostState asks h what it has of bundle m, with one command.
func ReadHostState(ctx context.Context, h remote.Host, m *Manifest) (HostState, error) {
	out, err := remote.Output(ctx, h, StateCommand(m))
	if err != nil {
		return HostState{}, fmt.Errorf("read installed binaries and containerd's images (is containerd running?): %w", err)
	}
	s, err := ParseState(out)
	if err != nil {
		return HostState{}, fmt.Errorf("read installed binaries and containerd's images: %w", err)
	}
	return s, nil
}

// Progress receives upload progress: the host, the artifact (its path in the bundle), bytes
// sent so far and the total. It is called from several goroutines at once.
type Progress func(host, artifact string, sent, total int64)

// Ship brings host h up to date with the bundle in dir (manifest m): it reads what h has, uploads
// and installs the files that are missing or differ, uploads the images h needs and lacks to
// StagingDir and imports them into containerd's k8s.io namespace, then reads the state again to
// check the result. It returns what it did; an empty plan means nothing was uploaded. Run it
// inside remote.Each so large uploads respect the upload concurrency limit.
func Ship(ctx context.Context, h remote.Host, dir string, m *Manifest, need Need, progress Progress) (HostPlan, error) {
	p, _, err := ShipVia(ctx, h, dir, m, need, progress, nil, "")
	return p, err
}

// ShipVia is Ship for a node that first takes what it lacks from the masters' registries
// (mirrors, https://ip:port in the order it tries them, trusted through the CA file ca on the
// host; FetchCommand): only what they could not give is uploaded. It returns what was uploaded
// and what was taken from the masters.
func ShipVia(ctx context.Context, h remote.Host, dir string, m *Manifest, need Need, progress Progress, mirrors []string, ca string) (HostPlan, Fetched, error) {
	var fetched Fetched
	// Hash on the host only the files this shipment may install: apply ships a host in up to
	// three parts (runtime, control plane first, the rest), and hashing every binary of the
	// bundle for each part tripled the reading of some hundred MB per host and run. containerd
	// is asked for its images only when this shipment may import some: it may not run yet.
	wanted := *m
	wanted.Files, wanted.Images = nil, nil
	for _, f := range m.Files {
		if need.wantsFile(f) {
			wanted.Files = append(wanted.Files, f)
		}
	}
	for _, im := range m.Images {
		if need.wantsImage(im) {
			wanted.Images = append(wanted.Images, im)
		}
	}
	have, err := ReadHostState(ctx, h, &wanted)
	if err != nil {
		return HostPlan{}, fetched, err
	}
	if want := unameArch[m.Platform]; have.Arch != want {
		return HostPlan{}, fetched, fmt.Errorf("the bundle is for %s but the host's machine is %q (uname -m): build or fetch a bundle for it", m.Platform, have.Arch)
	}
	plan := PlanHost(m, have, need)
	if len(mirrors) > 0 && len(plan.Install)+len(plan.Import) > 0 {
		out, err := remote.Output(ctx, h, FetchCommand(plan.Install, plan.Import, mirrors, ca))
		if err != nil {
			return HostPlan{}, fetched, fmt.Errorf("take the bundle from the masters' registries: %w", err)
		}
		if fetched = parseFetched(string(out), plan.Install, plan.Import); !fetched.Empty() {
			if have, err = ReadHostState(ctx, h, &wanted); err != nil {
				return HostPlan{}, fetched, err
			}
			plan = PlanHost(m, have, need)
		}
	}
	// Files the host has as the bundle's, read this time: recorded with what is installed.
	record := slices.Clone(plan.Install)
	for _, f := range wanted.Files {
		if have.Hashed[f.Install] && have.Files[f.Install] == f.SHA256 {
			record = append(record, f)
		}
	}
	if plan.Empty() {
		return plan, fetched, recordInstalled(ctx, h, record)
	}
	for _, f := range plan.Install {
		mode, err := strconv.ParseUint(f.Mode, 8, 32)
		if err != nil {
			return plan, fetched, fmt.Errorf("bundle file %s: mode %q: %w", f.Name, f.Mode, err)
		}
		if err := upload(ctx, h, dir, f.Path, f.Install, f.SHA256, f.Size, fs.FileMode(mode), progress); err != nil {
			return plan, fetched, err
		}
	}
	if err := recordInstalled(ctx, h, record); err != nil {
		return plan, fetched, err
	}
	for _, im := range plan.Import {
		staged := StagingDir + "/" + im.Component + ".tar"
		if err := upload(ctx, h, dir, im.Path, staged, im.SHA256, im.Size, 0o600, progress); err != nil {
			return plan, fetched, err
		}
		// --no-unpack: the CRI unpacks an image into its snapshot when a container first uses
		// it, in parallel per pod; unpacking here, one image after another, doubled the time a
		// master took to be ready for its control plane.
		cmd := remote.Command("ctr", "-n", "k8s.io", "images", "import", "--no-unpack", staged) + " && " + remote.Command("rm", "-f", "--", staged)
		if err := h.Run(ctx, remote.Cmd{Command: cmd}); err != nil {
			return plan, fetched, fmt.Errorf("import image %s: %w", im.Name, err)
		}
	}
	if err := pin(ctx, h, append(slices.Clone(plan.Import), plan.Pin...)); err != nil {
		return plan, fetched, err
	}
	if len(plan.Import)+len(plan.Pin) == 0 {
		return plan, fetched, nil
	}
	// Check that containerd has the imported images. Files are not hashed again: each upload
	// already landed atomically from content of known size and sha256, and re-hashing every
	// binary cost half a second on a master's critical path.
	images := *m
	images.Files = nil
	after, err := ReadHostState(ctx, h, &images)
	if err != nil {
		return plan, fetched, err
	}
	if left := PlanHost(&images, after, need); !left.Empty() {
		var what []string
		for _, f := range left.Install {
			what = append(what, fmt.Sprintf("%s (sha256 %s, want %s)", f.Install, orNone(after.Files[f.Install]), f.SHA256))
		}
		for _, im := range left.Import {
			what = append(what, fmt.Sprintf("image %s (digest %s, want %s)", im.Name, orNone(after.Images[im.Name]), im.Digest))
		}
		for _, im := range left.Pin {
			what = append(what, fmt.Sprintf("image %s not labelled %s", im.Name, PinLabel))
		}
		return plan, fetched, fmt.Errorf("after shipping the bundle, still different: %s", strings.Join(what, "; "))
	}
	return plan, fetched, nil
}

// pin labels images with PinLabel, in one command.
func pin(ctx context.Context, h remote.Host, images []Image) error {
	if len(images) == 0 {
		return nil
	}
	var cmds, names []string
	for _, im := range images {
		cmds = append(cmds, remote.Command("ctr", "-n", "k8s.io", "images", "label", im.Name, PinLabel)+" >/dev/null")
		names = append(names, im.Name)
	}
	if err := h.Run(ctx, remote.Cmd{Command: strings.Join(cmds, " && ")}); err != nil {
		return fmt.Errorf("pin images %s (%s): %w", strings.Join(names, ", "), PinLabel, err)
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// upload sends the bundle file rel to path on h, reporting progress.
func upload(ctx context.Context, h remote.Host, dir, rel, path, sum string, size int64, mode fs.FileMode, progress Progress) error {
	f, err := os.Open(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		return err
	}
	defer f.Close()
	var body io.Reader = f
	if progress != nil {
		body = &progressReader{r: f, report: func(n int64) { progress(h.Name(), rel, n, size) }, total: size}
	}
	if err := h.Upload(ctx, remote.File{Path: path, Body: body, Size: size, SHA256: sum, Mode: mode}); err != nil {
		return fmt.Errorf("upload %s to %s: %w", rel, path, err)
	}
	if progress != nil {
		progress(h.Name(), rel, size, size)
	}
	return nil
}

// progressReader reports how much was read, at most every 1/64th of the total.
type progressReader struct {
	r      io.Reader
	report func(int64)
	total  int64
	n      int64
	last   int64
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if p.n-p.last >= max(p.total/64, 1<<20) {
		p.last = p.n
		p.report(p.n)
	}
	return n, err
}

// Target is one host to ship a bundle to.
type Target struct {
	remote.Host
	Need
}

// ShipAll ships the bundle in dir to every target, lim.Hosts at once and at most
// lim.LargeUploads large uploads at once across all of them, and returns each host's plan by
// host name. Errors are per host (remote.Errors).
func ShipAll(ctx context.Context, dir string, m *Manifest, targets []Target, lim remote.Limits, progress Progress) (map[string]HostPlan, error) {
	var mu sync.Mutex
	plans := map[string]HostPlan{}
	err := remote.Each(ctx, targets, lim, func(ctx context.Context, t Target) error {
		p, err := Ship(ctx, t.Host, dir, m, t.Need, progress)
		mu.Lock()
		plans[t.Name()] = p
		mu.Unlock()
		return err
	})
	return plans, err
}
