package e2e

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/crypto/bcrypt"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/pki"
)

// labRegistry is a real private registry for the lab's hosts: CNCF distribution's `registry`
// (built from Go modules), listening on this machine's lab bridge address with TLS from its own
// test CA and htpasswd basic auth. It refuses anonymous pulls, and no node trusts its CA unless
// told, so a pod whose image only it holds runs only through a mirror configured with the CA
// and the credentials.
type labRegistry struct {
	addr     string // host:port on the lab bridge
	caFile   string // PEM of the CA that signed its serving certificate
	user     string
	password string
	client   *http.Client // trusts caFile
	proc     *testenv.Process
}

// startRegistry runs the registry for the rest of the test. The lab (and so its bridge) must be
// up.
func startRegistry(t *testing.T) *labRegistry {
	t.Helper()
	bin, err := bundle.RegistryBinaries(context.Background(), bundle.BuildOptions{})
	if err != nil {
		t.Fatalf("build the registry: %v", err)
	}
	dir := t.TempDir()
	now := time.Now()
	ca, err := pki.Issue(pki.Request{Spec: pki.Spec{Name: "registry-ca"}, Subject: pkix.Name{CommonName: "kforge e2e registry CA"}},
		nil, pki.DefaultKeyAlgorithm, now, 24*time.Hour, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := pki.Issue(pki.Request{
		Spec:    pki.Spec{Name: "registry", SignedBy: "registry-ca", ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
		Subject: pkix.Name{CommonName: lab.BridgeAddr}, IPs: []net.IP{net.ParseIP(lab.BridgeAddr)},
	}, ca, pki.DefaultKeyAlgorithm, now, 24*time.Hour, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caFile, _ := testenv.WritePair(t, dir, "ca", ca)
	crt, key := testenv.WritePair(t, dir, "registry", serving)

	r := &labRegistry{addr: net.JoinHostPort(lab.BridgeAddr, strconv.Itoa(testenv.FreePort(t))), caFile: caFile,
		user: "e2e", password: randomHex(t, 16)}
	hash, err := bcrypt.GenerateFromPassword([]byte(r.password), bcrypt.DefaultCost)
	if err != nil {
		t.Fatal(err)
	}
	htpasswd := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(htpasswd, []byte(r.user+":"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(config, fmt.Appendf(nil, `version: 0.1
log: {level: info, formatter: text}
storage:
  filesystem: {rootdirectory: %s}
http:
  addr: %s
  secret: %s
  tls: {certificate: %s, key: %s}
auth:
  htpasswd: {realm: kforge-e2e, path: %s}
`, filepath.Join(dir, "data"), r.addr, randomHex(t, 16), crt, key, htpasswd), 0o600); err != nil {
		t.Fatal(err)
	}
	p := testenv.Start(t, filepath.Join(bin, "registry"), "serve", config)
	r.proc = p

	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	r.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	// Up when /v2/ answers; without credentials it must say 401.
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := r.client.Get("https://" + r.addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("registry: GET /v2/ without credentials answered %s, want 401 Unauthorized", resp.Status)
			}
			return r
		}
		select {
		case <-p.Done:
			t.Fatalf("registry exited: %s", p.Output(4000))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("registry did not answer at %s: %v\n%s", r.addr, err, p.Output(4000))
		}
	}
}

// push copies an image archive into the registry as repo:tag.
func (r *labRegistry) push(t *testing.T, archive, repoTag string) {
	r.pushFrom(t, archive, "", repoTag)
}

// pushFrom copies the image src of an archive of several (the only one when src is empty) into
// the registry as repo:tag.
func (r *labRegistry) pushFrom(t *testing.T, archive, src, repoTag string) {
	t.Helper()
	var tag *name.Tag
	if src != "" {
		st, err := name.NewTag(src)
		if err != nil {
			t.Fatal(err)
		}
		tag = &st
	}
	img, err := tarball.ImageFromPath(archive, tag)
	if err != nil {
		t.Fatalf("%s in %s: %v", src, archive, err)
	}
	ref, err := name.ParseReference(r.addr + "/" + repoTag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: r.user, Password: r.password}),
		remote.WithTransport(r.client.Transport)); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
}

// pulledThroughMirror reports whether the registry's access log shows host (an address) fetching
// repoTag's manifest as the registry's user, with containerd's ?ns= naming upstream: a pull
// through a mirror of upstream, authenticated.
func (r *labRegistry) pulledThroughMirror(host, repoTag, upstream string) bool {
	repo, tag, _ := strings.Cut(repoTag, ":")
	uri := "/v2/" + repo + "/manifests/" + tag + "?ns=" + upstream
	user := regexp.MustCompile(`auth\.user\.name="?` + regexp.QuoteMeta(r.user) + `"?( |$)`)
	for _, line := range strings.Split(r.proc.Output(1<<20), "\n") {
		if strings.Contains(line, uri) && strings.Contains(line, host+":") && user.MatchString(line) {
			return true
		}
	}
	return false
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
