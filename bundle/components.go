package bundle

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kforge/kforge/etcd/snapshotfile"
	"github.com/kforge/kforge/release"
)

// Versions is the manifest's record of the versions a bundle holds (manifest.json's
// "versions" object), taken from the catalogue's release the bundle was built for
// (release.For). It is the file format, kept apart from release.Release so that the catalogue
// can grow columns without changing the manifest.
type Versions struct {
	Kubernetes string `json:"kubernetes"`
	Etcd       string `json:"etcd"`       // e.g. v3.6.8
	CoreDNS    string `json:"coredns"`    // e.g. v1.14.2
	Pause      string `json:"pause"`      // the pause image tag, e.g. 3.10.2
	CNIPlugins string `json:"cniPlugins"` // github.com/containernetworking/plugins, e.g. v1.9.1
	Flannel    string `json:"flannel"`    // e.g. v0.28.10
	// The NetworkPolicy agent; empty in bundles made before kforge ran it.
	NetworkPolicy string `json:"networkPolicy,omitempty"` // sigs.k8s.io/kube-network-policies, e.g. v0.8.0
	// The resource metrics API's server; empty in bundles made before kforge ran it.
	MetricsServer string `json:"metricsServer,omitempty"` // sigs.k8s.io/metrics-server, e.g. v0.8.0
	// The local volumes' provisioner (and kforge's helper of it); empty in bundles made before
	// kforge ran it.
	LocalPath string `json:"localPath,omitempty"` // github.com/rancher/local-path-provisioner, e.g. v0.0.30
	// The container runtime; empty in bundles made before kforge installed it.
	Containerd string `json:"containerd,omitempty"` // e.g. v2.3.7
	Runc       string `json:"runc,omitempty"`       // e.g. v1.5.2
}

// versionsOf is the manifest's record of release r.
func versionsOf(r release.Release) Versions {
	return Versions{
		Kubernetes:    r.Kubernetes,
		Etcd:          r.Etcd,
		CoreDNS:       r.CoreDNS,
		Pause:         r.Pause,
		CNIPlugins:    r.CNIPlugins,
		Flannel:       r.Flannel,
		NetworkPolicy: r.NetworkPolicy,
		MetricsServer: r.MetricsServer,
		LocalPath:     r.LocalPath,
		Containerd:    r.Containerd,
		Runc:          r.Runc,
	}
}

// CNIPlugins are the CNI plugins a bundle holds, with their Go packages.
var CNIPlugins = map[string]string{
	"bridge":     "github.com/containernetworking/plugins/plugins/main/bridge",
	"host-local": "github.com/containernetworking/plugins/plugins/ipam/host-local",
	"loopback":   "github.com/containernetworking/plugins/plugins/main/loopback",
	"portmap":    "github.com/containernetworking/plugins/plugins/meta/portmap",
}

func etcdModule(v string) goModule {
	return goModule{
		Name:    "etcd",
		Version: v,
		Require: map[string]string{
			"go.etcd.io/etcd/server/v3":  v,
			"go.etcd.io/etcd/etcdctl/v3": v,
		},
		Packages: []string{"go.etcd.io/etcd/server/v3", "go.etcd.io/etcd/etcdctl/v3"},
		Output: map[string]string{
			"go.etcd.io/etcd/server/v3":  "etcd",
			"go.etcd.io/etcd/etcdctl/v3": "etcdctl",
		},
	}
}

func registryModule(v string) goModule {
	const mod = "github.com/distribution/distribution/v3"
	return goModule{
		Name:     "registry",
		Version:  v,
		Require:  map[string]string{mod: v},
		Packages: []string{mod + "/cmd/registry"},
		Ldflags:  "-X " + mod + "/version.version=" + v,
	}
}

func corednsModule(v string) goModule {
	return goModule{
		Name:     "coredns",
		Version:  v,
		Require:  map[string]string{"github.com/coredns/coredns": v},
		Packages: []string{"github.com/coredns/coredns"},
	}
}

func cniModule(v string) goModule {
	const mod = "github.com/containernetworking/plugins"
	var pkgs []string
	for _, name := range sortedKeys(CNIPlugins) {
		pkgs = append(pkgs, CNIPlugins[name])
	}
	return goModule{
		Name:     "cni-plugins",
		Version:  v,
		Require:  map[string]string{mod: v},
		Packages: pkgs,
		Ldflags:  "-X " + mod + "/pkg/utils/buildversion.BuildVersion=" + v,
	}
}

