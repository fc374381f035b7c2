package inventory

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

const minimal = `apiVersion: kforge.dev/v1alpha1
kind: Cluster
name: t
masters:
  - name: m1
    address: 10.0.0.1
`

func TestMinimalGetsKubeadmDefaults(t *testing.T) {
	c, err := Parse("t.yaml", []byte(minimal), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	checks := map[string][2]string{
		"version":       {c.KubernetesVersion, "v1.36.3"},
		"podSubnet":     {c.Networking.PodSubnet, "10.244.0.0/16"},
		"serviceSubnet": {c.Networking.ServiceSubnet, "10.96.0.0/12"},
		"dnsDomain":     {c.Networking.DNSDomain, "cluster.local"},
		"plugin":        {c.Networking.Plugin, "flannel"},
		"keyAlgorithm":  {c.PKI.KeyAlgorithm, "ecdsa-p256"},
		"certValidity":  {c.PKI.CertValidity.String(), "365d"},
		"caValidity":    {c.PKI.CAValidity.String(), "3650d"},
		"ssh.user":      {c.SSH.User, "root"},
		"sudo":          {c.SSH.Sudo, "auto"},
		"cgroupDriver":  {c.Kubelet.CgroupDriver, "systemd"},
		"imageRepo":     {c.ImageRepository, "registry.k8s.io"},
	}
	for name, got := range checks {
		if got[0] != got[1] {
			t.Errorf("%s = %q, want %q", name, got[0], got[1])
		}
	}
	if c.SSH.Port != 22 || c.Networking.NodeCIDRMaskSize != 24 || c.SSH.Agent == nil || !*c.SSH.Agent {
		t.Errorf("port %d, mask %d, agent %v", c.SSH.Port, c.Networking.NodeCIDRMaskSize, c.SSH.Agent)
	}
	if got := c.Where("masters[0].address"); got != "t.yaml:6:14" {
		t.Errorf("Where(masters[0].address) = %q", got)
	}
}

func TestEnvSubstitution(t *testing.T) {
	doc := minimal + `    ssh:
      port: ${PORT}
      user: ${USER_NAME:-admin}
      identityFile: "$${HOME}/key"
workers:
  - name: w1
    address: ${W1}
`
	c, err := Parse("t.yaml", []byte(doc), env(map[string]string{"PORT": "2222", "W1": "10.0.0.9", "USER_NAME": ""}))
	if err != nil {
		t.Fatal(err)
	}
	n := c.Nodes()[0]
	if n.SSH.Port != 2222 || n.SSH.User != "admin" || n.SSH.IdentityFile != "${HOME}/key" {
		t.Errorf("ssh after substitution: %+v", n.SSH)
	}
	if c.Workers[0].Address != "10.0.0.9" {
		t.Errorf("worker address %q", c.Workers[0].Address)
	}
}

func TestSSHOverridesMerge(t *testing.T) {
	doc := `apiVersion: kforge.dev/v1alpha1
kind: Cluster
name: t
ssh:
  user: ubuntu
  port: 2200
  sudo: passwordless
masters:
  - name: m1
    address: 10.0.0.1
    ssh: {user: admin, agent: false}
`
	c, err := Parse("t.yaml", []byte(doc), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Nodes()[0].SSH
	if s.User != "admin" || s.Port != 2200 || s.Sudo != "passwordless" || *s.Agent {
		t.Errorf("merged ssh %+v", s)
	}
}

func TestAllErrorsReportedTogether(t *testing.T) {
	doc := `apiVersion: kforge.dev/v1alpha1
kind: Cluster
name: Bad_Name
networking:
  podSubnet: 10.244.0.0/33
masters:
  - name: m1
    adress: 10.0.0.1
`
	_, err := Parse("t.yaml", []byte(doc), env(nil))
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("want Errors, got %v", err)
	}
	// the unknown key stops decoding; the value errors come from validation once keys decode
	if len(es) != 1 || es[0].Line != 8 {
		t.Fatalf("decode errors: %v", err)
	}
	doc = strings.Replace(doc, "adress", "address", 1)
	_, err = Parse("t.yaml", []byte(doc), env(nil))
	if !errors.As(err, &es) || len(es) != 2 || es[0].Line != 3 || es[1].Line != 5 {
		t.Fatalf("want two errors on lines 3 and 5, got %v", err)
	}
}

func TestLoadResolvesPathsAndChecksFiles(t *testing.T) {
	dir := t.TempDir()
	doc := minimal + `pki:
  externalCA: {cert: ca.crt, key: ca.key}
addons:
  - path: addons/x.yaml
bundle: ./bundle
`
	f := filepath.Join(dir, "k.yaml")
	if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(f)
	var es Errors
	if !errors.As(err, &es) || len(es) != 4 {
		t.Fatalf("want 4 missing-file errors (CA cert and key, addon, bundle), got %v", err)
	}
	for _, e := range es {
		if !strings.Contains(e.Msg, "no such file") || e.Line < 8 {
			t.Errorf("missing file error %v", e)
		}
	}
	for _, p := range []string{"ca.crt", "ca.key", "addons/x.yaml", "bundle/manifest.json"} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o700)
		os.WriteFile(filepath.Join(dir, p), []byte("x"), 0o600)
	}
	c, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	if c.PKI.ExternalCA.Cert != filepath.Join(dir, "ca.crt") || c.Bundle != filepath.Join(dir, "bundle") || c.Addons[0].Path != filepath.Join(dir, "addons/x.yaml") {
		t.Errorf("paths not resolved: %+v %q %+v", c.PKI.ExternalCA, c.Bundle, c.Addons)
	}
	if _, err := Load(filepath.Join(dir, "nope.yaml")); err == nil || !strings.Contains(err.Error(), "nope.yaml not found") {
		t.Errorf("missing inventory: %v", err)
	}
}

