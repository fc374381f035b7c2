package cis

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Target is the part of the benchmark a check belongs to, and so the hosts it runs on.
type Target string

const (
	Master       Target = "master"       // 1.x: hosts running kube-apiserver
	Etcd         Target = "etcd"         // 2.x: hosts running etcd
	ControlPlane Target = "controlplane" // 3.x: hosts running kube-apiserver
	Node         Target = "node"         // 4.x: every host running kubelet
)

// Check is one automated check of the benchmark.
type Check struct {
	ID     string
	Target Target
	Text   string
	// Scored checks count towards the benchmark's score; the others are its "Manual" checks
	// whose audit is automated all the same.
	Scored bool
	eval   func(h *Host) (bool, string)
}

// Result is one check on one host.
type Result struct {
	Host   string `json:"host"`
	ID     string `json:"id"`
	Text   string `json:"text"`
	Scored bool   `json:"scored"`
	Pass   bool   `json:"pass"`
	// Got says what was found.
	Got string `json:"got"`
	// Accepted, on a failed check kforge fails on purpose, says why (Accepted).
	Accepted string `json:"accepted,omitempty"`
}

// Accepted are the checks a kforge cluster fails on purpose, with why; docs/security.md lists
// the same, at more length.
var Accepted = map[string]string{
	"1.1.19": "etcd runs as its own user (1.1.12), which must read its keys: they are that user's",
	"1.2.11": "AlwaysPullImages would keep pods from starting while no registry answers; kforge's nodes take their images from the bundle",
}

// Hosts' well-known paths, as a kubeadm-style cluster (kubeadm's and kforge's) has them; the
// files a process names are read from its command line.
const (
	manifests  = "/etc/kubernetes/manifests"
	kubernetes = "/etc/kubernetes"
	pkiDir     = "/etc/kubernetes/pki"
	cniDir     = "/etc/cni/net.d"
)

// KubeletUnitFiles are where a kubelet's systemd unit and drop-ins may be.
var KubeletUnitFiles = []string{"/etc/systemd/system/kubelet.service", "/lib/systemd/system/kubelet.service", "/usr/lib/systemd/system/kubelet.service"}

// KubeletDropInDirs are the directories of a kubelet unit's drop-ins.
var KubeletDropInDirs = []string{"/etc/systemd/system/kubelet.service.d", "/usr/lib/systemd/system/kubelet.service.d"}

// GatherInputs are the gather script's inputs: the files and the directories it stats.
func GatherInputs() (files, trees []string) {
	files = append([]string{
		manifests + "/kube-apiserver.yaml", manifests + "/kube-controller-manager.yaml", manifests + "/kube-scheduler.yaml", manifests + "/etcd.yaml",
		kubernetes + "/admin.conf", kubernetes + "/super-admin.conf", kubernetes + "/scheduler.conf", kubernetes + "/controller-manager.conf",
		kubernetes + "/proxy.conf",
	}, KubeletUnitFiles...)
	return files, append([]string{pkiDir, cniDir}, KubeletDropInDirs...)
}

// StrongCiphers are the TLS cipher suites the benchmark accepts for the API server (1.2.29).
var StrongCiphers = []string{"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
	"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
	"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
	"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"}

// StrongKubeletCiphers are the ones it accepts for kubelets (4.2.12).
var StrongKubeletCiphers = []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
	"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
	"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}

// HealthPaths are the only paths where anonymous requests may be let in for 1.2.1 to pass.
var HealthPaths = []string{"/healthz", "/livez", "/readyz"}

// Checks is the benchmark's automated checks, in its order.
func Checks() []Check { return checks }

