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

// netpolDNSQueue is the queue rule of the agent's DNS agent (dnsagent.go, which AdminNetworkPolicy
// turns on), and netpolDNSQueueCall kforge's: the same through kforgeQueue. Without it, on a
// kernel without nft_queue its rule fails, it closes its queue, and its reader spins on "bad file
// descriptor", taking the CPU the agent's verdicts need (measured: new connections stalled).
const (
	netpolDNSQueue     = "\t\t\t&expr.Queue{Num: uint16(n.nfQueueID), Flag: expr.QueueFlagBypass},\n"
	netpolDNSQueueCall = "\t\t\tkforgeQueue(uint16(n.nfQueueID), true),\n"
)

// netpolSignals is how the agent's main.go stops (on SIGINT only), and netpolSignalsTerm what
// kforge's copy has instead: SIGTERM too, which is how kubelet stops a pod. On either the agent
// deletes its nftables table before it exits; killed by a signal it does not catch, it leaves its
// queue rules behind with nothing reading the queue, and the kernel drops every new connection
// to a pod a policy selects (the queue has no bypass), for good: after the agent is turned off,
// and until a restarted agent rewrites the table.
const (
	netpolSignals     = "\tctx, cancel := signal.NotifyContext(\n\t\tcontext.Background(), os.Interrupt, unix.SIGINT)\n"
	netpolSignalsTerm = "\tctx, cancel := signal.NotifyContext(\n\t\tcontext.Background(), os.Interrupt, unix.SIGINT, unix.SIGTERM)\n"
)

// patchNetpolController points controller.go's queue rules at kforgeQueue; it fails when the
// source no longer has them twice (another release of the agent: look again).
func patchNetpolController(src []byte) ([]byte, error) {
	return replaceExactly(src, "controller.go", netpolQueueRule, netpolQueueCall, 2)
}

// patchNetpolDNS points dnsagent.go's queue rule at kforgeQueue.
func patchNetpolDNS(src []byte) ([]byte, error) {
	return replaceExactly(src, "dnsagent.go", netpolDNSQueue, netpolDNSQueueCall, 1)
}

// patchNetpolMain makes the agent's main.go stop on SIGTERM too.
func patchNetpolMain(src []byte) ([]byte, error) {
	return replaceExactly(src, "cmd/main.go", netpolSignals, netpolSignalsTerm, 1)
}

// replaceExactly replaces old with new in src, which must hold old exactly n times (else the
// patch no longer fits that source: another release of the agent, look again).
func replaceExactly(src []byte, file, old, new string, n int) ([]byte, error) {
	if got := bytes.Count(src, []byte(old)); got != n {
		return nil, fmt.Errorf("%s holds the text kforge's patch replaces %d times, want %d", file, got, n)
	}
	return bytes.ReplaceAll(src, []byte(old), []byte(new)), nil
}

// netpolModule builds the agent (its cmd package, as netpol) from a copy of its module with
// internal/netpol's queue.go added to pkg/networkpolicy, controller.go and dnsagent.go patched
// to use it, and main.go patched to stop on SIGTERM. The copy's directory carries the patches'
// hash, so a changed patch is a new recipe.
func netpolModule(v string) goModule {
	sum := sha256.Sum256([]byte(netpolQueueRule + netpolQueueCall + netpolDNSQueue + netpolDNSQueueCall + netpolSignals + netpolSignalsTerm + string(netpolQueue)))
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
			for _, p := range []struct {
				file  string
				patch func([]byte) ([]byte, error)
			}{{"pkg/networkpolicy/controller.go", patchNetpolController}, {"pkg/networkpolicy/dnsagent.go", patchNetpolDNS}, {"cmd/main.go", patchNetpolMain}} {
				f := filepath.Join(dst, filepath.FromSlash(p.file))
				src, err := os.ReadFile(f)
				if err != nil {
					return err
				}
				patched, err := p.patch(src)
				if err != nil {
					return fmt.Errorf("kube-network-policies %s: %w", v, err)
				}
				if err := os.WriteFile(f, patched, 0o644); err != nil {
					return err
				}
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
