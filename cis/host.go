// Package cis checks a cluster's hosts against the automated checks of the CIS Kubernetes
// Benchmark v1.12 (master, etcd, control plane and node sections), with kforge's own code: the
// checks are read from the benchmark's text and kube-bench's public definitions
// (cfg/cis-1.12), not run by kube-bench. A Host is what the checks read of one host — its
// Kubernetes processes' command lines, the modes and owners of the files they name, kubelet's
// and kube-proxy's configuration — gathered over SSH by scripts/cis-gather.sh (Parse) or
// taken from files rendered for a host (the oracle test's kubeadm tree and kforge's).
package cis

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// Host is what the checks read of one host.
type Host struct {
	Name string
	// Procs are the command lines (argv) of the Kubernetes processes running, by name:
	// kube-apiserver, kube-controller-manager, kube-scheduler, etcd, kubelet, kube-proxy.
	Procs map[string][]string
	// Files are the modes and owners of the files the checks name, by path.
	Files map[string]File
	// Configs are the parsed configuration files, by name: kubelet, kube-proxy,
	// authentication (the API server's --authentication-config).
	Configs map[string]map[string]any
	// EncryptionProviders are the API server's encryption providers for Secrets, in order.
	EncryptionProviders []string
}

// File is one file's permission bits and owner ("root:root").
type File struct {
	Mode  uint32
	Owner string
}

// NewHost is an empty Host.
func NewHost(name string) *Host {
	return &Host{Name: name, Procs: map[string][]string{}, Files: map[string]File{}, Configs: map[string]map[string]any{}}
}

// Parse reads the gather script's output (scripts/cis-gather.sh) on host name.
func Parse(name string, out []byte) (*Host, error) {
	h := NewHost(name)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		bad := func(err error) error { return fmt.Errorf("host %s: cis gather line %d (%s): %v", name, n, f[0], err) }
		switch {
		case f[0] == "stat" && len(f) == 4:
			mode, err := strconv.ParseUint(f[1], 8, 32)
			if err != nil {
				return nil, bad(err)
			}
			h.Files[f[3]] = File{Mode: uint32(mode), Owner: f[2]}
		case f[0] == "proc" && len(f) == 3:
			b, err := base64.StdEncoding.DecodeString(f[2])
			if err != nil {
				return nil, bad(err)
			}
			h.Procs[f[1]] = strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		case f[0] == "conf" && len(f) == 3:
			b, err := base64.StdEncoding.DecodeString(f[2])
			if err != nil {
				return nil, bad(err)
			}
			if err := h.SetConfig(f[1], b); err != nil {
				return nil, bad(err)
			}
		case f[0] == "encprovider" && len(f) == 2:
			h.EncryptionProviders = append(h.EncryptionProviders, f[1])
		default:
			return nil, bad(fmt.Errorf("unexpected %q", sc.Text()))
		}
	}
	return h, sc.Err()
}

// SetConfig parses configuration file data (YAML or JSON) as config name.
func (h *Host) SetConfig(name string, data []byte) error {
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		return err
	}
	h.Configs[name] = m
	return nil
}

// Flag is the value of --name on process proc's command line, and whether it is there (the
// last one wins, as with Go's flag packages).
func (h *Host) Flag(proc, name string) (string, bool) {
	args, ok := h.Procs[proc]
	if !ok {
		return "", false
	}
	val, set := "", false
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--"+name+"="):
			val, set = strings.TrimPrefix(a, "--"+name+"="), true
		case a == "--"+name && i+1 < len(args) && !strings.HasPrefix(args[i+1], "--"):
			val, set = args[i+1], true
		case a == "--"+name:
			val, set = "true", true
		}
	}
	return val, set
}

// Config is the value at path (dot-separated keys) of configuration name, as text ("" and
// false when it is not set).
func (h *Host) Config(name, path string) (string, bool) {
	var v any = h.Configs[name]
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		if v, ok = m[k]; !ok {
			return "", false
		}
	}
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		return x, true
	case []any:
		var s []string
		for _, e := range x {
			s = append(s, fmt.Sprint(e))
		}
		return strings.Join(s, ","), true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	default:
		return fmt.Sprint(x), true
	}
}

// Setting is a kubelet setting as kubelet sees it: its command-line flag, which wins, or else
// its configuration file's field (kube-bench's "flag" and "path").
func (h *Host) Setting(proc, flag, path string) (string, bool) {
	if v, ok := h.Flag(proc, flag); ok {
		return v, true
	}
	conf := map[string]string{"kubelet": "kubelet", "kube-proxy": "kube-proxy"}[proc]
	if conf == "" || path == "" {
		return "", false
	}
	return h.Config(conf, path)
}