var checks = []Check{
	perm("1.1.1", "API server pod specification file permissions are 600 or more restrictive", manifests+"/kube-apiserver.yaml", 0o600),
	owner("1.1.2", "API server pod specification file ownership is root:root", manifests+"/kube-apiserver.yaml"),
	perm("1.1.3", "controller manager pod specification file permissions are 600 or more restrictive", manifests+"/kube-controller-manager.yaml", 0o600),
	owner("1.1.4", "controller manager pod specification file ownership is root:root", manifests+"/kube-controller-manager.yaml"),
	perm("1.1.5", "scheduler pod specification file permissions are 600 or more restrictive", manifests+"/kube-scheduler.yaml", 0o600),
	owner("1.1.6", "scheduler pod specification file ownership is root:root", manifests+"/kube-scheduler.yaml"),
	perm("1.1.7", "etcd pod specification file permissions are 600 or more restrictive", manifests+"/etcd.yaml", 0o600),
	owner("1.1.8", "etcd pod specification file ownership is root:root", manifests+"/etcd.yaml"),
	unscored(files("1.1.9", Master, "Container Network Interface file permissions are 600 or more restrictive", under(cniDir, false, ""), modeAtMost(0o600))),
	unscored(files("1.1.10", Master, "Container Network Interface file ownership is root:root", under(cniDir, false, ""), ownedBy("root:root"))),
	files("1.1.11", Master, "etcd data directory permissions are 700 or more restrictive", flagFile("etcd", "data-dir"), modeAtMost(0o700)),
	files("1.1.12", Master, "etcd data directory ownership is etcd:etcd", flagFile("etcd", "data-dir"), ownedBy("etcd:etcd")),
	files("1.1.13", Master, "default administrative credential file permissions are 600", paths(kubernetes+"/admin.conf", kubernetes+"/super-admin.conf"), modeAtMost(0o600)),
	files("1.1.14", Master, "default administrative credential file ownership is root:root", paths(kubernetes+"/admin.conf", kubernetes+"/super-admin.conf"), ownedBy("root:root")),
	perm("1.1.15", "scheduler.conf file permissions are 600 or more restrictive", kubernetes+"/scheduler.conf", 0o600),
	owner("1.1.16", "scheduler.conf file ownership is root:root", kubernetes+"/scheduler.conf"),
	perm("1.1.17", "controller-manager.conf file permissions are 600 or more restrictive", kubernetes+"/controller-manager.conf", 0o600),
	owner("1.1.18", "controller-manager.conf file ownership is root:root", kubernetes+"/controller-manager.conf"),
	files("1.1.19", Master, "Kubernetes PKI directory and file ownership is root:root", under(pkiDir, true, ""), ownedBy("root:root")),
	unscored(files("1.1.20", Master, "Kubernetes PKI certificate file permissions are 644 or more restrictive", under(pkiDir, false, ".crt"), modeAtMost(0o644))),
	unscored(files("1.1.21", Master, "Kubernetes PKI key file permissions are 600", under(pkiDir, false, ".key"), modeAtMost(0o600))),

	unscored(flag("1.2.1", Master, "--anonymous-auth is false", "kube-apiserver", anonymousOff)),
	flag("1.2.2", Master, "--token-auth-file is not set", "kube-apiserver", unset("token-auth-file")),
	unscored(flag("1.2.3", Master, "DenyServiceExternalIPs admission is set", "kube-apiserver", listHas("enable-admission-plugins", "DenyServiceExternalIPs"))),
	flag("1.2.4", Master, "--kubelet-client-certificate and --kubelet-client-key are set", "kube-apiserver", set("kubelet-client-certificate", "kubelet-client-key")),
	flag("1.2.5", Master, "--kubelet-certificate-authority is set", "kube-apiserver", set("kubelet-certificate-authority")),
	flag("1.2.6", Master, "--authorization-mode is not AlwaysAllow", "kube-apiserver", listLacks("authorization-mode", "AlwaysAllow", false)),
	flag("1.2.7", Master, "--authorization-mode includes Node", "kube-apiserver", listHas("authorization-mode", "Node")),
	flag("1.2.8", Master, "--authorization-mode includes RBAC", "kube-apiserver", listHas("authorization-mode", "RBAC")),
	unscored(flag("1.2.9", Master, "admission plugin EventRateLimit is set", "kube-apiserver", listHas("enable-admission-plugins", "EventRateLimit"))),
	flag("1.2.10", Master, "admission plugin AlwaysAdmit is not set", "kube-apiserver", listLacks("enable-admission-plugins", "AlwaysAdmit", true)),
	unscored(flag("1.2.11", Master, "admission plugin AlwaysPullImages is set", "kube-apiserver", listHas("enable-admission-plugins", "AlwaysPullImages"))),
	flag("1.2.12", Master, "admission plugin ServiceAccount is not disabled", "kube-apiserver", listLacks("disable-admission-plugins", "ServiceAccount", true)),
	flag("1.2.13", Master, "admission plugin NamespaceLifecycle is not disabled", "kube-apiserver", listLacks("disable-admission-plugins", "NamespaceLifecycle", true)),
	flag("1.2.14", Master, "admission plugin NodeRestriction is set", "kube-apiserver", listHas("enable-admission-plugins", "NodeRestriction")),
	flag("1.2.15", Master, "--profiling is false", "kube-apiserver", equals("profiling", "false", false)),
	flag("1.2.16", Master, "--audit-log-path is set", "kube-apiserver", set("audit-log-path")),
	flag("1.2.17", Master, "--audit-log-maxage is 30 or more", "kube-apiserver", atLeast("audit-log-maxage", 30)),
	flag("1.2.18", Master, "--audit-log-maxbackup is 10 or more", "kube-apiserver", atLeast("audit-log-maxbackup", 10)),
	flag("1.2.19", Master, "--audit-log-maxsize is 100 or more", "kube-apiserver", atLeast("audit-log-maxsize", 100)),
	flag("1.2.21", Master, "--service-account-lookup is true", "kube-apiserver", equals("service-account-lookup", "true", true)),
	flag("1.2.22", Master, "--service-account-key-file is set", "kube-apiserver", set("service-account-key-file")),
	flag("1.2.23", Master, "--etcd-certfile and --etcd-keyfile are set", "kube-apiserver", set("etcd-certfile", "etcd-keyfile")),
	flag("1.2.24", Master, "--tls-cert-file and --tls-private-key-file are set", "kube-apiserver", set("tls-cert-file", "tls-private-key-file")),
	flag("1.2.25", Master, "--client-ca-file is set", "kube-apiserver", set("client-ca-file")),
	flag("1.2.26", Master, "--etcd-cafile is set", "kube-apiserver", set("etcd-cafile")),
	unscored(flag("1.2.27", Master, "--encryption-provider-config is set", "kube-apiserver", set("encryption-provider-config"))),
	unscored(Check{ID: "1.2.28", Target: Master, Text: "encryption providers are appropriately configured (aescbc, kms or secretbox first)", eval: encryptionFirst}),
	unscored(flag("1.2.29", Master, "the API server only uses strong cryptographic ciphers", "kube-apiserver", ciphers("tls-cipher-suites", StrongCiphers))),
	flag("1.2.30", Master, "--service-account-extend-token-expiration is false", "kube-apiserver", equals("service-account-extend-token-expiration", "false", false)),
	unscored(flag("1.3.1", Master, "--terminated-pod-gc-threshold is set", "kube-controller-manager", set("terminated-pod-gc-threshold"))),
	flag("1.3.2", Master, "controller manager --profiling is false", "kube-controller-manager", equals("profiling", "false", false)),
	flag("1.3.3", Master, "--use-service-account-credentials is true", "kube-controller-manager", notEquals("use-service-account-credentials", "false")),
	flag("1.3.4", Master, "--service-account-private-key-file is set", "kube-controller-manager", set("service-account-private-key-file")),
	flag("1.3.5", Master, "--root-ca-file is set", "kube-controller-manager", set("root-ca-file")),
	flag("1.3.6", Master, "RotateKubeletServerCertificate is not turned off", "kube-controller-manager", listLacks("feature-gates", "RotateKubeletServerCertificate=false", true)),
	flag("1.3.7", Master, "controller manager --bind-address is 127.0.0.1", "kube-controller-manager", equals("bind-address", "127.0.0.1", true)),
	flag("1.4.1", Master, "scheduler --profiling is false", "kube-scheduler", equals("profiling", "false", false)),
	flag("1.4.2", Master, "scheduler --bind-address is 127.0.0.1", "kube-scheduler", equals("bind-address", "127.0.0.1", true)),

	flag("2.1", Etcd, "--cert-file and --key-file are set", "etcd", set("cert-file", "key-file")),
	flag("2.2", Etcd, "--client-cert-auth is true", "etcd", equals("client-cert-auth", "true", false)),
	flag("2.3", Etcd, "--auto-tls is not true", "etcd", equals("auto-tls", "false", true)),
	flag("2.4", Etcd, "--peer-cert-file and --peer-key-file are set", "etcd", set("peer-cert-file", "peer-key-file")),
	flag("2.5", Etcd, "--peer-client-cert-auth is true", "etcd", equals("peer-client-cert-auth", "true", false)),
	flag("2.6", Etcd, "--peer-auto-tls is not true", "etcd", equals("peer-auto-tls", "false", true)),
	unscored(Check{ID: "2.7", Target: Etcd, Text: "a unique Certificate Authority is used for etcd", eval: uniqueEtcdCA}),

	unscored(flag("3.2.1", ControlPlane, "a minimal audit policy is created (--audit-policy-file)", "kube-apiserver", set("audit-policy-file"))),

	files("4.1.1", Node, "kubelet service file permissions are 600 or more restrictive", kubeletUnits, modeAtMost(0o600)),
	optional(files("4.1.2", Node, "kubelet service file ownership is root:root", kubeletUnits, ownedBy("root:root"))),
	unscored(optional(files("4.1.3", Node, "proxy kubeconfig file permissions, if it exists, are 600 or more restrictive", proxyKubeconfig, modeAtMost(0o600)))),
	unscored(optional(files("4.1.4", Node, "proxy kubeconfig file ownership, if it exists, is root:root", proxyKubeconfig, ownedBy("root:root")))),
	files("4.1.5", Node, "--kubeconfig kubelet.conf file permissions are 600 or more restrictive", flagFile("kubelet", "kubeconfig"), modeAtMost(0o600)),
	files("4.1.6", Node, "--kubeconfig kubelet.conf file ownership is root:root", flagFile("kubelet", "kubeconfig"), ownedBy("root:root")),
	unscored(files("4.1.7", Node, "certificate authorities file permissions are 644 or more restrictive", clientCAFile, modeAtMost(0o644))),
	unscored(files("4.1.8", Node, "client certificate authorities file ownership is root:root", clientCAFile, ownedBy("root:root"))),
	files("4.1.9", Node, "kubelet config.yaml file permissions are 600 or more restrictive", flagFile("kubelet", "config"), modeAtMost(0o600)),
	files("4.1.10", Node, "kubelet config.yaml file ownership is root:root", flagFile("kubelet", "config"), ownedBy("root:root")),
	kubelet("4.2.1", "--anonymous-auth is false", "anonymous-auth", "authentication.anonymous.enabled", is("false", false)),
	kubelet("4.2.2", "--authorization-mode is not AlwaysAllow", "authorization-mode", "authorization.mode", isNot("AlwaysAllow", false)),
	kubelet("4.2.3", "--client-ca-file is set", "client-ca-file", "authentication.x509.clientCAFile", present),
	unscored(kubelet("4.2.4", "--read-only-port is 0 if set", "read-only-port", "readOnlyPort", is("0", true))),
	unscored(kubelet("4.2.5", "--streaming-connection-idle-timeout is not 0", "streaming-connection-idle-timeout", "streamingConnectionIdleTimeout", isNot("0", true))),
	kubelet("4.2.6", "--make-iptables-util-chains is true", "make-iptables-util-chains", "makeIPTablesUtilChains", is("true", true)),
	unscored(kubelet("4.2.7", "--hostname-override is not set", "hostname-override", "", absent)),
	unscored(kubelet("4.2.8", "eventRecordQPS ensures appropriate event capture (0 or more)", "event-qps", "eventRecordQPS", nonNegative)),
	unscored(kubelet("4.2.9", "--tls-cert-file and --tls-private-key-file are set", "tls-cert-file", "tlsCertFile", present, "tls-private-key-file", "tlsPrivateKeyFile")),
	kubelet("4.2.10", "--rotate-certificates is not false", "rotate-certificates", "rotateCertificates", is("true", true)),
	unscored(kubelet("4.2.11", "RotateKubeletServerCertificate is not false", "", "featureGates.RotateKubeletServerCertificate", isNot("false", true))),
	unscored(kubelet("4.2.12", "the kubelet only uses strong cryptographic ciphers", "tls-cipher-suites", "tlsCipherSuites", validElements(StrongKubeletCiphers))),
	unscored(kubelet("4.2.13", "a limit is set on pod PIDs", "pod-max-pids", "podPidsLimit", present)),
	unscored(kubelet("4.2.14", "--seccomp-default is set", "seccomp-default", "seccompDefault", present)),
	{ID: "4.3.1", Target: Node, Text: "the kube-proxy metrics service is bound to localhost", Scored: true, eval: proxyMetricsLocal},
}

