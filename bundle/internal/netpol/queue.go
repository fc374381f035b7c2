// Package networkpolicy is kforge's one addition to sigs.k8s.io/kube-network-policies'
// package of the same name: `kforge bundle build` copies this file into the agent's module
// and points the agent's three queue rules at kforgeQueue (bundle/netpol.go). It is compiled and
// tested here as a package of kforge's too.
//
// The agent sends the first packet of every connection that a NetworkPolicy may concern to
// user space with nftables' queue expression, which needs the kernel's nft_queue
// (CONFIG_NFT_QUEUE). A kernel without it may still queue through the xtables NFQUEUE target,
// which nftables runs through nft_compat (CONFIG_NFT_COMPAT and
// CONFIG_NETFILTER_XT_TARGET_NFQUEUE): the same verdict, to the same queue. Where nft_queue
// is missing, the rules use that target; everywhere else they are the agent's own.
package networkpolicy

import (
	"encoding/binary"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
)

// nfqFlagBypass is xt_NFQUEUE's NFQ_FLAG_BYPASS: accept, not drop, when nothing listens on the
// queue (nftables' "queue ... bypass").
const nfqFlagBypass = 0x01

// kforgeQueue is the expression that queues a packet to queue num, with bypass when the agent
// fails open: nftables' queue expression, or where the kernel lacks it the xtables NFQUEUE
// target.
func kforgeQueue(num uint16, bypass bool) expr.Any {
	if !nftQueueMissing() {
		q := &expr.Queue{Num: num}
		if bypass {
			q.Flag = expr.QueueFlagBypass
		}
		return q
	}
	return xtQueue(num, bypass)
}

// xtQueue is the xtables NFQUEUE target, revision 3 (struct xt_NFQ_info_v3: queuenum,
// queues_total, flags, in host byte order, padded to 8 bytes as the kernel aligns it).
func xtQueue(num uint16, bypass bool) *expr.Target {
	info := make([]byte, 8)
	binary.NativeEndian.PutUint16(info[0:], num)
	binary.NativeEndian.PutUint16(info[2:], 1)
	if bypass {
		binary.NativeEndian.PutUint16(info[4:], nfqFlagBypass)
	}
	u := xt.Unknown(info)
	return &expr.Target{Name: "NFQUEUE", Rev: 3, Info: &u}
}

// probeTable is the table the probe makes and removes in one transaction.
const probeTable = "kube-network-policies-probe"

// nftQueueMissing says whether the kernel refuses nftables' queue expression: asked once, by
// adding a rule that queues to a chain of a table made for it, and deleting the table. Any
// other failure (no netlink, no rights) says false, and the agent's own rules then fail with
// the kernel's own error.
var nftQueueMissing = sync.OnceValue(func() bool {
	missing, _ := probeNFTQueue()
	return missing
})

// probeNFTQueue asks the kernel whether it takes the queue expression; err is a failure of
// the probe itself.
func probeNFTQueue() (missing bool, err error) {
	c, err := nftables.New()
	if err != nil {
		return false, err
	}
	t := c.AddTable(&nftables.Table{Name: probeTable, Family: nftables.TableFamilyINet})
	ch := c.AddChain(&nftables.Chain{Name: "probe", Table: t})
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{&expr.Queue{Num: 0, Flag: expr.QueueFlagBypass}}})
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		// The whole batch was refused; the table may not have been made. Ask once more without
		// the rule, to tell a missing expression from a kernel that refuses nftables.
		c2, err2 := nftables.New()
		if err2 != nil {
			return false, err2
		}
		t2 := c2.AddTable(&nftables.Table{Name: probeTable, Family: nftables.TableFamilyINet})
		c2.DelTable(t2)
		if err2 := c2.Flush(); err2 != nil {
			return false, err2
		}
		return true, nil
	}
	return false, nil
}
