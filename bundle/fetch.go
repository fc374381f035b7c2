package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/remote"
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
	need.ControlPlane, need.VIP = false, false
	for _, f := range m.Files {
		if need.wantsFile(f) {
			files = append(files, f)
		}
	}
	for _, im := range m.Images {
		if need.wants(im.Component, im.ControlPlaneOnly) {
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

// mirrorRef is where an image is in the masters' registries, behind their address:
// registry.k8s.io/pause:3.10 is registry.k8s.io/pause:3.10 under /v2/.
func mirrorRef(addr, image string) string { return addr + "/" + image }

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
	rec, replace := filled, `if [ -f "$rec" ]; then
  rm -f -- "$rec" `+remote.Quote(added)+` && rm -rf --one-file-system -- `+remote.Quote(path.Join(p.Dir, "docker"))+` || exit 1
  echo `+remote.Quote(FillReplaced)+`
fi`
	if mode == FillAdd {
		rec, replace = added, ""
	}
	fill := "http://" + p.FillAddr
	var b strings.Builder
	fmt.Fprintf(&b, `key=%s
rec=%s
[ "$(cat "$rec" 2>/dev/null)" != "$key" ] || { echo %s; exit 0; }
command -v curl >/dev/null || { echo "this master has no curl, which fills its registry: install curl (the nodes get the bundle from the workstation meanwhile)" >&2; exit 1; }
r=%s
log=%s
if curl -fsS -o /dev/null --max-time 2 "$r/v2/" 2>/dev/null; then
  echo "%s is taken by another process: the registry's writable instance listens there while kforge fills it" >&2; exit 1
fi
%s
mkdir -p %s
%s serve %s >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
i=0
until curl -fsS -o /dev/null --max-time 2 "$r/v2/" 2>/dev/null; do
  kill -0 $pid 2>/dev/null || { echo "the registry's writable instance exited: $(tail -n 3 "$log")" >&2; exit 1; }
  i=$((i+1)); [ $i -le 150 ] || { echo "the registry's writable instance did not answer on $r within 15 s: $(tail -n 3 "$log")" >&2; exit 1; }
  sleep 0.1
done
blob() {
  curl -fsS -o /dev/null -I "$r/v2/%s/blobs/sha256:$1" 2>/dev/null && return 0
  loc=$(curl -fsS -X POST -D - -o /dev/null "$r/v2/%s/blobs/uploads/" | tr -d '\r' | sed -n 's/^[Ll]ocation: *//p') || return 1
  case $loc in /*) loc=$r$loc;; esac
  case $loc in *\?*) loc="$loc&";; *) loc="$loc?";; esac
  curl -fsS -o /dev/null -T "$2" -H 'Content-Type: application/octet-stream' "${loc}digest=sha256:$1" || { echo "upload $2 to the registry: refused (is it the bundle's, sha256 $1?)" >&2; return 1; }
}
`, FillKey(files, images), remote.Quote(rec), FillUpToDate, fill, remote.Quote(p.FillLog), p.FillAddr,
		replace, remote.Quote(p.Dir), remote.Quote(p.Binary), remote.Quote(p.FillConfig),
		hostpath.RegistryFilesRepo, hostpath.RegistryFilesRepo)
	for _, f := range files {
		fmt.Fprintf(&b, "blob %s %s || exit 1\n", f.SHA256, remote.Quote(f.Install))
	}
	for _, im := range images {
		fmt.Fprintf(&b, "%s >/dev/null || { echo \"push image %s to the registry: failed\" >&2; exit 1; }\n",
			remote.Command("ctr", "-n", "k8s.io", "images", "push", "--plain-http", mirrorRef(p.FillAddr, im.Name), im.Name), im.Name)
	}
	fmt.Fprintf(&b, `printf '%%s\n' "$key" > "$rec.tmp" && mv -f "$rec.tmp" "$rec" && echo %s`, Filled)
	return b.String()
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
	var b strings.Builder
	var ms []string
	for _, m := range mirrors {
		ms = append(ms, remote.Quote(strings.TrimSuffix(m, "/")))
	}
	if len(files) > 0 {
		fmt.Fprintf(&b, `if command -v curl >/dev/null; then
fetch() {
  tmp="$3.kforge-fetch"
  mkdir -p "$(dirname "$3")" || return 0
  for m in %s; do
    if curl -fsS --cacert %s --connect-timeout 5 -o "$tmp" "$m/v2/%s/blobs/sha256:$1" 2>/dev/null &&
      printf '%%s  %%s\n' "$1" "$tmp" | sha256sum -c --status 2>/dev/null; then
      chmod "$2" "$tmp" && sync "$tmp" && mv -f "$tmp" "$3" && echo "file $3"
      return 0
    fi
  done
  rm -f "$tmp"
}
`, strings.Join(ms, " "), remote.Quote(ca), hostpath.RegistryFilesRepo)
		for _, f := range files {
			fmt.Fprintf(&b, "fetch %s %s %s\n", f.SHA256, f.Mode, remote.Quote(f.Install))
		}
		b.WriteString("else echo no-curl; fi\n")
	}
	for _, im := range images {
		fmt.Fprintf(&b, "%s >/dev/null 2>&1 && %s >/dev/null && echo %s\n",
			remote.Command("ctr", "-n", "k8s.io", "images", "pull", "--hosts-dir", hostpath.RegistryConfigDir, im.Name),
			remote.Command("ctr", "-n", "k8s.io", "images", "label", im.Name, PinLabel), remote.Quote("image "+im.Name))
	}
	b.WriteString("true")
	return b.String()
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