// Run runs every check that applies to h (by the processes it runs).
func Run(h *Host) []Result {
	var out []Result
	for _, c := range checks {
		if !c.Target.on(h) {
			continue
		}
		ok, got := c.eval(h)
		r := Result{Host: h.Name, ID: c.ID, Text: c.Text, Scored: c.Scored, Pass: ok, Got: got}
		if !ok {
			r.Accepted = Accepted[c.ID]
		}
		out = append(out, r)
	}
	return out
}

// on says whether the checks of t apply to h: the master and control-plane sections where
// kube-apiserver runs or has a manifest, etcd's where etcd does, the node section where
// kubelet runs.
func (t Target) on(h *Host) bool {
	switch t {
	case Master, ControlPlane:
		_, run := h.Procs["kube-apiserver"]
		_, file := h.Files[manifests+"/kube-apiserver.yaml"]
		return run || file
	case Etcd:
		_, run := h.Procs["etcd"]
		_, file := h.Files[manifests+"/etcd.yaml"]
		return run || file
	default:
		_, run := h.Procs["kubelet"]
		return run
	}
}

func unscored(c Check) Check { c.Scored = false; return c }

// optional passes a file check when none of its files exists (kube-bench's "if it exists").
func optional(c Check) Check {
	e := c.eval
	c.eval = func(h *Host) (bool, string) {
		ok, got := e(h)
		if got == noFile {
			return true, "no such file"
		}
		return ok, got
	}
	return c
}

