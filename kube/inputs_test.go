package kube

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootstraputil "k8s.io/cluster-bootstrap/token/util"

	"github.com/kforge/kforge/inventory"
)

func TestNewBootstrapTokenIsValidAndRandom(t *testing.T) {
	r := rand.NewChaCha8([32]byte{1})
	seen := map[string]bool{}
	for range 50 {
		tok, err := NewBootstrapToken(r, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if !bootstraputil.IsValidBootstrapToken(tok.Value()) {
			t.Fatalf("invalid token %s", tok)
		}
		if seen[tok.ID] {
			t.Fatalf("ID %s repeated", tok.ID)
		}
		seen[tok.ID] = true
	}
	if _, err := NewBootstrapToken(bytes.NewReader(nil), time.Hour); err == nil {
		t.Error("empty random source accepted")
	}
}

func TestParseBootstrapToken(t *testing.T) {
	tok, err := ParseBootstrapToken("abcdef.0123456789abcdef\n", time.Hour)
	if err != nil || tok.ID != "abcdef" || tok.Secret != "0123456789abcdef" || tok.TTL != time.Hour {
		t.Fatalf("%+v %v", tok, err)
	}
	_, err = ParseBootstrapToken("abcdef.SECRETSECRETSECR", time.Hour)
	if err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("err = %v: want an error without the secret", err)
	}
}

func TestInputsFromInventory(t *testing.T) {
	c := testCluster(t)
	c.ControlPlaneEndpoint = "lb.example:6443"
	im := testImages()
	c.KubeProxy.ConntrackMaxPerCore = new(0)
	kp := KubeProxyInputFor(c, im, inventory.ProxyModeIptables)
	if kp.Server != "https://lb.example:6443" || kp.PodSubnet != "10.244.0.0/16" || kp.Mode != "iptables" || *kp.ConntrackMaxPerCore != 0 {
		t.Errorf("kube-proxy input %+v", kp)
	}
	if kp := KubeProxyConfiguration(KubeProxyInputFor(c, im, inventory.ProxyModeNftables)); kp.Mode != "nftables" {
		t.Errorf("kube-proxy configuration in nftables mode: mode %q", kp.Mode)
	}
	fl := FlannelInputFor(c, im, inventory.ProxyModeIptables)
	if fl.Endpoint != "lb.example:6443" || fl.Image != im.Flannel || fl.NFTables {
		t.Errorf("flannel input %+v", fl)
	}
	if fl := FlannelInputFor(c, im, inventory.ProxyModeNftables); !fl.NFTables {
		t.Errorf("flannel input with kube-proxy in nftables mode: %+v; want EnableNFTables", fl)
	}
	c.ControlPlaneEndpoint = ""
	if fl := FlannelInputFor(c, im, inventory.ProxyModeIptables); fl.Endpoint != "198.51.100.11:6443" {
		t.Errorf("flannel endpoint without controlPlaneEndpoint: %s", fl.Endpoint)
	}
	dns := CoreDNSInputFor(&inventory.Cluster{}, im)
	if dns.DNSDomain != "cluster.local" || dns.ServiceSubnet != "10.96.0.0/12" {
		t.Errorf("coredns defaults %+v", dns)
	}
}

func TestManifestsFor(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("kind: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &inventory.Cluster{Addons: []inventory.Addon{{Path: "a.yaml"}}}
	ms, err := ManifestsFor(c, dir)
	if err != nil || len(ms) != 1 || ms[0].Path != filepath.Join(dir, "a.yaml") || string(ms[0].Data) != "kind: x\n" {
		t.Fatalf("%v %v", ms, err)
	}
	c.Addons = append(c.Addons, inventory.Addon{Path: "missing.yaml"})
	if _, err := ManifestsFor(c, dir); err == nil || !strings.Contains(err.Error(), "addons[1]") || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("err = %v", err)
	}
}
