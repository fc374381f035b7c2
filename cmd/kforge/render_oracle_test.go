package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/internal/testenv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/cis"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/release"
	"github.com/kforge/kforge/templates"
)

type tlog struct{ t *testing.T }

func (l tlog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// oracleCase is an inventory and the kubeadm configuration that says the same.
type oracleCase struct {
	name      string
	inventory string
	endpoint  string // controlPlaneEndpoint for kubeadm, may be empty
	algorithm string // kubeadm encryptionAlgorithm
	certSANs  []string
	masters   [][2]string // name, IP
	// addresses are masters' SSH addresses that differ from their IP: kforge puts them in the
	// apiserver certificate, the equivalent kubeadm config lists them in certSANs.
	addresses map[string]string
	// ipv6 are a dual-stack cluster's masters' IPv6 addresses: kubelet's second node IP, and in
	// kforge's apiserver certificate (kubeadm's config lists them in certSANs).
	ipv6 map[string]string
	// kubelet settings the inventory holds, repeated for kubeadm's KubeletConfiguration and
	// kubeletExtraArgs; resolvConf is the inventory's kubelet.resolvConf.
	maxPods       string
	allowCgroupV1 bool
	resolvConf    string
	// etcd are an external etcd's hosts (name, IP): kubeadm's etcd.external lists them, and
	// neither tool makes the etcd CA's key or the members' certificates on a master.
	etcd [][2]string
}

var oracleCases = []oracleCase{
	{
		name:          "ha-ecdsa",
		endpoint:      "k8s-api.lab.example.test:6443",
		algorithm:     "ECDSA-P256",
		certSANs:      []string{"api.lab.example.test", "198.51.100.200"},
		masters:       [][2]string{{"m1", "198.51.100.11"}, {"m2", "198.51.100.12"}, {"m3", "198.51.100.13"}},
		addresses:     map[string]string{"m2": "m2.lab.example.test"},
		maxPods:       "150",
		allowCgroupV1: true,
		resolvConf:    "/etc/kforge/resolv.conf",
		inventory: `apiVersion: kforge.dev/v1alpha1
kind: Cluster
name: lab
controlPlaneEndpoint: k8s-api.lab.example.test:6443
kubelet:
  allowCgroupV1: true
  extraArgs: {max-pods: "150"}
  resolvConf: /etc/kforge/resolv.conf
pki:
  apiServerCertSANs: [api.lab.example.test, 198.51.100.200]
masters:
  - {name: m1, address: 198.51.100.11}
  - {name: m2, address: m2.lab.example.test, internalAddress: 198.51.100.12}
  - {name: m3, address: 198.51.100.13}
workers:
  - {name: w1, address: 198.51.100.21}
`,
	},
	{
		name:      "single-rsa",
		algorithm: "RSA-2048",
		masters:   [][2]string{{"solo", "198.51.100.31"}},
		inventory: `apiVersion: kforge.dev/v1alpha1
kind: Cluster
name: solo-cluster
networking:
  serviceSubnet: 10.100.0.0/16
  podSubnet: 10.200.0.0/16
  dnsDomain: corp.internal
pki:
  keyAlgorithm: rsa-2048
  certValidity: 90d
masters:
  - {name: solo, address: 198.51.100.31}
`,
	},
	{
		name:      "external-etcd",
		algorithm: "ECDSA-P256",
		masters:   [][2]string{{"x1", "198.51.100.51"}},
		etcd:      [][2]string{{"e1", "198.51.100.61"}, {"e2", "198.51.100.62"}, {"e3", "198.51.100.63"}},
		inventory: `apiVersion: kforge.dev/v1alpha1
kind: Cluster
name: ext
masters:
  - {name: x1, address: 198.51.100.51}
workers:
  - {name: x2, address: 198.51.100.52}
etcd:
  - {name: e1, address: 198.51.100.61}
  - {name: e2, address: 198.51.100.62}
  - {name: e3, address: 198.51.100.63}
`,
	},
	{
		name:      "dual-stack",
		algorithm: "ECDSA-P256",
		masters:   [][2]string{{"d1", "198.51.100.41"}},
		ipv6:      map[string]string{"d1": "2001:db8::41"},
		inventory: `apiVersion: kforge.dev/v1alpha1
kind: Cluster
name: dual
networking:
  podSubnet: 10.244.0.0/16,fd00:10:244::/56
  serviceSubnet: 10.96.0.0/12,fd00:10:96::/112
masters:
  - {name: d1, address: 198.51.100.41, ipv6Address: "2001:db8::41"}
workers:
  - {name: d2, address: 198.51.100.42, ipv6Address: "2001:db8::42"}
`,
	},
}

// inventoryAt is the case's inventory for Kubernetes version.
func (c oracleCase) inventoryAt(version string) string {
	return strings.Replace(c.inventory, "\nname: ", "\nkubernetesVersion: "+version+"\nname: ", 1)
}

func (c oracleCase) kubeadmConfig(version string, master int, serviceSubnet, podSubnet, dnsDomain, clusterName string, certValidity time.Duration) string {
	m := c.masters[master]
	nodeIP := m[1]
	if v6, ok := c.ipv6[m[0]]; ok {
		nodeIP += "," + v6
	}
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: %s
  bindPort: 6443
nodeRegistration:
  name: %s
  criSocket: unix:///run/containerd/containerd.sock
  kubeletExtraArgs:
  - {name: node-ip, value: %q}
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: %s
kubernetesVersion: %s
imageRepository: registry.k8s.io
certificatesDir: /etc/kubernetes/pki
encryptionAlgorithm: %s
certificateValidityPeriod: %s
caCertificateValidityPeriod: 87600h0m0s
networking:
  serviceSubnet: %s
  podSubnet: %s
  dnsDomain: %s
`, m[1], m[0], nodeIP, clusterName, version, c.algorithm, certValidity, serviceSubnet, podSubnet, dnsDomain)
	if c.endpoint != "" {
		fmt.Fprintf(&b, "controlPlaneEndpoint: %s\n", c.endpoint)
	}
	sans := c.certSANs
	if a, ok := c.addresses[m[0]]; ok {
		sans = append(append([]string{}, sans...), a)
	}
	if a, ok := c.ipv6[m[0]]; ok {
		sans = append(append([]string{}, sans...), fmt.Sprintf("%q", a))
	}
	if len(sans) > 0 {
		fmt.Fprintf(&b, "apiServer:\n  certSANs: [%s]\n", strings.Join(sans, ", "))
	}
	if len(c.etcd) > 0 {
		var endpoints []string
		for _, e := range c.etcd {
			endpoints = append(endpoints, "https://"+e[1]+":2379")
		}
		fmt.Fprintf(&b, "etcd:\n  external:\n    endpoints: [%s]\n    caFile: /etc/kubernetes/pki/etcd/ca.crt\n    certFile: /etc/kubernetes/pki/apiserver-etcd-client.crt\n    keyFile: /etc/kubernetes/pki/apiserver-etcd-client.key\n", strings.Join(endpoints, ", "))
	}
	b.WriteString("---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n")
	if c.allowCgroupV1 {
		b.WriteString("failCgroupV1: false\n")
	}
	if c.resolvConf != "" {
		fmt.Fprintf(&b, "resolvConf: %s\n", c.resolvConf)
	}
	out := b.String()
	if c.maxPods != "" {
		out = strings.Replace(out, "  kubeletExtraArgs:\n", fmt.Sprintf("  kubeletExtraArgs:\n  - {name: max-pods, value: %q}\n", c.maxPods), 1)
	}
	return out
}

// inNamespace runs script under sh in a private mount namespace in which /etc and /var are
// overlays over the real ones, so kubeadm's fixed /etc/kubernetes and /var/lib/kubelet paths
// never touch the machine. The namespace and its mounts vanish with the process. Scripts run
// kubeadm with an empty PATH so it finds no systemctl and cannot touch the machine's services.
func inNamespace(t *testing.T, env map[string]string, script string) string {
	t.Helper()
	scratch := t.TempDir()
	full := `set -eu
mount -t tmpfs kforge-oracle "$SCRATCH"
mkdir "$SCRATCH/upper" "$SCRATCH/work"
mkdir "$SCRATCH/var-upper" "$SCRATCH/var-work"
mount -t overlay kforge-oracle -o "lowerdir=/etc,upperdir=$SCRATCH/upper,workdir=$SCRATCH/work" /etc
mount -t overlay kforge-oracle -o "lowerdir=/var,upperdir=$SCRATCH/var-upper,workdir=$SCRATCH/var-work" /var
rm -rf /etc/kubernetes /var/lib/kubelet
mkdir -p /etc/kubernetes /var/lib/kubelet
` + script
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", full)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "SCRATCH=" + scratch}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubeadm in a private mount namespace: %v\n%s", err, out)
	}
	return string(out)
}

// difference is one semantic difference; key is what the allow-list names.
type difference struct{ key, detail string }

// TestRenderMatchesKubeadm compares `kforge render` with real kubeadm of every supported minor
// (the catalogue's default release of each): the same cases, rendered at that version, against
// that version's kubeadm. Each kubeadm is built once from Go modules and cached
// (bundle.KubernetesBinaries: minutes the first time, then milliseconds; `kforge bundle build`
// of the version fills the same cache).
func TestRenderMatchesKubeadm(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: builds and runs real kubeadm of every supported minor")
	}
	_, unshareErr := exec.LookPath("unshare")
	if !(os.Geteuid() == 0) {
		testenv.Require(t, errors.New("must run as root (mount namespaces)"))
	}
	if !(unshareErr == nil) {
		testenv.Require(t, errors.New("unshare (util-linux) not found"))
	}
	_, goErr := exec.LookPath("go")
	if !(goErr == nil) {
		testenv.Require(t, errors.New("go toolchain needed to build kubeadm"))
	}

	allowed := loadAllowList(t)
	used := map[string]bool{}
	// The CA directories kubeadm would mount on this machine: what apply detects per host.
	var caDirs []string
	for _, d := range templates.CACertDirCandidates {
		if _, err := os.Stat(d); err == nil {
			caDirs = append(caDirs, d)
		}
	}
	for _, r := range release.All() {
		t.Run(r.Minor, func(t *testing.T) {
			start := time.Now()
			bin, err := bundle.KubernetesBinaries(context.Background(), bundle.BuildOptions{Version: r.Kubernetes, Report: testenv.Report(t)})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("kubeadm %s ready in %s", r.Kubernetes, time.Since(start).Round(time.Millisecond))
			kubeadm := filepath.Join(bin, "kubeadm")
			for _, tc := range oracleCases {
				t.Run(tc.name, func(t *testing.T) {
					compareWithKubeadm(t, tc, r, kubeadm, caDirs, allowed, used)
				})
			}
		})
	}
	for k := range allowed {
		if !used[k] {
			t.Logf("allow-list entry not needed by these cases: %s", k)
		}
	}
}

// compareWithKubeadm renders case tc at release r's Kubernetes version and compares the result
// with what kubeadm (of that version) writes for every master; a difference fails the test
// unless docs/kubeadm-differences.md lists it for every minor or for r's (allowedFor).
func compareWithKubeadm(t *testing.T, tc oracleCase, r release.Release, kubeadm string, caDirs []string, allowed map[string]string, used map[string]bool) {
	dir := t.TempDir()
	inv := filepath.Join(dir, "kforge.yaml")
	if err := os.WriteFile(inv, []byte(tc.inventoryAt(r.Kubernetes)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "render")
	t.Setenv("KFORGE_BOOTSTRAP_TOKEN", "abcdef.0123456789abcdef")
	code, _, stderr := kforge(t, "-i", inv, "--state-dir", filepath.Join(dir, "state"), "render", "-o", out, "--ca-cert-dirs", strings.Join(append(caDirs, ""), ","))
	if code != 0 {
		t.Fatalf("render: %s", stderr)
	}
	c, err := loadInventory(&Globals{Inventory: inv})
	if err != nil {
		t.Fatal(err)
	}
	if c.KubernetesVersion != r.Kubernetes {
		t.Fatalf("the inventory says Kubernetes %s, want %s", c.KubernetesVersion, r.Kubernetes)
	}
	var diffs []difference
	for i, m := range tc.masters {
		who := "first master"
		if i > 0 {
			who = "joining master"
		}
		mine := filepath.Join(out, m[0], "etc", "kubernetes")
		theirs := filepath.Join(dir, "kubeadm-"+m[0])
		cfg := filepath.Join(dir, "kubeadm-"+m[0]+".yaml")
		kcfg := tc.kubeadmConfig(r.Kubernetes, i, c.Networking.ServiceSubnet, c.Networking.PodSubnet, c.Networking.DNSDomain, c.Name, time.Duration(c.PKI.CertValidity))
		if err := os.WriteFile(cfg, []byte(kcfg), 0o644); err != nil {
			t.Fatal(err)
		}
		// kubeadm signs with kforge's CAs and service-account key, as a joining
		// master uses the cluster's: issuers and CA data then compare exactly.
		// With an external etcd, kubeadm makes no etcd certificate: the etcd CA's certificate and
		// the API server's client certificate are the user's, here kforge's.
		seeded := []string{"ca.crt", "ca.key", "front-proxy-ca.crt", "front-proxy-ca.key", "etcd/ca.crt", "etcd/ca.key", "sa.key", "sa.pub"}
		if len(tc.etcd) > 0 {
			seeded = []string{"ca.crt", "ca.key", "front-proxy-ca.crt", "front-proxy-ca.key", "etcd/ca.crt", "apiserver-etcd-client.crt", "apiserver-etcd-client.key", "sa.key", "sa.pub"}
		}
		seed := filepath.Join(dir, "seed-"+m[0], "pki")
		for _, f := range seeded {
			copyFile(t, filepath.Join(mine, "pki", f), filepath.Join(seed, f))
		}
		for _, d := range []string{"etc-kubernetes", "var-lib-kubelet"} {
			if err := os.MkdirAll(filepath.Join(theirs, d), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		log := inNamespace(t, map[string]string{"KUBEADM": kubeadm, "CFG": cfg, "SEED": filepath.Dir(seed), "OUT": theirs}, `
cp -a "$SEED/." /etc/kubernetes/
for phase in "certs all" "kubeconfig all" "control-plane all" "etcd local" "kubelet-start"; do
	PATH=/nonexistent "$KUBEADM" init phase $phase --config "$CFG"
done
cp -a /etc/kubernetes/. "$OUT/etc-kubernetes/"
cp -a /var/lib/kubelet/. "$OUT/var-lib-kubelet/"
`)
		t.Logf("kubeadm %s for %s:\n%s", r.Kubernetes, m[0], log)
		for _, d := range compareTrees(t, filepath.Join(theirs, "etc-kubernetes"), mine) {
			d.key = who + ": " + d.key
			diffs = append(diffs, d)
		}
		for _, d := range compareKubelet(t, filepath.Join(theirs, "var-lib-kubelet"), filepath.Join(out, m[0], "var", "lib", "kubelet")) {
			d.key = who + ": " + d.key
			diffs = append(diffs, d)
		}
		if i == 0 && len(tc.etcd) == 0 { // CIS's etcd checks (1.1.7-1.1.12) are the etcd hosts' with an external etcd
			cisSideBySide(t, m[0], theirs, filepath.Join(out, m[0]))
		}
	}
	// The runs above sign with kforge's CAs, so the CAs themselves are compared here:
	// kubeadm creates its own for the first master, from the same configuration.
	fresh := filepath.Join(dir, "kubeadm-fresh-cas")
	if err := os.MkdirAll(fresh, 0o700); err != nil {
		t.Fatal(err)
	}
	inNamespace(t, map[string]string{"KUBEADM": kubeadm, "CFG": filepath.Join(dir, "kubeadm-"+tc.masters[0][0]+".yaml"), "OUT": fresh}, `
PATH=/nonexistent "$KUBEADM" init phase certs all --config "$CFG"
cp -a /etc/kubernetes/pki/. "$OUT/"
`)
	mine := filepath.Join(out, tc.masters[0][0], "etc", "kubernetes", "pki")
	cas, keys := []string{"ca.crt", "front-proxy-ca.crt", "etcd/ca.crt"}, []string{"ca.key", "front-proxy-ca.key", "etcd/ca.key", "sa.key"}
	if len(tc.etcd) > 0 { // kubeadm makes no etcd CA for an external etcd
		cas, keys = cas[:2], []string{"ca.key", "front-proxy-ca.key", "sa.key"}
	}
	for _, f := range cas {
		for _, d := range compareCerts(t, filepath.Join(fresh, f), filepath.Join(mine, f)) {
			diffs = append(diffs, difference{"new CA pki/" + f + " " + d.key, d.detail})
		}
	}
	for _, f := range keys {
		for _, d := range compareKeys(t, filepath.Join(fresh, f), filepath.Join(mine, f)) {
			diffs = append(diffs, difference{"new CA pki/" + f + " " + d.key, d.detail})
		}
	}
	var bad []string
	for _, d := range diffs {
		if k, ok := allowedFor(allowed, r.Minor, d.key); ok {
			used[k] = true
			t.Logf("allowed difference %s: %s", d.key, d.detail)
			continue
		}
		bad = append(bad, fmt.Sprintf("%s: %s", d.key, d.detail))
	}
	if len(bad) > 0 {
		t.Errorf("%d differences from kubeadm %s not in docs/kubeadm-differences.md:\n%s", len(bad), r.Kubernetes, strings.Join(bad, "\n"))
	}

	// kubeadm reads every certificate of the rendered first master.
	m1 := filepath.Join(out, tc.masters[0][0], "etc", "kubernetes")
	cfg := filepath.Join(dir, "kubeadm-"+tc.masters[0][0]+".yaml")
	report := inNamespace(t, map[string]string{"KUBEADM": kubeadm, "CFG": cfg, "TREE": m1}, `
cp -a "$TREE/." /etc/kubernetes/
PATH=/nonexistent "$KUBEADM" certs check-expiration --config "$CFG"
`)
	checkExpirationReport(t, report, time.Duration(c.PKI.CertValidity), len(tc.etcd) > 0)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, fi.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
}

// allowedFor is the allow-list entry that covers difference key found against kubeadm of
// minor: an entry for every minor (allowedKey), or one for that minor alone, written
// "<minor>: <key>" (e.g. "v1.35: * master: pki/apiserver-kubelet-client.crt subject").
func allowedFor(allowed map[string]string, minor, key string) (string, bool) {
	if k, ok := allowedKey(allowed, key); ok {
		return k, true
	}
	return allowedKey(allowed, minor+": "+key)
}

// allowedKey is the allow-list entry that covers difference key: the same key, or a pattern
// with * (path.Match: "*" stands for any text without a slash).
func allowedKey(allowed map[string]string, key string) (string, bool) {
	if _, ok := allowed[key]; ok {
		return key, true
	}
	for k := range allowed {
		if ok, _ := path.Match(k, key); ok && strings.Contains(k, "*") {
			return k, true
		}
	}
	return "", false
}

// loadAllowList reads the rows "| `key` | reason |" of the tables of
// docs/kubeadm-differences.md headed "| Difference (as reported) | Reason |" (other tables there
// are prose); every row needs a reason.
func loadAllowList(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "docs", "kubeadm-differences.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	inTable := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "| Difference (as reported) |"):
			inTable = true
			continue
		case !strings.HasPrefix(line, "|"):
			inTable = false
		}
		if !inTable || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		key := strings.Trim(strings.TrimSpace(cells[0]), "`")
		reason := ""
		if len(cells) > 1 {
			reason = strings.TrimSpace(strings.Join(cells[1:], "|"))
		}
		if reason == "" {
			t.Errorf("docs/kubeadm-differences.md: %q has no reason", key)
		}
		out[key] = reason
	}
	return out
}

