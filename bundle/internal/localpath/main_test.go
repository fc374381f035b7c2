package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// helper runs the command with args and returns its exit code, stdout and stderr.
func helper(args ...string) (int, string, string) {
	var out, errs bytes.Buffer
	code := run(args, &out, &errs)
	return code, out.String(), errs.String()
}

// TestCreateThenDelete: create makes the volume's directory, parents included, with mode 0777
// whatever the umask (upstream's mkdir -m 0777 -p), and again changes nothing; delete removes it
// with what pods wrote below it, a directory only its owner may enter included, and a second
// delete has nothing to do. Both exit 0, as the provisioner waits for the helper pod to succeed.
func TestCreateThenDelete(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	base := t.TempDir()
	vol := filepath.Join(base, "local-path-provisioner", "pvc-1_default_data")
	for range 2 {
		code, out, errs := helper("-p", vol, "-s", "1073741824", "-m", "Filesystem", "-a", "create")
		if code != 0 || out != "created "+vol+" (mode 0777)\n" || errs != "" {
			t.Fatalf("create: exit %d, %q, %q", code, out, errs)
		}
		st, err := os.Stat(vol)
		if err != nil || !st.IsDir() || st.Mode().Perm() != 0o777 {
			t.Fatalf("after create: %v, %v; want a directory of mode 0777", st.Mode(), err)
		}
	}
	if err := os.MkdirAll(filepath.Join(vol, "private", "deep"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol, "private", "deep", "data"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(vol, "private"), 0o500); err != nil {
		t.Fatal(err)
	}
	code, out, errs := helper("-p", vol, "-s", "1073741824", "-m", "Filesystem", "-a", "delete")
	if code != 0 || out != "removed "+vol+"\n" || errs != "" {
		t.Fatalf("delete: exit %d, %q, %q", code, out, errs)
	}
	if _, err := os.Lstat(vol); !os.IsNotExist(err) {
		t.Errorf("after delete: %v; want it gone", err)
	}
	if _, err := os.Stat(filepath.Dir(vol)); err != nil {
		t.Errorf("delete removed the base directory: %v", err)
	}
	code, out, _ = helper("-p", vol, "-s", "0", "-m", "Filesystem", "-a", "delete")
	if code != 0 || out != vol+" was not there\n" {
		t.Errorf("second delete: exit %d, %q", code, out)
	}
}

// TestRefuses: what is not a volume's directory, another action, a block volume and arguments
// the provisioner never gives are refused by name, and nothing is made or removed.
func TestRefuses(t *testing.T) {
	base := t.TempDir()
	keep := filepath.Join(base, "keep")
	if err := os.Mkdir(keep, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"-p", "data/pvc-1", "-s", "0", "-m", "Filesystem", "-a", "create"}, 1, `-p "data/pvc-1": the volume's directory must be an absolute path`},
		{[]string{"-p", "/", "-s", "0", "-m", "Filesystem", "-a", "delete"}, 1, `-p "/": the volume's directory cannot be /`},
		{[]string{"-p", "//", "-s", "0", "-m", "Filesystem", "-a", "delete"}, 1, "cannot be /"},
		{[]string{"-p", keep + "/x/../..", "-s", "0", "-m", "Filesystem", "-a", "delete"}, 1, "must not have a .. element"},
		{[]string{"-p", "", "-s", "0", "-m", "Filesystem", "-a", "delete"}, 1, "no -p PATH"},
		{[]string{"-p", keep, "-s", "0", "-m", "Filesystem", "-a", "move"}, 1, `-a "move": the action is create or delete`},
		{[]string{"-p", keep, "-s", "0", "-m", "Filesystem"}, 1, `-a "": the action is create or delete`},
		{[]string{"-p", keep, "-s", "0", "-m", "Block", "-a", "delete"}, 1, `-m "Block" for ` + keep + `: kforge's local volumes are directories`},
		{[]string{"-p", keep, "-s", "-1", "-m", "Filesystem", "-a", "create"}, 1, "a size is not negative"},
		{[]string{"-p", keep, "-s", "big", "-m", "Filesystem", "-a", "delete"}, 2, `invalid value "big" for flag -s`},
		{[]string{"-p", keep, "-m", "Filesystem", "-a", "delete", "extra"}, 2, `unexpected argument "extra"`},
	} {
		code, out, errs := helper(c.args...)
		if code != c.code || out != "" || !strings.Contains(errs, c.msg) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d and %q", c.args, code, out, errs, c.code, c.msg)
		}
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("a refused run removed %s: %v", keep, err)
	}
}
