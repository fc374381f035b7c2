package scripts

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// curlArgs is sh that sets $url (the last argument) and $out (-o's) from curl's arguments.
const curlArgs = `out=; url=; prev=
for a; do [ "$prev" = -o ] && out=$a; prev=$a; url=$a; done
`

// TestRegistryFill: with a stand-in registry (it answers once started) and curl and ctr that
// play the distribution API, a fill uploads each file as a blob, pushes each image, records its
// key and says so; the same fill again does nothing; a replacing fill of other content empties
// the storage first; a fill without its registry answering fails naming its log.
func TestRegistryFill(t *testing.T) {
	s := newSandbox(t)
	s.stub("registry", `touch `+s.file("started")+`; exec sleep 60`)
	s.stub("curl", curlArgs+`case "$*" in
*" -I "*) exit 22;;
*"-X POST"*) printf 'HTTP/1.1 202 Accepted\r\nLocation: /v2/kforge/files/blobs/uploads/u1?_state=x\r\n\r\n';;
*/v2/) [ -f `+s.file("started")+` ] || exit 7;;
esac`)
	s.stub("ctr", "")
	kubelet := s.write("usr/bin/it's kubelet", "kubelet")
	dir := s.file("registry")
	fill := func(key, replace string) []string {
		return []string{"key", key, "rec", dir + "/kforge-filled", "replace", replace, "added", dir + "/kforge-filled-added",
			"dir", dir, "binary", s.file("bin/registry"), "fill_config", s.file("fill.yml"), "fill_addr", "127.0.0.1:5001", "log", s.file("fill.log"),
			"repo", "kforge/files", "files", Lines([]string{"abc123 " + kubelet}), "images", Lines([]string{"registry.k8s.io/pause:3.10"}),
			"filled", "filled", "up_to_date", "up to date", "replaced", "replaced the earlier fill"}
	}
	if out := s.mustRun(Command("registry-fill", fill("k1", "1")...), ""); out != "filled\n" {
		t.Errorf("fill: %q", out)
	}
	for _, c := range []string{
		"curl -fsS -o /dev/null -T " + kubelet + " -H Content-Type: application/octet-stream http://127.0.0.1:5001/v2/kforge/files/blobs/uploads/u1?_state=x&digest=sha256:abc123",
		"ctr -n k8s.io images push --plain-http 127.0.0.1:5001/registry.k8s.io/pause:3.10 registry.k8s.io/pause:3.10",
	} {
		if !strings.Contains(s.calls(), c+"\n") {
			t.Errorf("did not run %q; ran\n%s", c, s.calls())
		}
	}
	if rec, _ := os.ReadFile(dir + "/kforge-filled"); string(rec) != "k1\n" {
		t.Errorf("record %q", rec)
	}
	if out := s.mustRun(Command("registry-fill", fill("k1", "1")...), ""); out != "up to date\n" {
		t.Errorf("again: %q", out)
	}
	s.write("registry/docker/registry/v2/blobs/old", "")
	os.Remove(s.file("started")) // the last fill stopped its registry
	if out := s.mustRun(Command("registry-fill", fill("k2", "1")...), ""); out != "replaced the earlier fill\nfilled\n" {
		t.Errorf("another fill: %q", out)
	}
	if _, err := os.Stat(dir + "/docker/registry/v2/blobs/old"); err == nil {
		t.Error("the earlier fill's storage is still there")
	}

	os.Remove(s.file("started"))
	s.stub("registry", "echo 'listen tcp: address in use'; exit 1")
	if _, stderr, err := s.run(Command("registry-fill", fill("k3", "")...), ""); err == nil || !strings.Contains(stderr, "exited: listen tcp: address in use") {
		t.Errorf("a registry that exits: %v %q", err, stderr)
	}
}