// checkExpirationReport checks that kubeadm listed every certificate and CA, none missing or
// externally managed, with the validity kforge was asked for.
func checkExpirationReport(t *testing.T, report string, validity time.Duration, externalEtcd bool) {
	t.Helper()
	want := []string{"admin.conf", "apiserver", "apiserver-etcd-client", "apiserver-kubelet-client", "controller-manager.conf",
		"etcd-healthcheck-client", "etcd-peer", "etcd-server", "front-proxy-client", "scheduler.conf", "super-admin.conf",
		"ca", "etcd-ca", "front-proxy-ca"}
	if externalEtcd { // kubeadm leaves the etcd CA's certificates to the external etcd
		want = slices.DeleteFunc(want, func(w string) bool { return strings.Contains(w, "etcd") })
	}
	rows := map[string]string{}
	for _, line := range strings.Split(report, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 {
			rows[f[0]] = line
		}
	}
	days := fmt.Sprintf("%dd", int(validity.Hours()/24)-1)
	for _, w := range want {
		line, ok := rows[w]
		if !ok {
			t.Errorf("kubeadm certs check-expiration does not list %s:\n%s", w, report)
			continue
		}
		if strings.Contains(line, "MISSING") || strings.Contains(line, "invalid") || !strings.HasSuffix(strings.TrimSpace(line), "no") {
			t.Errorf("kubeadm certs check-expiration: %s", line)
		}
		if !strings.HasSuffix(w, "ca") && !strings.Contains(line, days) {
			t.Errorf("kubeadm certs check-expiration: %s: want residual time %s", line, days)
		}
	}
	t.Logf("kubeadm certs check-expiration:\n%s", report)
}

