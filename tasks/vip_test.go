package tasks

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/remote/remotetest"
)

// fakeMasters is an eachFunc over fake masters whose kforge-vip state files state says, at
// each read.
func fakeMasters(state func(node string, read int) string) eachFunc {
	var reads atomic.Int32
	return func(ctx context.Context, role inventory.Role, fn func(ctx context.Context, n inventory.Node, h remote.Host) error) error {
		read := int(reads.Add(1))
		for _, name := range []string{"m1", "m2", "m3"} {
			h := remotetest.New(name)
			h.On("cat "+hostpath.VIPState+" 2>/dev/null || true", remotetest.Result{Stdout: state(name, read)})
			if err := fn(ctx, inventory.Node{Host: inventory.Host{Name: name}, Role: inventory.RoleMaster}, h); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestWaitVIPHeld: the wait ends when exactly one master says it holds the VIP, and fails
// after its time saying what each master said when none, or two, do.
func TestWaitVIPHeld(t *testing.T) {
	const vip = "198.51.100.50"
	leading := func(on string, from int) func(string, int) string {
		return func(node string, read int) string {
			switch {
			case read < from:
				return ""
			case node == on:
				return `{"address": "` + vip + `", "interface": "eth0", "holder": "` + on + `", "leading": true}`
			}
			return `{"address": "` + vip + `", "interface": "eth0", "holder": "` + on + `", "leading": false}`
		}
	}
	s, err := waitVIPHeld(context.Background(), fakeMasters(leading("m2", 2)), vip, 10*time.Second)
	if err != nil || s.Node != "m2" || s.Interface != "eth0" {
		t.Errorf("one holder from the second read: %+v, %v; want m2 on eth0", s, err)
	}

	_, err = waitVIPHeld(context.Background(), fakeMasters(func(string, int) string { return "" }), vip, 0)
	if err == nil || !strings.Contains(err.Error(), "0 masters hold the virtual IP 198.51.100.50 (m1: no state yet; m2: no state yet; m3: no state yet)") || !strings.Contains(err.Error(), "journalctl -u kforge-vip") {
		t.Errorf("no holder: %v", err)
	}

	two := func(node string, read int) string {
		if node == "m3" {
			return leading("m3", 0)(node, read)
		}
		return leading("m1", 0)(node, read)
	}
	_, err = waitVIPHeld(context.Background(), fakeMasters(two), vip, 0)
	if err == nil || !strings.Contains(err.Error(), "2 masters hold the virtual IP") || !strings.Contains(err.Error(), `m2: stands by (Lease holder "m1")`) {
		t.Errorf("two holders: %v", err)
	}
}