// TestRegistryFetch: each file comes from the first mirror that has it right, with its mode; a
// file no mirror has is left; each image pulled is pinned; a node without curl says so.
func TestRegistryFetch(t *testing.T) {
	s := newSandbox(t)
	good, bad := sha256.Sum256([]byte("kubelet")), sha256.Sum256([]byte("nobody has it"))
	// Mirror m1 serves tampered bytes for everything; m2 serves kubelet's.
	s.stub("curl", curlArgs+fmt.Sprintf(`case "$url" in
https://m1*) echo tampered >"$out";;
https://m2*/sha256:%x) printf kubelet >"$out";;
*) exit 22;;
esac`, good))
	s.stub("ctr", `[ "$4" = pull ] && [ "$7" != registry.k8s.io/pause:3.10 ] && exit 1; true`)
	kubelet, other := s.file("usr/bin/kubelet"), s.file("usr/bin/other")
	cmd := Command("registry-fetch", "mirrors", "https://m1:5000 https://m2:5000", "ca", s.file("ca.crt"), "repo", "kforge/files",
		"files", Lines([]string{fmt.Sprintf("%x 0750 %s", good, kubelet), fmt.Sprintf("%x 0755 %s", bad, other)}),
		"images", Lines([]string{"registry.k8s.io/pause:3.10", "registry.k8s.io/coredns:v1"}), "hosts_dir", "/etc/containerd/certs.d", "pin_label", "io.cri-containerd.pinned=pinned")
	if out, want := s.mustRun(cmd, ""), "file "+kubelet+"\nimage registry.k8s.io/pause:3.10\n"; out != want {
		t.Errorf("got %q, want %q", out, want)
	}
	if fi, err := os.Stat(kubelet); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("kubelet: %v %v", fi, err)
	}
	if left, _ := os.ReadDir(s.file("usr/bin")); len(left) != 1 {
		t.Errorf("usr/bin holds %v, want only kubelet", left)
	}
	if !strings.Contains(s.calls(), "ctr -n k8s.io images label registry.k8s.io/pause:3.10 io.cri-containerd.pinned=pinned\n") {
		t.Errorf("pause not pinned; ran\n%s", s.calls())
	}

	none := newSandbox(t)
	none.path = "" // no curl
	if out := none.mustRun(Command("registry-fetch", "mirrors", "https://m1:5000", "ca", "", "repo", "kforge/files",
		"files", fmt.Sprintf("%x 0750 %s", good, kubelet), "images", "", "hosts_dir", "/etc/containerd/certs.d", "pin_label", "p"), ""); out != "no-curl\n" {
		t.Errorf("without curl: %q", out)
	}
}

// TestBundleRecordAndState: recorded files are reported with their recorded sum, unread; a file
// changed since is hashed; recording again replaces a file's line; the image list follows the
// marker, or no runtime when no image is asked about or there is no ctr.
func TestBundleRecordAndState(t *testing.T) {
	s := newSandbox(t)
	kubelet, kubectl := s.write("bin/it's kubelet", "kubelet"), s.write("bin/kubectl", "kubectl")
	record := s.file("state/bundle-files")
	fakeA, fakeB := strings.Repeat("a", 64), strings.Repeat("b", 64)
	rec := func(lines ...string) {
		s.mustRun(Command("bundle-record", "record", record, "files", Lines(lines), "stat_format", "%s %.9Y %i"), "")
	}
	rec(fakeA+" "+kubelet, fakeB+" "+kubectl)
	rec(fakeA + " " + kubelet) // again: replaced, not added
	if data, _ := os.ReadFile(record); strings.Count(string(data), "\n") != 2 {
		t.Fatalf("record after recording kubelet twice:\n%s", data)
	}
	s.stub("ctr", "echo 'REF TYPE DIGEST SIZE PLATFORMS LABELS'")
	state := func(images string) string {
		return s.mustRun(Command("bundle-state", "paths", Lines([]string{kubelet, kubectl, s.file("missing")}), "record", record,
			"stat_format", "%s %.9Y %i", "images_marker", "#kforge-images", "no_runtime", "#kforge-no-runtime", "list_images", images), "")
	}
	arch, _ := exec.Command("uname", "-m").Output()
	if out, want := state("1"), "arch="+string(arch)+"="+fakeA+"  "+kubelet+"\n="+fakeB+"  "+kubectl+"\n#kforge-images\nREF TYPE DIGEST SIZE PLATFORMS LABELS\n"; out != want {
		t.Errorf("as installed:\n%s\nwant\n%s", out, want)
	}
	if err := os.Remove(kubectl); err != nil {
		t.Fatal(err)
	}
	s.write("bin/kubectl", "kubectl 2")
	sum := sha256.Sum256([]byte("kubectl 2"))
	if out, want := state(""), fmt.Sprintf("arch=%s=%s  %s\n%x  %s\n#kforge-images\n#kforge-no-runtime\n", arch, fakeA, kubelet, sum, kubectl); out != want {
		t.Errorf("kubectl replaced, no image asked:\n%s\nwant\n%s", out, want)
	}
}
