package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// PodCIDRsInput says whose pod CIDRs PodCIDRs waits for, and whether it hands them out.
type PodCIDRsInput struct {
	Nodes   []string
	Timeout time.Duration
	// Subnets and MaskSizes, when Subnets is set, make PodCIDRs give each node of Nodes that
	// registered without a pod CIDR one itself from each subnet (see PodCIDRs); otherwise it only
	// waits for kube-controller-manager's node IPAM. A dual-stack cluster has an IPv4 and an IPv6
	// subnet, and each node a range of both.
	Subnets   []string
	MaskSizes []int // in Subnets' order; 0: 24 for IPv4, 64 for IPv6 (kube-controller-manager's defaults)
	// Have, when set, is called once per node, as soon as it has its pod CIDRs.
	Have func(node string, cidrs []string)
	// Interval between looks at the nodes (default 100 ms).
	Interval time.Duration
}

// PodCIDRs waits until every node of in.Nodes is registered and has its pod CIDRs (one per
// family), and returns them by node name. On timeout the error names the nodes still without.
//
// With in.Subnets set, a node that registered without a pod CIDR gets one of each subnet right
// away: the highest range of the subnet's upper half that no node uses. kube-controller-manager's node
// IPAM (the range allocator) hands out ranges from the bottom of the subnet, marks the ranges
// nodes already carry as used when it starts and when it sees them, and does not change a
// node's pod CIDR once set, so the two never hand out the same range unless the upper half
// fills up; kforge then leaves the node to the controller-manager. On a fresh cluster this
// saves the seconds the controller-manager takes to start its controllers before a node can be
// Ready (its CNI config needs the pod CIDR). Ranges given by kforge are returned in the Changes.
func PodCIDRs(ctx context.Context, c kubernetes.Interface, in PodCIDRsInput) (map[string][]string, []Change, error) {
	if in.Interval <= 0 {
		in.Interval = 100 * time.Millisecond
	}
	var ranges []*cidrRanges
	for i, s := range in.Subnets {
		mask := 0
		if i < len(in.MaskSizes) {
			mask = in.MaskSizes[i]
		}
		r, err := newCIDRRanges(s, mask)
		if err != nil {
			return nil, nil, err
		}
		ranges = append(ranges, r)
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, in.Timeout)
	defer cancel()
	cidrs := map[string][]string{}
	var out []Change
	var missing []string
	for {
		list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err == nil { // else the API server may be restarting: keep waiting
			used := map[string]bool{}
			for _, n := range list.Items {
				for _, p := range n.Spec.PodCIDRs {
					used[p] = true
				}
				if n.Spec.PodCIDR != "" {
					used[n.Spec.PodCIDR] = true
				}
			}
			for _, n := range list.Items {
				if !slices.Contains(in.Nodes, n.Name) || cidrs[n.Name] != nil {
					continue
				}
				have := n.Spec.PodCIDRs
				if len(have) == 0 && n.Spec.PodCIDR != "" {
					have = []string{n.Spec.PodCIDR}
				}
				if len(have) == 0 && ranges != nil {
					if have = highestFree(ranges, used); have != nil {
						if err := setPodCIDRs(ctx, c, n.Name, have); err != nil {
							if apierrors.IsInvalid(err) || apierrors.IsNotFound(err) {
								continue // it got one meanwhile (or went away): look again
							}
							if ctx.Err() == nil {
								return cidrs, out, fmt.Errorf("node %s: set pod CIDRs %s: %w", n.Name, strings.Join(have, ","), err)
							}
							continue
						}
						for _, r := range have {
							used[r] = true
						}
						out = append(out, Change{Kind: "Node", Name: n.Name + " podCIDR " + strings.Join(have, ","), Action: Updated})
					}
				}
				if len(have) > 0 {
					cidrs[n.Name] = have
					if in.Have != nil {
						in.Have(n.Name, have)
					}
				}
			}
		}
		missing = missing[:0]
		for _, n := range in.Nodes {
			if cidrs[n] == nil {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 {
			return cidrs, out, nil
		}
		select {
		case <-ctx.Done():
			if err := parent.Err(); err != nil {
				return cidrs, out, fmt.Errorf("waiting for the nodes' pod CIDRs: %w", err)
			}
			sort.Strings(missing)
			return cidrs, out, &NodesError{Nodes: missing, Err: fmt.Errorf("nodes without a pod CIDR after %s: %s: %w", in.Timeout, strings.Join(missing, ", "), ctx.Err())}
		case <-time.After(in.Interval):
		}
	}
}

// highestFree is the highest free range of each subnet's upper half, or nil when one of those
// halves is full.
func highestFree(ranges []*cidrRanges, used map[string]bool) []string {
	var out []string
	for _, r := range ranges {
		c := r.highestFree(used)
		if c == "" {
			return nil
		}
		out = append(out, c)
	}
	return out
}

// setPodCIDRs sets a node's pod CIDRs, as the controller-manager's range allocator does (a
// strategic merge patch of spec.podCIDR, the first, and spec.podCIDRs). The API server refuses
// it as invalid when the node has them already.
func setPodCIDRs(ctx context.Context, c kubernetes.Interface, node string, cidrs []string) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"podCIDR": cidrs[0], "podCIDRs": cidrs}})
	if err != nil {
		return err
	}
	_, err = c.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	return err
}

// cidrRanges is a subnet cut into node ranges of one prefix length.
type cidrRanges struct {
	base  *big.Int
	bits  int // address length: 32 or 128
	mask  int
	count int // ranges in the subnet
}

func newCIDRRanges(subnet string, mask int) (*cidrRanges, error) {
	p, err := netip.ParsePrefix(subnet)
	if err != nil {
		return nil, fmt.Errorf("pod subnet %q: %w", subnet, err)
	}
	p = p.Masked()
	bits := p.Addr().BitLen()
	if mask == 0 { // kube-controller-manager's defaults
		mask = map[int]int{32: 24, 128: 64}[bits]
	}
	if mask <= p.Bits() || mask > bits || mask-p.Bits() > 16 {
		return nil, fmt.Errorf("node CIDR mask /%d does not fit pod subnet %s", mask, p)
	}
	return &cidrRanges{base: new(big.Int).SetBytes(p.Addr().AsSlice()), bits: bits, mask: mask, count: 1 << (mask - p.Bits())}, nil
}

// at is range i, as a CIDR string.
func (r *cidrRanges) at(i int) string {
	v := new(big.Int).Add(r.base, new(big.Int).Lsh(big.NewInt(int64(i)), uint(r.bits-r.mask)))
	b := v.FillBytes(make([]byte, r.bits/8))
	a, _ := netip.AddrFromSlice(b)
	return netip.PrefixFrom(a, r.mask).String()
}

// highestFree is the highest range of the upper half not in used, or "" when that half is
// full.
func (r *cidrRanges) highestFree(used map[string]bool) string {
	for i := r.count - 1; i >= r.count/2; i-- {
		if c := r.at(i); !used[c] {
			return c
		}
	}
	return ""
}