// containerdModule builds containerd 2 (the daemon, its runc shim and ctr) without cgo, as
// containerd's static release does; the btrfs and devmapper snapshotters, which need C, are left
// out (kforge uses overlayfs).
func containerdModule(v string) goModule {
	const mod = "github.com/containerd/containerd/v2"
	return goModule{
		Name:     "containerd",
		Version:  v,
		Require:  map[string]string{mod: v},
		Packages: []string{mod + "/cmd/containerd", mod + "/cmd/containerd-shim-runc-v2", mod + "/cmd/ctr"},
		Tags:     []string{"no_btrfs", "no_devmapper"},
		Ldflags:  "-X " + mod + "/version.Version=" + v + " -X " + mod + "/version.Package=github.com/containerd/containerd/v2",
	}
}

// runcModule builds runc statically with seccomp (libseccomp-dev) and without libpathrs (a
// Rust library Debian does not have; runc then uses its pure-Go path resolution).
func runcModule(v string) goModule {
	const mod = "github.com/opencontainers/runc"
	return goModule{
		Name:     "runc",
		Version:  v,
		Require:  map[string]string{mod: v},
		Packages: []string{mod},
		Tags:     []string{"seccomp", "urfave_cli_no_docs"},
		Cgo:      true,
		Ldflags:  "-X main.version=" + strings.TrimPrefix(v, "v"),
	}
}

//go:embed internal/pause/main.go
var pauseMain []byte

//go:embed daemon/daemon.go
var daemonSource []byte

// daemonPackage is bundle/daemon, which kforge's host daemons (apiproxy, vip) import.
var daemonPackage = map[string][]byte{"bundle/daemon/daemon.go": daemonSource}

//go:embed internal/apiproxy/main.go
var apiproxyMain []byte

//go:embed internal/apiproxy/proxy.go
var apiproxyProxy []byte

// TCPProxyVersion is the github.com/inetaf/tcpproxy the node-local API proxy is built with.
const TCPProxyVersion = "v0.0.0-20260515195445-c159a6051109"

// APIProxyFile is the bundle file of the node-local API proxy.
const APIProxyFile = "kforge-apiproxy"

// apiproxyModule builds kforge-apiproxy, the node-local API proxy of clusters without a
// controlPlaneEndpoint: internal/apiproxy's runner around github.com/inetaf/tcpproxy.
func apiproxyModule() goModule {
	return goModule{
		Name:      "apiproxy",
		Version:   TCPProxyVersion,
		Require:   map[string]string{"github.com/inetaf/tcpproxy": TCPProxyVersion},
		Local:     map[string][]byte{"main.go": apiproxyMain, "proxy.go": apiproxyProxy},
		LocalName: APIProxyFile,
		Kforge:    daemonPackage,
	}
}

//go:embed internal/vip/main.go
var vipMain []byte

//go:embed internal/vip/vip.go
var vipVIP []byte

// The modules the control plane's virtual IP runner is built with.
const (
	vipClientGoVersion = "v0.36.3"
	vipNetlinkVersion  = "v1.3.1"
	vipARPVersion      = "v0.0.0-20220512170110-6706a2966875"
)

// VIPFile is the bundle file of the control plane's virtual IP runner.
const VIPFile = "kforge-vip"

// vipModule builds kforge-vip, which holds a cluster's controlPlaneVIP on one master at a time
// (kube-vip's ARP mode): internal/vip's runner around k8s.io/client-go's leader election,
// github.com/vishvananda/netlink and github.com/mdlayher/arp.
func vipModule() goModule {
	return goModule{
		Name:    "vip",
		Version: "netlink-" + vipNetlinkVersion,
		Require: map[string]string{
			"k8s.io/client-go":               vipClientGoVersion,
			"github.com/vishvananda/netlink": vipNetlinkVersion,
			"github.com/mdlayher/arp":        vipARPVersion,
		},
		Local:     map[string][]byte{"main.go": vipMain, "vip.go": vipVIP},
		LocalName: VIPFile,
		Kforge:    daemonPackage,
	}
}

//go:embed internal/etcdsnap/main.go
var etcdsnapMain []byte

//go:embed internal/etcdsnap/snap.go
var etcdsnapSnap []byte

// The modules the masters' scheduled snapshots are taken with: etcd's client and etcdutl, as
// kforge's own go.mod has them (etcd/snapshotfile verifies with etcdutl's library).
const (
	etcdsnapEtcdVersion = "v3.6.16"
	etcdsnapZapVersion  = "v1.27.1"
)

// EtcdSnapshotFile is the bundle file of the masters' scheduled snapshot taker.
const EtcdSnapshotFile = "kforge-etcd-snapshot"