// compareTrees compares kubeadm's /etc/kubernetes (theirs) with kforge's (mine).
func compareTrees(t *testing.T, theirs, mine string) []difference {
	t.Helper()
	var diffs []difference
	a, b := listFiles(t, theirs), listFiles(t, mine)
	for _, f := range a {
		if !slices.Contains(b, f) {
			diffs = append(diffs, difference{f + " only in kubeadm's tree", ""})
		}
	}
	for _, f := range b {
		if !slices.Contains(a, f) {
			diffs = append(diffs, difference{f + " only in kforge's tree", ""})
		}
	}
	for _, f := range a {
		if !slices.Contains(b, f) {
			continue
		}
		pa, pb := filepath.Join(theirs, f), filepath.Join(mine, f)
		var ds []difference
		switch {
		case strings.HasSuffix(f, ".crt"):
			ds = compareCerts(t, pa, pb)
		case strings.HasSuffix(f, ".conf"):
			ds = compareKubeconfigs(t, pa, pb)
		case strings.HasPrefix(f, "manifests/"):
			ds = comparePods(t, pa, pb)
		case strings.HasSuffix(f, ".key"):
			ds = compareKeys(t, pa, pb)
		}
		for _, d := range ds {
			d.key = f + " " + d.key
			diffs = append(diffs, d)
		}
		if fa, fb := mode(t, pa), mode(t, pb); fa != fb {
			diffs = append(diffs, difference{f + " mode", fmt.Sprintf("kubeadm %v, kforge %v", fa, fb)})
		}
	}
	return diffs
}

