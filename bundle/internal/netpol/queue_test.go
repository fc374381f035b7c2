package networkpolicy

import (
	"encoding/binary"
	"os"
	"runtime"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"golang.org/x/sys/unix"
)

// TestXTQueueInfo: the target's info is struct xt_NFQ_info_v3 as the kernel reads it.
func TestXTQueueInfo(t *testing.T) {
	for _, c := range []struct {
		num    uint16
		bypass bool
		flags  uint16
	}{{100, true, 1}, {98, false, 0}} {
		tg := xtQueue(c.num, c.bypass)
		info := []byte(*tg.Info.(*xt.Unknown))
		if tg.Name != "NFQUEUE" || tg.Rev != 3 || len(info) != 8 {
			t.Fatalf("target %s rev %d, info %d bytes; want NFQUEUE rev 3, 8 bytes", tg.Name, tg.Rev, len(info))
		}
		if n, total, f := binary.NativeEndian.Uint16(info), binary.NativeEndian.Uint16(info[2:]), binary.NativeEndian.Uint16(info[4:]); n != c.num || total != 1 || f != c.flags {
			t.Errorf("xtQueue(%d, %v): queue %d, total %d, flags %d; want %d, 1, %d", c.num, c.bypass, n, total, f, c.num, c.flags)
		}
	}
}

// TestQueueOnThisKernel, in a network namespace of its own: the probe answers, the kernel takes
// kforgeQueue's expression in a forward chain, and it is what the probe said: nftables' queue
// where the kernel has nft_queue, else the NFQUEUE target (this machine's kernel lacks
// nft_queue; Debian's, Ubuntu's and RHEL's have it).
func TestQueueOnThisKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread, in its own netns, ends with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		missing, err := probeNFTQueue()
		if err != nil {
			t.Errorf("probe: %v", err)
			return
		}
		t.Logf("nft_queue missing: %v", missing)
		c, err := nftables.New()
		if err != nil {
			t.Error(err)
			return
		}
		tb := c.AddTable(&nftables.Table{Name: "kforge-test", Family: nftables.TableFamilyINet})
		ch := c.AddChain(&nftables.Chain{Name: "fwd", Table: tb, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter})
		c.AddRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: []expr.Any{kforgeQueue(100, true)}})
		if err := c.Flush(); err != nil {
			t.Errorf("a forward chain with kforgeQueue's rule (nft_queue missing: %v): %v", missing, err)
			return
		}
		rules, err := c.GetRules(tb, ch)
		if err != nil || len(rules) != 1 || len(rules[0].Exprs) != 1 {
			t.Errorf("rules read back: %v %v", rules, err)
			return
		}
		switch e := rules[0].Exprs[0].(type) {
		case *expr.Queue:
			if missing || e.Num != 100 || e.Flag != expr.QueueFlagBypass {
				t.Errorf("queue expression %+v, probe said missing %v", e, missing)
			}
		case *expr.Target:
			if !missing || e.Name != "NFQUEUE" || e.Rev != 3 {
				t.Errorf("target %s rev %d, probe said missing %v", e.Name, e.Rev, missing)
			}
		default:
			t.Errorf("rule's expression is %T", e)
		}
		if tables, err := c.ListTables(); err != nil || len(tables) != 1 {
			t.Errorf("tables after the probe: %d %v; want only the test's (the probe removes its own)", len(tables), err)
		}
	}()
	<-done
}