const noFile = "no file found"

// files checks every file of list on h with test.
func files(id string, t Target, text string, list func(h *Host) []string, test func(File) (bool, string)) Check {
	return Check{ID: id, Target: t, Text: text, Scored: true, eval: func(h *Host) (bool, string) {
		var seen, bad []string
		for _, p := range list(h) {
			f, ok := h.Files[p]
			if !ok {
				continue
			}
			ok, got := test(f)
			seen = append(seen, p+" "+got)
			if !ok {
				bad = append(bad, p+" "+got)
			}
		}
		switch {
		case len(seen) == 0:
			return false, noFile
		case len(bad) > 0:
			return false, strings.Join(bad, ", ")
		case len(seen) > 3:
			return true, fmt.Sprintf("%d files", len(seen))
		}
		return true, strings.Join(seen, ", ")
	}}
}

func perm(id, text, p string, max uint32) Check {
	return files(id, Master, text, paths(p), modeAtMost(max))
}

func owner(id, text, p string) Check { return files(id, Master, text, paths(p), ownedBy("root:root")) }

func modeAtMost(max uint32) func(File) (bool, string) {
	return func(f File) (bool, string) { return f.Mode&^max == 0, fmt.Sprintf("%o", f.Mode) }
}

func ownedBy(want string) func(File) (bool, string) {
	return func(f File) (bool, string) { return f.Owner == want, f.Owner }
}