func listFiles(t *testing.T, root string) []string {
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func mode(t *testing.T, p string) os.FileMode {
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func readCert(t *testing.T, p string) *x509.Certificate {
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pki.ParseCert(data)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return c
}

func sortedStrings(s []string) string {
	s = slices.Clone(s)
	sort.Strings(s)
	return strings.Join(s, ",")
}

func ipList(ips []net.IP) string {
	var s []string
	for _, ip := range ips {
		s = append(s, ip.String())
	}
	return sortedStrings(s)
}

func extUsages(u []x509.ExtKeyUsage) string {
	var s []string
	for _, x := range u {
		s = append(s, fmt.Sprint(x))
	}
	return sortedStrings(s)
}

// certFacts are the fields compared per certificate.
func certFacts(c *x509.Certificate) map[string]string {
	return map[string]string{
		"subject":      fmt.Sprintf("CN=%s O=%s", c.Subject.CommonName, sortedStrings(c.Subject.Organization)),
		"DNS SANs":     sortedStrings(c.DNSNames),
		"IP SANs":      ipList(c.IPAddresses),
		"key usage":    fmt.Sprint(c.KeyUsage),
		"ext usage":    extUsages(c.ExtKeyUsage),
		"issuer":       c.Issuer.String(),
		"CA":           fmt.Sprint(c.IsCA, c.BasicConstraintsValid),
		"key type":     string(pki.AlgorithmOf(c.PublicKey)),
		"validity":     c.NotAfter.Sub(c.NotBefore).Round(time.Hour).String(),
		"signature":    c.SignatureAlgorithm.String(),
		"authority id": fmt.Sprint(len(c.AuthorityKeyId) > 0),
	}
}

func diffFacts(a, b map[string]string) []difference {
	var out []difference
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if a[k] != b[k] {
			out = append(out, difference{k, fmt.Sprintf("kubeadm %q, kforge %q", a[k], b[k])})
		}
	}
	return out
}

func compareCerts(t *testing.T, a, b string) []difference {
	return diffFacts(certFacts(readCert(t, a)), certFacts(readCert(t, b)))
}

func compareKeys(t *testing.T, a, b string) []difference {
	read := func(p string) string {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		k, err := pki.ParseKey(data)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		return string(pki.AlgorithmOf(k.Public()))
	}
	if ka, kb := read(a), read(b); ka != kb {
		return []difference{{"key type", fmt.Sprintf("kubeadm %s, kforge %s", ka, kb)}}
	}
	return nil
}

func kubeconfigFacts(t *testing.T, p string) map[string]string {
	cfg, err := clientcmd.LoadFromFile(p)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil {
		t.Fatalf("%s: no current context", p)
	}
	cl, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
	facts := map[string]string{"context": cfg.CurrentContext, "cluster name": ctx.Cluster, "user name": ctx.AuthInfo}
	if cl != nil {
		facts["server"] = cl.Server
		if ca, err := pki.ParseCert(cl.CertificateAuthorityData); err == nil {
			facts["cluster CA"] = pki.SPKIPin(ca)
		}
	}
	if user != nil {
		facts["token auth"] = fmt.Sprint(user.Token != "")
		if c, err := pki.ParseCert(user.ClientCertificateData); err == nil {
			for k, v := range certFacts(c) {
				facts["client "+k] = v
			}
		}
	}
	return facts
}

func compareKubeconfigs(t *testing.T, a, b string) []difference {
	return diffFacts(kubeconfigFacts(t, a), kubeconfigFacts(t, b))
}

func readPod(t *testing.T, p string) *corev1.Pod {
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return &pod
}

func flagMap(cmd []string) map[string]string {
	m := map[string]string{}
	for _, a := range cmd[1:] {
		k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		m[k] = v
	}
	return m
}

// joinKeys is the set of keys of a and b.
func joinKeys(a, b map[string]string) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func show(v any) string {
	b, _ := yaml.Marshal(v)
	return strings.TrimSpace(string(b))
}

func comparePods(t *testing.T, a, b string) []difference {
	pa, pb := readPod(t, a), readPod(t, b)
	var out []difference
	add := func(key string, x, y any) {
		if !reflect.DeepEqual(x, y) {
			out = append(out, difference{key, fmt.Sprintf("kubeadm %s, kforge %s", show(x), show(y))})
		}
	}
	// Annotations one by one, so that kforge's own (templates.InputsAnnotation) is reported
	// under its name.
	add("metadata", []any{pa.Name, pa.Namespace, pa.Labels}, []any{pb.Name, pb.Namespace, pb.Labels})
	for k := range joinKeys(pa.Annotations, pb.Annotations) {
		if pa.Annotations[k] != pb.Annotations[k] {
			out = append(out, difference{"annotation " + k, fmt.Sprintf("kubeadm %q, kforge %q", pa.Annotations[k], pb.Annotations[k])})
		}
	}
	sa, sb := pa.Spec, pb.Spec
	add("priority", []any{sa.PriorityClassName, sa.Priority}, []any{sb.PriorityClassName, sb.Priority})
	add("hostNetwork", sa.HostNetwork, sb.HostNetwork)
	add("securityContext", sa.SecurityContext, sb.SecurityContext)
	vols := func(vs []corev1.Volume) map[string]corev1.Volume {
		m := map[string]corev1.Volume{}
		for _, v := range vs {
			m[v.Name] = v
		}
		return m
	}
	add("volumes", vols(sa.Volumes), vols(sb.Volumes))
	if len(sa.Containers) != 1 || len(sb.Containers) != 1 {
		add("containers", len(sa.Containers), len(sb.Containers))
		return out
	}
	ca, cb := sa.Containers[0], sb.Containers[0]
	add("image", ca.Image, cb.Image)
	add("imagePullPolicy", ca.ImagePullPolicy, cb.ImagePullPolicy)
	add("binary", ca.Command[0], cb.Command[0])
	fa, fb := flagMap(ca.Command), flagMap(cb.Command)
	for k := range fa {
		if _, ok := fb[k]; !ok {
			fb[k] = "<absent>"
		}
	}
	for k := range fb {
		if _, ok := fa[k]; !ok {
			fa[k] = "<absent>"
		}
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range fa {
			if !yield(k) {
				return
			}
		}
	}) {
		if fa[k] != fb[k] {
			out = append(out, difference{"flag --" + k, fmt.Sprintf("kubeadm %q, kforge %q", fa[k], fb[k])})
		}
	}
	mounts := func(vs []corev1.VolumeMount) map[string]corev1.VolumeMount {
		m := map[string]corev1.VolumeMount{}
		for _, v := range vs {
			m[v.Name] = v
		}
		return m
	}
	add("volumeMounts", mounts(ca.VolumeMounts), mounts(cb.VolumeMounts))
	add("livenessProbe", ca.LivenessProbe, cb.LivenessProbe)
	add("readinessProbe", ca.ReadinessProbe, cb.ReadinessProbe)
	add("startupProbe", ca.StartupProbe, cb.StartupProbe)
	add("resources", ca.Resources, cb.Resources)
	add("ports", ca.Ports, cb.Ports)
	add("env", ca.Env, cb.Env)
	add("securityContext (container)", ca.SecurityContext, cb.SecurityContext)
	return out
}

