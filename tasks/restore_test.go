package tasks

import (
	"strings"
	"testing"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/state"
)

// TestRestoreRendersTheInventorysControlPlane: a master the inventory no longer lists runs on
// until apply --prune drains it, so apply renders for two masters (leader election, the API
// server's shutdown delay); a restore prunes its lost masters in the same run, so it renders
// for the inventory's one master, as the next apply will: plan right after it shows nothing.
func TestRestoreRendersTheInventorysControlPlane(t *testing.T) {
	c := cluster(t, "")
	o := Options{State: state.At(t.TempDir()), Removed: []inventory.Node{{Host: inventory.Host{Name: "lost", Address: "10.0.0.9"}, Role: inventory.RoleMaster}}}
	manifests := func(steps []Step, files *hostFiles) (apiserver, scheduler string) {
		t.Helper()
		runSteps(t, steps, "pki", "render")
		for _, f := range files.get("m1", nil) {
			switch f.Path {
			case hostpath.ManifestsDir + "/kube-apiserver.yaml":
				apiserver = string(f.Data)
			case hostpath.ManifestsDir + "/kube-scheduler.yaml":
				scheduler = string(f.Data)
			}
		}
		return apiserver, scheduler
	}
	a := NewApply(c, o)
	api, sched := manifests(a.Steps(), a.target.files)
	if !strings.Contains(api, "--shutdown-delay-duration=5s") || !strings.Contains(sched, "--leader-elect=true") {
		t.Errorf("apply with a retiring master: want two masters' flags (shutdown delay, leader election)")
	}
	x := NewRestore(c, o, RestoreOptions{Snapshot: "x.db"})
	api, sched = manifests(x.Steps(), x.target.files)
	if strings.Contains(api, "--shutdown-delay-duration") || !strings.Contains(sched, "--leader-elect=false") {
		t.Errorf("restore with a lost master: want the inventory's single master's flags (no shutdown delay, no leader election)")
	}
}
