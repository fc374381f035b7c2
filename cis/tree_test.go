package cis_test

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/kforge/kforge/cis"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/templates"
)

// TestKforgeTreeFailsOnlyWhatIsDocumented scores the files kforge renders for a master and a
// worker, as FromTree sees them once kubelet runs them (etcd's keys and data dir as apply
// leaves them: the etcd user's), and finds failed exactly the checks docs/security.md lists
// (1.1.19, 1.2.11) on the master and none on the worker (with the kubeconfig its kubelet writes
// at TLS bootstrap). It runs as root: the files' owners are
// read from disk.
func TestKforgeTreeFailsOnlyWhatIsDocumented(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("owners are root's only when run as root")
	}
	c, err := inventory.Parse("kforge.yaml", []byte(`apiVersion: kforge.dev/v1alpha1
kind: Cluster
name: lab
masters: [{name: m1, address: 198.51.100.11}]
workers: [{name: w1, address: 198.51.100.21}]
`), os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	set, _, err := pki.EnsureCluster(c, "", t.TempDir(), time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	trees, err := templates.Tree(c, set, templates.Options{BootstrapToken: "abcdef.0123456789abcdef",
		EtcdUser: map[string]templates.Owner{"m1": {UID: 998, GID: 997}}, Hostname: map[string]string{"m1": "m1", "w1": "w1"}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"m1": {"1.1.19", "1.2.11"}, "w1": nil}
	for _, tr := range trees {
		root := t.TempDir()
		extra := map[string]cis.File{"/etc/cni/net.d/10-kforge.conflist": {Mode: 0o600, Owner: "root:root"}}
		for _, f := range tr.Files {
			p := filepath.Join(root, f.Path)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, f.Data, f.Mode); err != nil {
				t.Fatal(err)
			}
			if f.UID != 0 {
				extra[f.Path] = cis.File{Mode: uint32(f.Mode.Perm()), Owner: "etcd:etcd"}
			}
		}
		if tr.Node.Role == inventory.RoleMaster {
			extra["/var/lib/etcd"] = cis.File{Mode: 0o700, Owner: "etcd:etcd"}
		} else { // written by kubelet at its TLS bootstrap (client-go's 0600)
			extra["/etc/kubernetes/kubelet.conf"] = cis.File{Mode: 0o600, Owner: "root:root"}
		}
		h, err := cis.FromTree(tr.Node.Name, map[string]string{"/etc": filepath.Join(root, "etc"), "/var": filepath.Join(root, "var")}, extra)
		if err != nil {
			t.Fatal(err)
		}
		var failed []string
		n := 0
		for _, r := range cis.Run(h) {
			n++
			if !r.Pass {
				failed = append(failed, r.ID)
				t.Logf("%s: %s failed: %s: %s", tr.Node.Name, r.ID, r.Text, r.Got)
			}
		}
		sort.Strings(failed)
		if !slices.Equal(failed, want[tr.Node.Name]) {
			t.Errorf("%s: failed %v, want %v (of %d checks)", tr.Node.Name, failed, want[tr.Node.Name], n)
		}
	}
}