func paths(ps ...string) func(*Host) []string { return func(*Host) []string { return ps } }

// under is every file under dir whose name ends in suffix, as find(1) lists them: with dir
// itself when self is set.
func under(dir string, self bool, suffix string) func(*Host) []string {
	return func(h *Host) []string {
		var out []string
		for p := range h.Files {
			if (self && p == dir) || strings.HasPrefix(p, dir+"/") && strings.HasSuffix(p, suffix) {
				out = append(out, p)
			}
		}
		sort.Strings(out)
		return out
	}
}

// flagFile is the file process proc names with --flag.
func flagFile(proc, flag string) func(*Host) []string {
	return func(h *Host) []string {
		if v, ok := h.Flag(proc, flag); ok {
			return []string{v}
		}
		return nil
	}
}

func kubeletUnits(h *Host) []string {
	out := slices.Clone(KubeletUnitFiles)
	for _, d := range KubeletDropInDirs {
		out = append(out, under(d, false, ".conf")(h)...)
	}
	return out
}

func proxyKubeconfig(h *Host) []string {
	out := []string{kubernetes + "/proxy.conf"}
	if v, ok := h.Flag("kube-proxy", "kubeconfig"); ok {
		out = append(out, v)
	}
	return out
}

func clientCAFile(h *Host) []string {
	if v, ok := h.Setting("kubelet", "client-ca-file", "authentication.x509.clientCAFile"); ok {
		return []string{v}
	}
	return nil
}

