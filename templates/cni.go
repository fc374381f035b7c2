package templates

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
)

// FlannelMTU is the MTU of flannel's vxlan backend (1500 less its 50-byte header); pod
// interfaces use it so packets fit the tunnel.
const FlannelMTU = 1450

// FlannelCNIConfig is a node's CNI network config for the flannel pod network: a bridge (cni0)
// with host-local addresses from the node's pod CIDR and a route to the whole pod network, plus
// portmap for hostPorts, its rules in nftables when nftables is set (kube-proxy's nftables mode)
// and else in iptables. It does what flannel's own CNI plugin would (which cannot be built from
// Go modules): flanneld routes each node's pod CIDR over vxlan.
//
// A dual-stack node has a range of each family (nodePodCIDRs, in podSubnets' order): host-local
// gives each pod an address of both, and routes both pod subnets.
func FlannelCNIConfig(nodePodCIDRs, podSubnets []string, nftables bool) ([]byte, error) {
	if len(nodePodCIDRs) != len(podSubnets) {
		return nil, fmt.Errorf("node pod CIDRs %s for pod subnets %s: want one per subnet", strings.Join(nodePodCIDRs, ","), strings.Join(podSubnets, ","))
	}
	var ranges [][]map[string]string
	var routes []map[string]string
	for i, c := range nodePodCIDRs {
		node, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("node pod CIDR %q: %w", c, err)
		}
		pods, err := netip.ParsePrefix(podSubnets[i])
		if err != nil {
			return nil, fmt.Errorf("pod subnet %q: %w", podSubnets[i], err)
		}
		if !pods.Contains(node.Addr()) {
			return nil, fmt.Errorf("node pod CIDR %s is not inside the pod subnet %s", node, pods)
		}
		ranges = append(ranges, []map[string]string{{"subnet": node.String()}})
		routes = append(routes, map[string]string{"dst": pods.String()})
	}
	portmap := map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}}
	if nftables {
		portmap["backend"] = "nftables"
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "kforge",
		"plugins": []any{
			map[string]any{
				"type":             "bridge",
				"bridge":           "cni0",
				"mtu":              FlannelMTU,
				"isGateway":        true,
				"isDefaultGateway": true,
				"ipMasq":           false,
				"hairpinMode":      true,
				"ipam": map[string]any{
					"type":   "host-local",
					"ranges": ranges,
					"routes": routes,
				},
			},
			portmap,
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	return append(b, '\n'), err
}
