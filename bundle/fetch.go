package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"slices"
	"strings"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/scripts"
)

// The masters serve the bundle to the other nodes: each master's registry (CNCF distribution,
// hostpath.RegistryPath) holds the binaries as blobs of hostpath.RegistryFilesRepo, named by
// their sha256, and the images under /v2/<origin>/<path> (registry.k8s.io/kube-proxy is
// /v2/registry.k8s.io/kube-proxy), where the nodes' containerd finds them through hosts.toml.
// The workstation uploads the bundle to the masters only; a node takes what it lacks from the
// masters over the cluster network and gets uploaded only what that left missing.

// Served is what of bundle m the masters' registries hold: what a node with need needs,
// without the masters' own files and images.
func Served(m *Manifest, need Need) (files []File, images []Image) {
	need.ControlPlane, need.VIP, need.EtcdSnapshots = false, false, false
	for _, f := range m.Files {
		if need.wantsFile(f) {
			files = append(files, f)
		}
	}
	for _, im := range m.Images {
		if need.wantsImage(im) {
			images = append(images, im)
		}
	}
	return files, images
}

// FillKey names what a fill puts in a registry: the files' sha256 and the images' digests.
func FillKey(files []File, images []Image) string {
	var lines []string
	for _, f := range files {
		lines = append(lines, "file "+f.SHA256)
	}
	for _, im := range images {
		lines = append(lines, "image "+im.Name+"@"+im.Digest)
	}
	slices.Sort(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(sum[:])
}

// Fill outcomes, the last line of FillCommand's output; FillReplaced is a line before Filled
// when an earlier fill (another release, say) was removed first.
const (
	Filled       = "filled"
	FillUpToDate = "up to date"
	FillReplaced = "replaced the earlier fill"
)

// FillMode says what a fill does with what a master's registry already holds.
type FillMode int

const (
	// FillReplace leaves the registry holding exactly what it fills (recorded in
	// hostpath.RegistryFilled): a record of other content (the bundle of an earlier release, or
	// of another cluster) makes it empty the storage first, so the registry does not grow with
	// every upgrade; what is the same is pushed again from the master, over loopback.
	FillReplace FillMode = iota
	// FillAdd adds beside what is there, recorded apart (an upgrade's addon images of each
	// minor on its way, which the nodes take before the release itself is filled); the next
	// FillReplace of other content removes it too.
	FillAdd
)

// registryPaths are where a master's registry lives; masterRegistry is the hosts' (hostpath),
// tests fill one of their own.
type registryPaths struct {
	Dir        string // its storage's root directory; Dir/docker is distribution's, Dir/kforge-filled* kforge's records
	Binary     string
	FillConfig string // the writable instance's configuration, which listens on FillAddr
	FillAddr   string
	FillLog    string
}

var masterRegistry = registryPaths{Dir: hostpath.RegistryDir, Binary: hostpath.RegistryPath, FillConfig: hostpath.RegistryFillConfig,
	FillAddr: hostpath.RegistryFillAddr, FillLog: "/var/log/kforge-registry-fill.log"}

// FillCommand fills a master's registry with files and images (Served) from the master's own
// installed binaries and containerd: it runs the registry's writable instance
// (hostpath.RegistryFillConfig, on hostpath.RegistryFillAddr only) while it uploads each file
// as a blob (the registry checks its sha256) and pushes each image, then records FillKey
// (hostpath.RegistryFilled, or beside it for FillAdd). It does nothing when the record holds
// that key already; mode says what becomes of the rest. It prints Filled or FillUpToDate; it
// fails saying why (no curl on the master, the port taken, the registry not starting, a push
// refused).
func FillCommand(files []File, images []Image, mode FillMode) string {
	return masterRegistry.fillCommand(files, images, mode)
}

func (p registryPaths) fillCommand(files []File, images []Image, mode FillMode) string {
	filled, added := path.Join(p.Dir, path.Base(hostpath.RegistryFilled)), path.Join(p.Dir, path.Base(hostpath.RegistryFilled)+"-added")
	rec, replace := filled, "1"
	if mode == FillAdd {
		rec, replace = added, ""
	}
	var fs, ims []string
	for _, f := range files {
		fs = append(fs, f.SHA256+" "+f.Install)
	}
	for _, im := range images {
		ims = append(ims, im.Name)
	}
	return scripts.Command("registry-fill", "key", FillKey(files, images), "rec", rec, "replace", replace, "added", added,
		"dir", p.Dir, "binary", p.Binary, "fill_config", p.FillConfig, "fill_addr", p.FillAddr, "log", p.FillLog,
		"repo", hostpath.RegistryFilesRepo, "files", scripts.Lines(fs), "images", scripts.Lines(ims),
		"filled", Filled, "up_to_date", FillUpToDate, "replaced", FillReplaced)
}

// Fetched is what a node took from the masters' registries.
type Fetched struct {
	Files  []File
	Images []Image
	// NoCurl says the node has no curl, so took no file from the masters.
	NoCurl bool
}

// Empty says whether nothing was taken.
func (f Fetched) Empty() bool { return len(f.Files) == 0 && len(f.Images) == 0 }

// FetchCommand makes a node take files and images from the masters' registries (mirrors:
// https://ip:port, in the order the node tries them), trusting ca: each file is downloaded
// beside its install path, checked against its sha256, and moved into place; each image is
// pulled by containerd through its hosts.toml (hostpath.RegistryConfigDir) and pinned. What one
// master cannot give is asked of the next; what none gives is left for the upload that follows.
// It prints "file <path>" and "image <name>" for what it took.
func FetchCommand(files []File, images []Image, mirrors []string, ca string) string {
	var ms, fs, ims []string
	for _, m := range mirrors {
		ms = append(ms, strings.TrimSuffix(m, "/"))
	}
	for _, f := range files {
		fs = append(fs, f.SHA256+" "+f.Mode+" "+f.Install)
	}
	for _, im := range images {
		ims = append(ims, im.Name)
	}
	return scripts.Command("registry-fetch", "mirrors", strings.Join(ms, " "), "ca", ca, "repo", hostpath.RegistryFilesRepo,
		"files", scripts.Lines(fs), "images", scripts.Lines(ims), "hosts_dir", hostpath.RegistryConfigDir, "pin_label", PinLabel)
}

// parseFetched reads FetchCommand's output against what was asked.
func parseFetched(out string, files []File, images []Image) Fetched {
	var got Fetched
	took := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		if l == "no-curl" {
			got.NoCurl = true
		}
		took[l] = true
	}
	for _, f := range files {
		if took["file "+f.Install] {
			got.Files = append(got.Files, f)
		}
	}
	for _, im := range images {
		if took["image "+im.Name] {
			got.Images = append(got.Images, im)
		}
	}
	return got
}