// flag checks process proc's flags with test; a process that does not run fails.
func flag(id string, t Target, text, proc string, test func(h *Host, proc string) (bool, string)) Check {
	return Check{ID: id, Target: t, Text: text, Scored: true, eval: func(h *Host) (bool, string) {
		if _, ok := h.Procs[proc]; !ok {
			return false, proc + " is not running"
		}
		return test(h, proc)
	}}
}

func show(name, v string, ok bool) string {
	if !ok {
		return "--" + name + " not set"
	}
	return "--" + name + "=" + v
}

func set(names ...string) func(*Host, string) (bool, string) {
	return func(h *Host, proc string) (bool, string) {
		var got []string
		all := true
		for _, n := range names {
			v, ok := h.Flag(proc, n)
			all = all && ok && v != ""
			got = append(got, show(n, v, ok))
		}
		return all, strings.Join(got, " ")
	}
}

func unset(name string) func(*Host, string) (bool, string) {
	return func(h *Host, proc string) (bool, string) {
		v, ok := h.Flag(proc, name)
		return !ok, show(name, v, ok)
	}
}

// equals passes when --name is want, or is not set and unsetOK.
func equals(name, want string, unsetOK bool) func(*Host, string) (bool, string) {
	return func(h *Host, proc string) (bool, string) {
		v, ok := h.Flag(proc, name)
		if !ok {
			return unsetOK, show(name, v, ok)
		}
		return strings.EqualFold(v, want), show(name, v, ok)
	}
}

func notEquals(name, bad string) func(*Host, string) (bool, string) {
	return func(h *Host, proc string) (bool, string) {
		v, ok := h.Flag(proc, name)
		return !strings.EqualFold(v, bad), show(name, v, ok)
	}
}

func atLeast(name string, min int) func(*Host, string) (bool, string) {
	return func(h *Host, proc string) (bool, string) {
		v, ok := h.Flag(proc, name)
		n, err := strconv.Atoi(v)
		return ok && err == nil && n >= min, show(name, v, ok)
	}
}

func list(v string) []string { return strings.Split(v, ",") }

func listHas(name, want string) func(*Host, string) (bool, string) {
	return func(h *Host, proc string) (bool, string) {
		v, ok := h.Flag(proc, name)
		return ok && slices.Contains(list(v), want), show(name, v, ok)
	}
}

// listLacks passes when --name's list does not hold bad, or is not set and unsetOK.
func listLacks(name, bad string, unsetOK bool) func(*Host, string) (bool, string) {
	return func(h *Host, proc string) (bool, string) {
		v, ok := h.Flag(proc, name)
		if !ok {
			return unsetOK, show(name, v, ok)
		}
		return !slices.Contains(list(v), bad), show(name, v, ok)
	}
}

// ciphers passes when every suite of --name is in strong (and some are set).
func ciphers(name string, strong []string) func(*Host, string) (bool, string) {
	return func(h *Host, proc string) (bool, string) {
		v, ok := h.Flag(proc, name)
		if !ok || v == "" {
			return false, show(name, v, ok)
		}
		for _, c := range list(v) {
			if !slices.Contains(strong, c) {
				return false, "weak suite " + c
			}
		}
		return true, fmt.Sprintf("%d strong suites", len(list(v)))
	}
}

