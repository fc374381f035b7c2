package bundle

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// NetworkPolicyModule is SIG Network's NetworkPolicy agent, which kforge runs on every node
// (docs/networking.md says why this one).
const NetworkPolicyModule = "sigs.k8s.io/kube-network-policies"

// NetworkPolicyBinary is the agent's binary in its image.
const NetworkPolicyBinary = "/bin/netpol"

//go:embed internal/netpol/queue.go
var netpolQueue []byte

// netpolQueueRule is the agent's construction of its queue expression (twice in
// pkg/networkpolicy/controller.go), and netpolQueueCall what kforge's copy has instead: the
// expression from internal/netpol's kforgeQueue, which takes the xtables NFQUEUE target on a
// kernel without nft_queue.
const (
	netpolQueueRule = "\tqueue := &expr.Queue{Num: uint16(c.config.QueueID)}\n\tif c.config.FailOpen {\n\t\tqueue.Flag = expr.QueueFlagBypass\n\t}\n"
	netpolQueueCall = "\tqueue := kforgeQueue(uint16(c.config.QueueID), c.config.FailOpen)\n"
)

// patchNetpolController points controller.go's queue rules at kforgeQueue; it fails when the
// source no longer has them twice (another release of the agent: look again).
func patchNetpolController(src []byte) ([]byte, error) {
	if n := bytes.Count(src, []byte(netpolQueueRule)); n != 2 {
		return nil, fmt.Errorf("controller.go constructs its queue expression %d times as kforge's patch expects it, want 2", n)
	}
	return bytes.ReplaceAll(src, []byte(netpolQueueRule), []byte(netpolQueueCall)), nil
}

// netpolModule builds the agent (its cmd package, as netpol) from a copy of its module with
// internal/netpol's queue.go added to pkg/networkpolicy and controller.go patched to use it.
// The copy's directory carries the patch's hash, so a changed patch is a new recipe.
func netpolModule(v string) goModule {
	sum := sha256.Sum256(append(append([]byte(netpolQueueRule), netpolQueueCall...), netpolQueue...))
	local := "./kube-network-policies-" + hex.EncodeToString(sum[:6])
	return goModule{
		Name:     "kube-network-policies",
		Version:  v,
		Require:  map[string]string{NetworkPolicyModule: v},
		Replace:  map[string]string{NetworkPolicyModule: local},
		Packages: []string{NetworkPolicyModule + "/cmd"},
		Output:   map[string]string{NetworkPolicyModule + "/cmd": "netpol"},
		Prepare: func(ctx context.Context, r *goRunner, dir string) error {
			info, err := r.download(ctx, dir, NetworkPolicyModule+"@"+v)
			if err != nil {
				return err
			}
			dst := filepath.Join(dir, filepath.FromSlash(local))
			if err := copyTree(info.Dir, dst); err != nil {
				return err
			}
			ctl := filepath.Join(dst, "pkg", "networkpolicy", "controller.go")
			src, err := os.ReadFile(ctl)
			if err != nil {
				return err
			}
			patched, err := patchNetpolController(src)
			if err != nil {
				return fmt.Errorf("kube-network-policies %s: %w", v, err)
			}
			if err := os.WriteFile(ctl, patched, 0o644); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dst, "pkg", "networkpolicy", "kforge_queue.go"), netpolQueue, 0o644)
		},
	}
}

// copyTree copies the regular files under src (a module in the read-only module cache) to
// dst, writable.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
}
