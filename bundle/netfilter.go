package bundle

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// libDirs are where the build machine's dynamic loader finds shared libraries (Debian amd64).
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// netfilterPackages say which Debian packages provide the netfilter userspace; named in errors.
const netfilterPackages = "iptables nftables"

// netfilterFiles returns the iptables and nft userspace of the build machine as image files:
// xtables-nft-multi and xtables-legacy-multi with their iptables/ip6tables names, nft, every
// xtables extension, and every shared library any of them needs, found by reading their ELF
// dynamic sections (the extensions are loaded with dlopen, so their libraries — libm for
// `-m statistic`, libnetfilter_conntrack, libnfnetlink — are missing unless copied explicitly,
// and the failure only shows once a Service has two endpoints).
func netfilterFiles() ([]imageFile, error) {
	bins := []string{"/usr/sbin/xtables-nft-multi", "/usr/sbin/xtables-legacy-multi", "/usr/sbin/nft"}
	for _, b := range bins {
		if _, err := os.Stat(b); err != nil {
			return nil, fmt.Errorf("the kube-proxy and flannel images need %s from this machine: %w (install the Debian packages: apt-get install %s)", b, err, netfilterPackages)
		}
	}
	extDir := "/usr/lib/x86_64-linux-gnu/xtables"
	exts, err := filepath.Glob(filepath.Join(extDir, "*.so"))
	if err != nil || len(exts) == 0 {
		return nil, fmt.Errorf("no xtables extensions in %s (install the Debian package iptables)", extDir)
	}
	var files []imageFile
	for _, b := range bins {
		files = append(files, imageFile{Path: b, Src: b})
	}
	for _, e := range exts {
		files = append(files, imageFile{Path: e, Src: e})
	}
	libs, interp, err := sharedLibraries(append(slices.Clone(bins), exts...))
	if err != nil {
		return nil, err
	}
	files = append(files, imageFile{Path: interp, Src: interp})
	for _, l := range libs {
		files = append(files, imageFile{Path: l, Src: l})
	}
	for _, n := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"} {
		nft := strings.Replace(n, "tables", "tables-nft", 1)
		legacy := strings.Replace(n, "tables", "tables-legacy", 1)
		files = append(files,
			imageFile{Path: "/usr/sbin/" + n, Link: "xtables-nft-multi"},
			imageFile{Path: "/usr/sbin/" + nft, Link: "xtables-nft-multi"},
			imageFile{Path: "/usr/sbin/" + legacy, Link: "xtables-legacy-multi"},
		)
	}
	for _, f := range []string{"/etc/ethertypes", "/etc/protocols"} {
		if _, err := os.Stat(f); err == nil {
			files = append(files, imageFile{Path: f, Src: f})
		}
	}
	return files, nil
}

// sharedLibraries returns the paths of every shared library the ELF files need, directly or
// through other libraries, resolved in libDirs (as the loader would, without ld.so.cache), and
// the program interpreter.
func sharedLibraries(files []string) (libs []string, interp string, err error) {
	seen := map[string]bool{}
	queue := slices.Clone(files)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		f, err := elf.Open(p)
		if err != nil {
			return nil, "", fmt.Errorf("read ELF %s: %w", p, err)
		}
		needed, err := f.ImportedLibraries()
		if interp == "" {
			if prog := progInterp(f); prog != "" {
				interp = prog
			}
		}
		f.Close()
		if err != nil {
			return nil, "", fmt.Errorf("read ELF %s: %w", p, err)
		}
		for _, n := range needed {
			if seen[n] {
				continue
			}
			seen[n] = true
			path := ""
			for _, d := range libDirs {
				if _, err := os.Stat(filepath.Join(d, n)); err == nil {
					path = filepath.Join(d, n)
					break
				}
			}
			if path == "" {
				return nil, "", fmt.Errorf("%s needs %s, which is in none of %s", p, n, strings.Join(libDirs, ", "))
			}
			libs = append(libs, path)
			queue = append(queue, path)
		}
	}
	if interp == "" {
		return nil, "", fmt.Errorf("none of %s names a program interpreter", strings.Join(files, ", "))
	}
	slices.Sort(libs)
	return libs, interp, nil
}

func progInterp(f *elf.File) string {
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err == nil {
				return strings.TrimRight(string(b), "\x00")
			}
		}
	}
	return ""
}