// anonymousOff: --anonymous-auth=false, or an authentication configuration that lets
// anonymous requests in on the health checks only.
func anonymousOff(h *Host, proc string) (bool, string) {
	if v, ok := h.Flag(proc, "anonymous-auth"); ok {
		return v == "false", show("anonymous-auth", v, ok)
	}
	if _, ok := h.Flag(proc, "authentication-config"); !ok {
		return false, "--anonymous-auth not set (anonymous requests allowed everywhere)"
	}
	a, _ := h.Configs["authentication"]["anonymous"].(map[string]any)
	if a == nil || a["enabled"] != true {
		return true, "authentication configuration: anonymous off"
	}
	conds, _ := a["conditions"].([]any)
	var ps []string
	for _, c := range conds {
		m, _ := c.(map[string]any)
		p, _ := m["path"].(string)
		ps = append(ps, p)
	}
	for _, p := range ps {
		if !slices.Contains(HealthPaths, p) {
			return false, "anonymous requests allowed on " + p
		}
	}
	if len(ps) == 0 {
		return false, "anonymous requests allowed everywhere"
	}
	return true, "anonymous requests on " + strings.Join(ps, ", ") + " only"
}

func encryptionFirst(h *Host) (bool, string) {
	if len(h.EncryptionProviders) == 0 {
		return false, "no encryption providers found"
	}
	first := h.EncryptionProviders[0]
	return slices.Contains([]string{"aescbc", "kms", "secretbox"}, first), "providers " + strings.Join(h.EncryptionProviders, ", ")
}

// uniqueEtcdCA: etcd trusts a CA file of its own, not the cluster CA the API server's clients
// are verified with.
func uniqueEtcdCA(h *Host) (bool, string) {
	ca, ok := h.Flag("etcd", "trusted-ca-file")
	if !ok {
		return false, "--trusted-ca-file not set"
	}
	if api, ok := h.Flag("kube-apiserver", "client-ca-file"); ok && path.Clean(api) == path.Clean(ca) {
		return false, "etcd trusts the API server's client CA " + ca
	}
	return true, "--trusted-ca-file=" + ca
}

// kubelet checks a kubelet setting (its flag, else its configuration's field); more names a
// second flag and field that must pass too.
func kubelet(id, text, flagName, field string, test func(v string, ok bool) (bool, string), more ...string) Check {
	return Check{ID: id, Target: Node, Text: text, Scored: true, eval: func(h *Host) (bool, string) {
		if _, ok := h.Procs["kubelet"]; !ok {
			return false, "kubelet is not running"
		}
		pairs := append([]string{flagName, field}, more...)
		var got []string
		all := true
		for i := 0; i+1 < len(pairs); i += 2 {
			v, ok := h.Setting("kubelet", pairs[i], pairs[i+1])
			pass, g := test(v, ok)
			all = all && pass
			name := pairs[i+1]
			if name == "" {
				name = "--" + pairs[i]
			}
			got = append(got, name+": "+g)
		}
		return all, strings.Join(got, "; ")
	}}
}

func is(want string, unsetOK bool) func(string, bool) (bool, string) {
	return func(v string, ok bool) (bool, string) {
		if !ok {
			return unsetOK, "not set"
		}
		return strings.EqualFold(v, want), v
	}
}

func isNot(bad string, unsetOK bool) func(string, bool) (bool, string) {
	return func(v string, ok bool) (bool, string) {
		if !ok {
			return unsetOK, "not set"
		}
		return !strings.EqualFold(v, bad), v
	}
}

func present(v string, ok bool) (bool, string) {
	if !ok || v == "" {
		return false, "not set"
	}
	return true, v
}

func absent(v string, ok bool) (bool, string) {
	if ok {
		return false, v
	}
	return true, "not set"
}

func nonNegative(v string, ok bool) (bool, string) {
	if !ok {
		return true, "not set"
	}
	n, err := strconv.ParseFloat(v, 64)
	return err == nil && n >= 0, v
}

func validElements(strong []string) func(string, bool) (bool, string) {
	return func(v string, ok bool) (bool, string) {
		if !ok || v == "" {
			return false, "not set"
		}
		for _, c := range list(v) {
			if !slices.Contains(strong, c) {
				return false, "weak suite " + c
			}
		}
		return true, fmt.Sprintf("%d strong suites", len(list(v)))
	}
}

func proxyMetricsLocal(h *Host) (bool, string) {
	v, ok := h.Setting("kube-proxy", "metrics-bind-address", "metricsBindAddress")
	if !ok || v == "" {
		if _, run := h.Procs["kube-proxy"]; !run {
			return true, "kube-proxy is not running"
		}
		return true, "not set (127.0.0.1:10249)"
	}
	return strings.Contains(v, "127.0.0.1"), v
}