// compareKubelet compares what `kubeadm init phase kubelet-start` writes in /var/lib/kubelet
// with kforge's: config.yaml and instance-config.yaml field by field, kubeadm-flags.env flag by
// flag.
func compareKubelet(t *testing.T, theirs, mine string) []difference {
	t.Helper()
	var out []difference
	for _, f := range []string{"config.yaml", "instance-config.yaml"} {
		read := func(p string) map[string]any {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]any{}
			if err := yaml.Unmarshal(data, &m); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			return m
		}
		a, b := read(filepath.Join(theirs, f)), read(filepath.Join(mine, f))
		for _, k := range unionKeys(a, b) {
			if !reflect.DeepEqual(a[k], b[k]) {
				out = append(out, difference{"/var/lib/kubelet/" + f + " " + k, fmt.Sprintf("kubeadm %s, kforge %s", show(a[k]), show(b[k]))})
			}
		}
	}
	flags := func(p string) map[string]any {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		line := strings.TrimSpace(string(data))
		v, ok := strings.CutPrefix(line, "KUBELET_KUBEADM_ARGS=")
		if !ok {
			t.Fatalf("%s: %q", p, line)
		}
		m := map[string]any{}
		for _, a := range strings.Fields(strings.Trim(v, `"`)) {
			k, val, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			m[k] = val
		}
		return m
	}
	a, b := flags(filepath.Join(theirs, "kubeadm-flags.env")), flags(filepath.Join(mine, "kubeadm-flags.env"))
	for _, k := range unionKeys(a, b) {
		if a[k] != b[k] {
			out = append(out, difference{"/var/lib/kubelet/kubeadm-flags.env flag --" + k, fmt.Sprintf("kubeadm %v, kforge %v", a[k], b[k])})
		}
	}
	return out
}

