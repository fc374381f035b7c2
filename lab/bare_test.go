package lab

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// TestWhiteoutPackagesHidesEveryFileOfThePackage: each file and symlink a package lists, and its
// unit's enablement link, gets a whiteout in the upper dir; directories are left alone.
func TestWhiteoutPackagesHidesEveryFileOfThePackage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod of a whiteout needs root")
	}
	root, upper := t.TempDir(), t.TempDir()
	write := func(p, data string) {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(root, p), []byte(data), 0o644)
	}
	write("usr/bin/containerd", "elf")
	write("usr/bin/ctr", "elf")
	write("usr/lib/systemd/system/containerd.service", "[Unit]")
	os.Symlink("usr/lib", filepath.Join(root, "lib")) // merged /usr
	os.MkdirAll(filepath.Join(root, "etc/systemd/system/multi-user.target.wants"), 0o755)
	os.Symlink("/lib/systemd/system/containerd.service", filepath.Join(root, "etc/systemd/system/multi-user.target.wants/containerd.service"))
	write("usr/sbin/runc", "elf")
	write("var/lib/dpkg/info/containerd.list", "/.\n/usr\n/usr/bin\n/usr/bin/containerd\n/usr/bin/ctr\n/lib/systemd/system/containerd.service\n")
	write("var/lib/dpkg/info/runc.list", "/.\n/usr/sbin/runc\n")
	if err := whiteoutPackages(root, upper, "containerd", "runc"); err != nil {
		t.Fatal(err)
	}
	var got []string
	filepath.Walk(upper, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			st := fi.Sys().(*syscall.Stat_t)
			if fi.Mode()&os.ModeCharDevice == 0 || st.Rdev != 0 {
				t.Errorf("%s is not a whiteout: %v", p, fi.Mode())
			}
			rel, _ := filepath.Rel(upper, p)
			got = append(got, rel)
		}
		return nil
	})
	slices.Sort(got)
	want := []string{"etc/systemd/system/multi-user.target.wants/containerd.service", "usr/bin/containerd", "usr/bin/ctr", "usr/lib/systemd/system/containerd.service", "usr/sbin/runc"}
	if !slices.Equal(got, want) {
		t.Errorf("whiteouts %v\nwant %v", got, want)
	}
	if err := whiteoutPackages(root, upper, "docker"); err == nil {
		t.Error("a package the rootfs lacks was not an error")
	}
}
