package cis

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"sigs.k8s.io/yaml"
)

// FromTree is what the checks would read on a host whose files are those of a rendered tree,
// once kubelet runs them: roots maps a path on the host ("/etc/kubernetes") to the local
// directory holding its files; extra adds files the tree does not hold (the kubelet unit a
// package installs, the etcd data directory kubelet or kubeadm makes). The static pods'
// command lines are the processes; kubelet's is the one its unit would run (--kubeconfig,
// --config and kubeadm-flags.env's flags). It is how the oracle test scores kubeadm's files
// against kforge's without a cluster.
func FromTree(name string, roots map[string]string, extra map[string]File) (*Host, error) {
	h := NewHost(name)
	for hostDir, local := range roots {
		err := filepath.WalkDir(local, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(local, p)
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			h.Files[path.Join(hostDir, filepath.ToSlash(rel))] = File{Mode: uint32(fi.Mode().Perm()), Owner: ownerOf(fi)}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	for p, f := range extra {
		h.Files[p] = f
	}
	read := func(hostPath string) ([]byte, error) {
		for hostDir, local := range roots {
			if rel, ok := strings.CutPrefix(hostPath, hostDir+"/"); ok {
				return os.ReadFile(filepath.Join(local, filepath.FromSlash(rel)))
			}
		}
		return nil, fs.ErrNotExist
	}
	for _, m := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"} {
		data, err := read(manifests + "/" + m + ".yaml")
		if err != nil {
			continue
		}
		var pod struct {
			Spec struct {
				Containers []struct {
					Command []string `json:"command"`
					Args    []string `json:"args"`
				} `json:"containers"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(data, &pod); err != nil || len(pod.Spec.Containers) == 0 {
			return nil, fmt.Errorf("%s.yaml: not a static pod (%v)", m, err)
		}
		c := pod.Spec.Containers[0]
		h.Procs[m] = append(c.Command, c.Args...)
	}
	if cfg, err := read("/var/lib/kubelet/config.yaml"); err == nil {
		args := []string{"/usr/bin/kubelet", "--kubeconfig=" + kubernetes + "/kubelet.conf", "--config=/var/lib/kubelet/config.yaml"}
		if env, err := read("/var/lib/kubelet/kubeadm-flags.env"); err == nil {
			args = append(args, envFlags(string(env))...)
		}
		h.Procs["kubelet"] = args
		if err := h.SetConfig("kubelet", cfg); err != nil {
			return nil, err
		}
	}
	if p, ok := h.Flag("kube-apiserver", "authentication-config"); ok {
		if data, err := read(p); err == nil {
			if err := h.SetConfig("authentication", data); err != nil {
				return nil, err
			}
		}
	}
	if p, ok := h.Flag("kube-apiserver", "encryption-provider-config"); ok {
		if data, err := read(p); err == nil {
			for _, m := range providerRE.FindAllStringSubmatch(string(data), -1) {
				h.EncryptionProviders = append(h.EncryptionProviders, m[1])
			}
		}
	}
	return h, nil
}

// providerRE finds a provider's name in an EncryptionConfiguration, as the gather script does.
var providerRE = regexp.MustCompile(`(?m)^ *- *(aescbc|aesgcm|secretbox|identity|kms): *.*$`)

// envFlags are the flags of KUBELET_KUBEADM_ARGS="..." in kubeadm-flags.env.
func envFlags(env string) []string {
	for _, l := range strings.Split(env, "\n") {
		if v, ok := strings.CutPrefix(l, "KUBELET_KUBEADM_ARGS="); ok {
			if u, err := strconv.Unquote(v); err == nil {
				v = u
			}
			return strings.Fields(v)
		}
	}
	return nil
}

// ownerOf is a file's "user:group", by name where the machine knows it.
func ownerOf(fi fs.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "?:?"
	}
	u, g := strconv.Itoa(int(st.Uid)), strconv.Itoa(int(st.Gid))
	if x, err := user.LookupId(u); err == nil {
		u = x.Username
	}
	if x, err := user.LookupGroupId(g); err == nil {
		g = x.Name
	}
	return u + ":" + g
}
