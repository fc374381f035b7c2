package templates

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestFlannelCNIConfig(t *testing.T) {
	got, err := FlannelCNIConfig([]string{"10.244.1.0/24"}, []string{"10.244.0.0/16"}, false)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "cni-flannel.conflist", got)
	if _, err := FlannelCNIConfig([]string{"10.99.0.0/24"}, []string{"10.244.0.0/16"}, false); err == nil {
		t.Error("a node CIDR outside the pod subnet was accepted")
	}
	if _, err := FlannelCNIConfig([]string{"nope"}, []string{"10.244.0.0/16"}, false); err == nil {
		t.Error("a malformed node CIDR was accepted")
	}
	dual, err := FlannelCNIConfig([]string{"10.244.1.0/24", "fd00:10:244:1::/64"}, []string{"10.244.0.0/16", "fd00:10:244::/56"}, false)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "cni-flannel-dual-stack.conflist", dual)
	if _, err := FlannelCNIConfig([]string{"10.244.1.0/24"}, []string{"10.244.0.0/16", "fd00:10:244::/56"}, false); err == nil {
		t.Error("a dual-stack node with one pod CIDR was accepted")
	}
	if _, err := FlannelCNIConfig([]string{"10.244.1.0/24", "fd00:99::/64"}, []string{"10.244.0.0/16", "fd00:10:244::/56"}, false); err == nil {
		t.Error("an IPv6 node CIDR outside the IPv6 pod subnet was accepted")
	}
}

// TestFlannelCNIConfigNftables: in kube-proxy's nftables mode, portmap writes its hostPort rules
// to nftables too (the containernetworking plugins' "backend"), and nothing else changes.
func TestFlannelCNIConfigNftables(t *testing.T) {
	type conf struct {
		Plugins []map[string]any `json:"plugins"`
	}
	read := func(nft bool) conf {
		b, err := FlannelCNIConfig([]string{"10.244.1.0/24"}, []string{"10.244.0.0/16"}, nft)
		if err != nil {
			t.Fatal(err)
		}
		var c conf
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	ipt, nft := read(false), read(true)
	if len(nft.Plugins) != 2 || nft.Plugins[1]["type"] != "portmap" || nft.Plugins[1]["backend"] != "nftables" {
		t.Errorf("nftables mode: plugins %v; want portmap with backend nftables", nft.Plugins)
	}
	if _, ok := ipt.Plugins[1]["backend"]; ok {
		t.Errorf("iptables mode: portmap %v names a backend; want the plugin's default", ipt.Plugins[1])
	}
	delete(nft.Plugins[1], "backend")
	a, _ := json.Marshal(ipt)
	b, _ := json.Marshal(nft)
	if string(a) != string(b) {
		t.Errorf("the modes differ beyond portmap's backend:\n%s\n%s", a, b)
	}
}

// TestNodeCIDRMaskFlags: the controller-manager gets a node share flag only where the share is
// not its default for the range's family, and a dual-stack cluster's flags name the family.
func TestNodeCIDRMaskFlags(t *testing.T) {
	for _, tc := range []struct {
		pods  string
		sizes []int
		want  []string
	}{
		{"10.244.0.0/16", []int{24}, nil},
		{"10.244.0.0/16", []int{26}, []string{"--node-cidr-mask-size=26"}},
		{"fd00:10:244::/56", []int{64}, nil},
		{"fd00:10:244::/56", []int{80}, []string{"--node-cidr-mask-size=80"}},
		{"10.244.0.0/16,fd00:10:244::/56", []int{24, 64}, nil},
		{"10.244.0.0/16,fd00:10:244::/56", []int{25, 80}, []string{"--node-cidr-mask-size-ipv4=25", "--node-cidr-mask-size-ipv6=80"}},
	} {
		cm := ControlPlane{PodSubnet: tc.pods, ServiceSubnet: "10.96.0.0/12", NodeCIDRMaskSizes: tc.sizes}.ControllerManager()
		var got []string
		for _, a := range cm.Spec.Containers[0].Command {
			if strings.HasPrefix(a, "--node-cidr-mask-size") {
				got = append(got, a)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s %v: %v, want %v", tc.pods, tc.sizes, got, tc.want)
		}
	}
}