// etcdsnapModule builds kforge-etcd-snapshot, which the masters' timer runs (etcdSnapshots):
// internal/etcdsnap around go.etcd.io/etcd/client/v3, verifying with kforge's
// etcd/snapshotfile.
func etcdsnapModule() goModule {
	return goModule{
		Name:    "etcdsnap",
		Version: "etcd-" + etcdsnapEtcdVersion,
		Require: map[string]string{
			"go.etcd.io/etcd/client/v3":  etcdsnapEtcdVersion,
			"go.etcd.io/etcd/etcdutl/v3": etcdsnapEtcdVersion,
			"go.uber.org/zap":            etcdsnapZapVersion,
		},
		Local:     map[string][]byte{"main.go": etcdsnapMain, "snap.go": etcdsnapSnap},
		LocalName: EtcdSnapshotFile,
		Kforge:    map[string][]byte{"bundle/daemon/daemon.go": daemonSource, "etcd/snapshotfile/verify.go": snapshotfile.Source},
	}
}

// metricsServerModule builds metrics-server as its Makefile does: cmd/metrics-server, its
// version stamped into client-go's version package, which it reports.
func metricsServerModule(v string) goModule {
	const mod = "sigs.k8s.io/metrics-server"
	return goModule{
		Name:     "metrics-server",
		Version:  v,
		Require:  map[string]string{mod: v},
		Packages: []string{mod + "/cmd/metrics-server"},
		Ldflags:  "-X k8s.io/client-go/pkg/version.gitVersion=" + v,
	}
}

// LocalPathBinary is where the local volumes' provisioner is in its image, as in upstream's.
const LocalPathBinary = "/usr/bin/local-path-provisioner"

// localPathModule builds local-path-provisioner as its scripts/build does: the module's root
// package, its version stamped into main.VERSION.
func localPathModule(v string) goModule {
	const mod = "github.com/rancher/local-path-provisioner"
	return goModule{
		Name:     "local-path-provisioner",
		Version:  v,
		Require:  map[string]string{mod: v},
		Packages: []string{mod},
		Ldflags:  "-X main.VERSION=" + v,
	}
}

//go:embed internal/localpath/main.go
var localPathHelperMain []byte

// LocalPathHelperBinary is the program of the local volumes' helper image
// (internal/localpath), which the provisioner's config.json names as its setupCommand and
// teardownCommand.
const LocalPathHelperBinary = "/local-path-helper"

// localPathHelperModule builds local-path-helper, kforge's helper of local-path-provisioner v
// (internal/localpath: the standard library only).
func localPathHelperModule(v string) goModule {
	return goModule{
		Name:      "local-path-helper",
		Version:   v,
		Local:     map[string][]byte{"main.go": localPathHelperMain},
		LocalName: "local-path-helper",
	}
}

func pauseModule(tag string) goModule {
	return goModule{
		Name:      "pause",
		Version:   tag,
		Local:     map[string][]byte{"main.go": pauseMain},
		LocalName: "pause",
		Ldflags:   "-X main.version=" + tag,
	}
}

// flannelModule builds flanneld from a copy of flannel's main.go without two of its backends:
// tencentvpc (its cloud SDK modules are refused by the Go module proxy) and udp (cgo-only on
// amd64). vxlan, host-gw, wireguard and ipip remain.
func flannelModule(v string) goModule {
	const mod = "github.com/flannel-io/flannel"
	return goModule{
		Name:      "flannel",
		Version:   v,
		Require:   map[string]string{mod: v},
		LocalName: "flanneld",
		Ldflags:   "-X " + mod + "/pkg/version.Version=" + v,
		Prepare: func(ctx context.Context, r *goRunner, dir string) error {
			info, err := r.download(ctx, dir, mod+"@"+v)
			if err != nil {
				return err
			}
			main, err := os.ReadFile(filepath.Join(info.Dir, "main.go"))
			if err != nil {
				return err
			}
			patched, err := dropImports(main, mod+"/pkg/backend/tencentvpc", mod+"/pkg/backend/udp")
			if err != nil {
				return fmt.Errorf("flannel %s main.go: %w", v, err)
			}
			return os.WriteFile(filepath.Join(dir, "main.go"), patched, 0o644)
		},
	}
}

// dropImports removes the blank import lines of the given packages from a Go source file and
// fails if one is not there (the patch no longer fits that source).
func dropImports(src []byte, pkgs ...string) ([]byte, error) {
	lines := bytes.Split(src, []byte("\n"))
	for _, p := range pkgs {
		found := false
		kept := lines[:0:0]
		for _, l := range lines {
			t := strings.TrimSpace(string(l))
			if strings.HasPrefix(t, "_") && strings.HasSuffix(t, `"`+p+`"`) {
				found = true
				continue
			}
			kept = append(kept, l)
		}
		if !found {
			return nil, fmt.Errorf("no blank import of %s to drop", p)
		}
		lines = kept
	}
	return bytes.Join(lines, []byte("\n")), nil
}
