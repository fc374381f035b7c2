package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kforge/kforge/hostpath"
)

func TestServed(t *testing.T) {
	m := &Manifest{
		Files: []File{
			{Name: "kubelet"}, {Name: "kubeadm"}, {Name: RegistryFile}, {Name: "containerd"}, {Name: APIProxyFile}, {Name: VIPFile}, {Name: EtcdSnapshotFile},
		},
		Images: []Image{
			{Component: "kube-apiserver", Name: "registry.k8s.io/kube-apiserver:v1", ControlPlaneOnly: true},
			{Component: "kube-proxy", Name: "registry.k8s.io/kube-proxy:v1"},
			{Component: "local-path-helper", Name: "kforge.dev/local-path-helper:v0.0.30"},
		},
	}
	names := func(files []File, images []Image) string {
		var out []string
		for _, f := range files {
			out = append(out, f.Name)
		}
		for _, im := range images {
			out = append(out, im.Component)
		}
		return strings.Join(out, " ")
	}
	// A master's need still serves only what the other nodes need.
	for _, need := range []Need{{Runtime: true}, {Runtime: true, ControlPlane: true, VIP: true, EtcdSnapshots: true}} {
		if got := names(Served(m, need)); got != "kubelet containerd kube-proxy" {
			t.Errorf("%+v: served %q", need, got)
		}
	}
	if got := names(Served(m, Need{APIProxy: true})); got != "kubelet "+APIProxyFile+" kube-proxy" {
		t.Errorf("without the runtime, with the API proxy: served %q", got)
	}
	// The local volumes' images, only for a cluster that serves them: a node's containerd has
	// no hosts.toml for their registries otherwise, and would pull them from there.
	if got := names(Served(m, Need{LocalVolumes: true})); got != "kubelet kube-proxy local-path-helper" {
		t.Errorf("with local volumes: served %q", got)
	}
	files, images := Served(m, Need{Runtime: true})
	other := slices.Clone(images)
	other[0].Digest = "sha256:other"
	if FillKey(files, images) == FillKey(files, other) || FillKey(files, images) != FillKey(slices.Clone(files), slices.Clone(images)) {
		t.Error("FillKey does not follow the images' digests")
	}
}

// TestFetchCommandInAShell runs FetchCommand's script with the real curl and sha256sum against
// two TLS mirrors: the first has one file with the wrong content and not the others, the second
// has all but one. Each file lands from the mirror that has it right, with its mode; the one no
// mirror has is left for the upload, and nothing half-written stays behind.
func TestFetchCommandInAShell(t *testing.T) {
	for _, tool := range []string{"curl", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip(tool + " not installed")
		}
	}
	blob := func(s string) (string, []byte) {
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:]), []byte(s)
	}
	aSum, aData := blob("kubelet's bytes")
	bSum, bData := blob("containerd's bytes")
	cSum, _ := blob("nobody has these")
	serve := func(blobs map[string][]byte) *httptest.Server {
		return httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			prefix := "/v2/" + hostpath.RegistryFilesRepo + "/blobs/sha256:"
			data, ok := blobs[strings.TrimPrefix(r.URL.Path, prefix)]
			if !strings.HasPrefix(r.URL.Path, prefix) || !ok {
				http.NotFound(w, r)
				return
			}
			w.Write(data)
		}))
	}
	bad := serve(map[string][]byte{aSum: []byte("tampered")})
	defer bad.Close()
	good := serve(map[string][]byte{aSum: aData, bSum: bData})
	defer good.Close()

	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	var pemCerts []byte
	for _, s := range []*httptest.Server{bad, good} {
		pemCerts = append(pemCerts, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})...)
	}
	if err := os.WriteFile(ca, pemCerts, 0o644); err != nil {
		t.Fatal(err)
	}
	files := []File{
		{Name: "a", SHA256: aSum, Mode: "0755", Install: filepath.Join(dir, "usr/bin/a")},
		{Name: "b", SHA256: bSum, Mode: "0640", Install: filepath.Join(dir, "it's/b")},
		{Name: "c", SHA256: cSum, Mode: "0755", Install: filepath.Join(dir, "usr/bin/c")},
	}
	out, err := exec.Command("sh", "-c", FetchCommand(files, nil, []string{bad.URL, good.URL + "/"}, ca)).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := parseFetched(string(out), files, nil)
	if len(got.Files) != 2 || got.Files[0].Name != "a" || got.Files[1].Name != "b" || got.NoCurl {
		t.Fatalf("fetched %+v; output:\n%s", got, out)
	}
	for _, f := range files[:2] {
		data, err := os.ReadFile(f.Install)
		sum := sha256.Sum256(data)
		if err != nil || hex.EncodeToString(sum[:]) != f.SHA256 {
			t.Errorf("%s: %v, content %q", f.Install, err, data)
		}
		if st, err := os.Stat(f.Install); err != nil || st.Mode().Perm().String() != map[string]string{"0755": "-rwxr-xr-x", "0640": "-rw-r-----"}[f.Mode] {
			t.Errorf("%s: mode %v, want %s", f.Install, st.Mode(), f.Mode)
		}
	}
	if _, err := os.Stat(files[2].Install); !os.IsNotExist(err) {
		t.Errorf("%s exists, though no mirror has it", files[2].Install)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*/*/*.kforge-fetch")); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
