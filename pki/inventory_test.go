package pki

import (
	"slices"
	"testing"

	"github.com/kforge/kforge/inventory"
)

// TestEndpointsOfAClusterWithAVirtualIP: the workstation's endpoint is the VIP, the nodes'
// their local proxy, and the API server certificates are valid for both.
func TestEndpointsOfAClusterWithAVirtualIP(t *testing.T) {
	c := &inventory.Cluster{
		Name:            "t",
		ControlPlaneVIP: "10.0.0.50",
		APIProxy:        inventory.APIProxy{Port: 6444},
		Masters:         []inventory.Host{{Name: "m1", Address: "10.0.0.1"}, {Name: "m2", Address: "10.0.0.2"}},
		PKI:             inventory.PKI{APIServerCertSANs: []string{"api.example.com"}},
	}
	if got := Endpoint(c); got != "10.0.0.50:6443" {
		t.Errorf("Endpoint = %s, want the VIP 10.0.0.50:6443", got)
	}
	if got := NodeEndpoint(c); got != "127.0.0.1:6444" {
		t.Errorf("NodeEndpoint = %s, want the local proxy 127.0.0.1:6444", got)
	}
	p, _, err := FromInventory(c)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.APIServerCertSANs, []string{"api.example.com", "10.0.0.50"}) {
		t.Errorf("APIServerCertSANs = %v, want the inventory's and the VIP", p.APIServerCertSANs)
	}
	if !slices.Equal(c.PKI.APIServerCertSANs, []string{"api.example.com"}) {
		t.Errorf("FromInventory changed the inventory's SANs: %v", c.PKI.APIServerCertSANs)
	}
	c.ControlPlaneVIP = ""
	if got := Endpoint(c); got != "10.0.0.1:6443" {
		t.Errorf("Endpoint without a VIP = %s, want the first master", got)
	}
}