func unionKeys(a, b map[string]any) []string {
	seen := map[string]bool{}
	var keys []string
	for _, m := range []map[string]any{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	return keys
}

// cisSideBySide scores the first master's files, kubeadm's and kforge's, with the CIS
// Kubernetes Benchmark's automated checks (package cis, FromTree) and logs the results side by
// side: the count for a default kubeadm cluster that docs/security.md compares kforge's with.
// What neither tree holds is taken as each tool leaves it on a host: kubeadm's packages install
// kubelet's unit and drop-in 0644, kubeadm makes /var/lib/etcd 0700 for root, and flannel's
// DaemonSet writes its CNI config 0644; kforge's apply gives etcd's data dir and keys to the
// etcd user and writes its CNI config 0600. A check kforge fails beyond docs/security.md's list
// fails the test.
func cisSideBySide(t *testing.T, master, theirs, mine string) {
	t.Helper()
	kubeadmHost, err := cis.FromTree(master, map[string]string{"/etc/kubernetes": filepath.Join(theirs, "etc-kubernetes"), "/var/lib/kubelet": filepath.Join(theirs, "var-lib-kubelet")},
		map[string]cis.File{
			"/usr/lib/systemd/system/kubelet.service":                   {Mode: 0o644, Owner: "root:root"},
			"/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf": {Mode: 0o644, Owner: "root:root"},
			"/var/lib/etcd":                      {Mode: 0o700, Owner: "root:root"},
			"/etc/cni/net.d/10-flannel.conflist": {Mode: 0o644, Owner: "root:root"},
		})
	if err != nil {
		t.Fatal(err)
	}
	extra := map[string]cis.File{"/var/lib/etcd": {Mode: 0o700, Owner: "etcd:etcd"}, "/etc/cni/net.d/10-kforge.conflist": {Mode: 0o600, Owner: "root:root"}}
	for _, f := range []string{"server.crt", "peer.crt", "healthcheck-client.crt"} {
		extra["/etc/kubernetes/pki/etcd/"+f] = cis.File{Mode: 0o644, Owner: "etcd:etcd"}
	}
	for _, f := range []string{"server.key", "peer.key", "healthcheck-client.key"} {
		extra["/etc/kubernetes/pki/etcd/"+f] = cis.File{Mode: 0o600, Owner: "etcd:etcd"}
	}
	kforgeHost, err := cis.FromTree(master, map[string]string{"/etc": filepath.Join(mine, "etc"), "/var": filepath.Join(mine, "var")}, extra)
	if err != nil {
		t.Fatal(err)
	}
	theirsR, mineR := cis.Run(kubeadmHost), cis.Run(kforgeHost)
	byID := map[string]cis.Result{}
	for _, r := range mineR {
		byID[r.ID] = r
	}
	count := func(rs []cis.Result) (fail, scored int) {
		for _, r := range rs {
			if !r.Pass {
				fail++
				if r.Scored {
					scored++
				}
			}
		}
		return
	}
	var lines []string
	res := func(ok bool) string { return map[bool]string{true: "pass", false: "FAIL"}[ok] }
	for _, r := range theirsR {
		m := byID[r.ID]
		if !r.Pass || !m.Pass {
			lines = append(lines, fmt.Sprintf("  %-7s kubeadm %s  kforge %s  %s", r.ID, res(r.Pass), res(m.Pass), r.Text))
		}
	}
	kf, ks := count(theirsR)
	mf, ms := count(mineR)
	t.Logf("CIS Kubernetes Benchmark v1.12, automated checks on the first master's files (%d checks): kubeadm fails %d (%d scored), kforge fails %d (%d scored); the checks either fails:\n%s",
		len(theirsR), kf, ks, mf, ms, strings.Join(lines, "\n"))
	// docs/security.md's two; and 4.2.7: render reads no host, so it cannot know that a node's
	// name is its hostname and writes --hostname-override always (apply leaves it out where they
	// agree, as kubeadm does: docs/kubeadm-differences.md).
	documented := []string{"1.1.19", "1.2.11", "4.2.7"}
	for _, r := range mineR {
		if !r.Pass && !slices.Contains(documented, r.ID) {
			t.Errorf("kforge's files fail CIS %s (%s): %s", r.ID, r.Text, r.Got)
		}
	}
}
