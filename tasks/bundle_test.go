package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/preflight"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/remote/remotetest"
)

// writeManifest writes a bundle directory holding only a manifest of the given releases.
func writeManifest(t *testing.T, dir string, versions ...string) {
	t.Helper()
	m := bundle.Manifest{SchemaVersion: bundle.SchemaVersion, Platform: "linux/amd64", Source: "built"}
	for _, v := range versions {
		m.Releases = append(m.Releases, bundle.Versions{Kubernetes: v})
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, bundle.ManifestFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBundleWithoutTheInventorysVersionIsRefused: apply's bundle step fails on a bundle that
// does not hold the inventory's Kubernetes version — before preflight, so before anything
// changes — naming the bundle, the version and the exact command that builds a bundle with
// it; a bundle that holds it (among others) gives that release alone to the later steps.
func TestBundleWithoutTheInventorysVersionIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "offline bundle")
	writeManifest(t, dir, "v1.36.3")
	c := cluster(t, "kubernetesVersion: v1.37.2\nbundle: "+dir+"\n")
	a := NewApply(c, Options{})
	err := a.target.readBundle(context.Background(), nil)
	want := "bundle " + dir + " does not hold Kubernetes v1.37.2 (it holds v1.36.3); build one that does: kforge bundle build --kubernetes v1.36.3,v1.37.2 -o '" + dir + "'"
	if err == nil || err.Error() != want {
		t.Fatalf("readBundle = %v\nwant %s", err, want)
	}
	var me *bundle.MissingReleaseError
	if !errors.As(err, &me) || me.Dir != dir || me.Version != "v1.37.2" {
		t.Errorf("not a *bundle.MissingReleaseError naming the bundle and version: %#v", err)
	}
	if a.target.manifest != nil {
		t.Error("a refused bundle was kept for the later steps")
	}
	names := taskNames(Tasks(a.Steps()))
	if i, j := slices.Index(names, "bundle"), slices.Index(names, "preflight"); i < 0 || i > j {
		t.Errorf("the bundle step must come before preflight: %v", names)
	}

	writeManifest(t, dir, "v1.36.3", "v1.37.2")
	if err := a.target.readBundle(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if got := a.target.manifest.Kubernetes(); len(got) != 1 || got[0] != "v1.37.2" {
		t.Errorf("the later steps get releases %v, want [v1.37.2]", got)
	}

	// The inventory's default version is checked the same way.
	writeManifest(t, dir, "v1.35.4")
	a = NewApply(cluster(t, "bundle: "+dir+"\n"), Options{})
	if err := a.target.readBundle(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "does not hold Kubernetes v1.36.3 (it holds v1.35.4)") ||
		!strings.Contains(err.Error(), "kforge bundle build --kubernetes v1.35.4,v1.36.3 -o") {
		t.Errorf("a bundle without the default version: %v", err)
	}
}

// TestDowngradeRefusedBeforeTheBundle: a cluster at v1.37.2 set back to v1.35.4 with a bundle
// that lacks v1.35.4 is refused as a downgrade, with the way back (a snapshot), not with a
// hint to build a bundle that would then be refused as a downgrade too.
func TestDowngradeRefusedBeforeTheBundle(t *testing.T) {
	dir := t.TempDir()
	writeManifest(t, dir, "v1.37.2")
	c := cluster(t, "kubernetesVersion: v1.35.4\nbundle: "+dir+"\n")
	h := remotetest.New("m1")
	h.OnPrefix("sh -c ", remotetest.Result{Stdout: "kforge-facts 1\nclock=1\nuid=0\nhostname=m1\narch=x86_64\nkernel=6.1.0\ncpus=2\nmeminfo MemTotal: 4000000\ncapeff=000001ffffffffff\nbin kubelet /usr/bin/kubelet\nver kubelet Kubernetes v1.37.2\nkubeletdropin=1\nkforge-facts end\n"})
	a := NewApply(c, Options{Connect: func(context.Context, inventory.Node) (remote.Host, error) { return h, nil }})
	defer a.Close()
	if err := a.rc.fleet.Connect(context.Background(), func(progress.Event) {}); err != nil {
		t.Fatal(err)
	}
	err := a.target.readBundle(context.Background(), nil)
	var failed *preflight.FailedError
	if !errors.As(err, &failed) || len(failed.Findings) != 1 {
		t.Fatalf("readBundle = %v; want the upgrade-route finding alone", err)
	}
	f := failed.Findings[0]
	wantSeen := "the cluster runs v1.37.2; the inventory's v1.35.4 is a downgrade, and a downgrade is not supported (Kubernetes has no downgrade path)"
	wantFix := "set kubernetesVersion back to v1.37.2; to go back to v1.35.4, restore an etcd snapshot taken before the upgrade instead (kforge restore --snapshot FILE, onto hosts set up at v1.35.4; the snapshots are listed in the state dir's snapshots/)"
	if f.Host != "m1" || f.Check != preflight.CheckUpgradeRoute || f.Seen != wantSeen || f.Fix != wantFix {
		t.Errorf("finding %+v\nwant seen %q\nand fix %q", f, wantSeen, wantFix)
	}
	if strings.Contains(err.Error(), "bundle build") {
		t.Errorf("the refusal of a downgrade says to build a bundle: %v", err)
	}
}
