package lab

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// bareHidden are the packages of the base rootfs a bare host does not have: its container
// runtime.
var bareHidden = []string{"containerd", "runc"}

// whiteoutPackages hides every file and symlink of the given Debian packages of rootfs from a
// host whose overlay upper directory is upper, with overlayfs whiteouts (a 0/0 character
// device in the upper directory hides the lower file), and the units' enablement links. The
// host then has no trace of them but dpkg's own records.
func whiteoutPackages(rootfs, upper string, pkgs ...string) error {
	var paths []string
	for _, pkg := range pkgs {
		list := filepath.Join(rootfs, "var/lib/dpkg/info", pkg+".list")
		f, err := os.Open(list)
		if err != nil {
			return fmt.Errorf("the base rootfs has no package %s (%w)", pkg, err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			paths = append(paths, sc.Text())
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return err
		}
		links, _ := filepath.Glob(filepath.Join(rootfs, "etc/systemd/system/*.wants", pkg+".service"))
		for _, l := range links {
			paths = append(paths, strings.TrimPrefix(l, rootfs))
		}
	}
	root, err := filepath.EvalSymlinks(rootfs)
	if err != nil {
		return err
	}
	for _, p := range paths {
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil || fi.IsDir() {
			continue // directories stay: other packages share them
		}
		// The path as the host sees it: its directory may be a link (merged /usr: /lib ->
		// usr/lib), and a whiteout must sit at the real place in the upper dir.
		dir, err := filepath.EvalSymlinks(filepath.Join(root, filepath.Dir(p)))
		if err != nil || (dir != root && !strings.HasPrefix(dir, root+"/")) {
			return fmt.Errorf("whiteout %s: its directory is not inside the rootfs", p)
		}
		w := filepath.Join(upper, strings.TrimPrefix(dir, root), filepath.Base(p))
		if err := os.MkdirAll(filepath.Dir(w), 0o755); err != nil {
			return err
		}
		if err := syscall.Mknod(w, syscall.S_IFCHR, 0); err != nil && !os.IsExist(err) {
			return fmt.Errorf("whiteout %s: %w", p, err)
		}
	}
	return nil
}