func TestExamplesAreValid(t *testing.T) {
	files, _ := filepath.Glob("../examples/*.yaml")
	if len(files) < 2 {
		t.Fatalf("examples: %v", files)
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestDurationParse(t *testing.T) {
	for in, want := range map[string]string{"365d": "365d", "8760h": "365d", "90m": "1h30m", "1h30m": "1h30m", "12h": "12h", "61s": "1m1s", "1m": "1m", "36h": "36h"} {
		d, err := ParseDuration(in)
		if err != nil || d.String() != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %s", in, d, err, want)
		}
	}
	for _, in := range []string{"", "0d", "-1h", "1y", "d", "0s"} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) accepted", in)
		}
	}
}

// TestReleaseIsReadOnceAtLoad: the inventory keeps its version's row of the release catalogue
// ("1.35.0" read as v1.35.0), and a copy at another version (an upgrade's hop) carries that
// version's row while the original keeps its own; a version this kforge does not install is
// refused. A cluster that Parse did not make has no row to hand out.
func TestReleaseIsReadOnceAtLoad(t *testing.T) {
	c, err := Parse("t.yaml", []byte(minimal+"kubernetesVersion: 1.35.0\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Release(); r.Kubernetes != "v1.35.0" || r.Minor != "v1.35" || r.Etcd != "v3.6.6" || r.Semver.Minor != 35 {
		t.Errorf("Release() = %+v", r)
	}
	hop, err := c.AtVersion("v1.36.2")
	if err != nil || hop.KubernetesVersion != "v1.36.2" || hop.Release().Kubernetes != "v1.36.2" || hop.Release().Minor != "v1.36" || hop.Name != "t" {
		t.Errorf("AtVersion(v1.36.2) = %+v, %v", hop, err)
	}
	if c.KubernetesVersion != "v1.35.0" || c.Release().Kubernetes != "v1.35.0" {
		t.Errorf("AtVersion changed the original: %s, %s", c.KubernetesVersion, c.Release().Kubernetes)
	}
	if _, err := c.AtVersion("v1.29.0"); err == nil || !strings.Contains(err.Error(), "not supported by this kforge") {
		t.Errorf("AtVersion(v1.29.0): %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("Release of a cluster literal did not panic")
		}
	}()
	(&Cluster{KubernetesVersion: "v1.36.3"}).Release()
}

// TestProxyMode: auto takes nftables as soon as one host has no legacy iptables, and iptables
// otherwise; a mode the inventory names is kept whatever the hosts have.
func TestProxyMode(t *testing.T) {
	c := &Cluster{Masters: []Host{{Name: "m1"}}, Workers: []Host{{Name: "w1"}, {Name: "w2"}}}
	noLegacy := func(names ...string) func(string) bool {
		return func(n string) bool { return !slices.Contains(names, n) }
	}
	for _, tc := range []struct {
		mode    string
		without []string
		want    string
	}{
		{"", nil, ProxyModeIptables},
		{ProxyModeAuto, nil, ProxyModeIptables},
		{ProxyModeAuto, []string{"w2"}, ProxyModeNftables},
		{ProxyModeAuto, []string{"m1", "w1", "w2"}, ProxyModeNftables},
		{ProxyModeIptables, []string{"w2"}, ProxyModeIptables},
		{ProxyModeNftables, nil, ProxyModeNftables},
	} {
		c.KubeProxy.Mode = tc.mode
		if got := c.ProxyMode(noLegacy(tc.without...)); got != tc.want {
			t.Errorf("mode %q, hosts without legacy iptables %v: %s; want %s", tc.mode, tc.without, got, tc.want)
		}
	}
}

// TestDualStack: a dual-stack inventory loads, and its accessors give each family in order.
func TestDualStack(t *testing.T) {
	doc := head + "networking:\n  podSubnet: 10.244.0.0/16, fd00:10:244::/56\n  serviceSubnet: 10.96.0.0/12,fd00:10:96::/112\n" + dual6
	c, err := Parse("t.yaml", []byte(doc), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	n := c.Networking
	if !n.DualStack() {
		t.Fatal("not dual-stack")
	}
	for _, got := range []struct{ name, got, want string }{
		{"PodSubnets", strings.Join(n.PodSubnets(), " "), "10.244.0.0/16 fd00:10:244::/56"},
		{"ServiceSubnets", strings.Join(n.ServiceSubnets(), " "), "10.96.0.0/12 fd00:10:96::/112"},
		{"NodeCIDRMaskSizes", fmt.Sprint(n.NodeCIDRMaskSizes()), "[24 64]"},
		{"NodeIPs", strings.Join(c.Masters[0].NodeIPs(), " "), "10.0.0.1 2001:db8::1"},
	} {
		if got.got != got.want {
			t.Errorf("%s = %q, want %q", got.name, got.got, got.want)
		}
	}
	single, err := Parse("t.yaml", []byte(minimal), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if sn := single.Networking; sn.DualStack() || len(sn.PodSubnets()) != 1 || fmt.Sprint(sn.NodeCIDRMaskSizes()) != "[24]" || len(single.Masters[0].NodeIPs()) != 1 {
		t.Errorf("single-stack: %v %v %v", sn.PodSubnets(), sn.NodeCIDRMaskSizes(), single.Masters[0].NodeIPs())
	}
}
