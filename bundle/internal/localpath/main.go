// Command local-path-helper makes and removes the local volumes' directories on a node. It is
// what local-path-provisioner's helper pods run (its config.json's setupCommand and
// teardownCommand), from kforge's image kforge.dev/local-path-helper, which holds nothing else:
// no shell, no busybox.
//
//	local-path-helper -p PATH -s SIZE -m MODE -a create|delete
//
// create makes PATH with mode 0777, as upstream's setup script does (mkdir -m 0777 -p), so that
// a pod of any user can write there; delete removes PATH and everything below it, as upstream's
// teardown does (rm -rf). PATH must be absolute, not /, and without a .. element. MODE must be
// Filesystem: the provisioner makes every volume a directory, and a block volume asked of it is
// refused here, by name, rather than given a directory it cannot use. SIZE is not enforced, as
// upstream's scripts do not. Each run prints what it did: the provisioner copies a helper pod's
// log into its own.
//
// The bundle builder embeds this file and compiles it into the helper image.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is the command with its arguments; it returns the exit code: 0 done, 1 refused or failed,
// 2 not called as the provisioner calls it.
func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("local-path-helper", flag.ContinueOnError)
	fl.SetOutput(stderr)
	path := fl.String("p", "", "the volume's directory")
	size := fl.Int64("s", 0, "the volume's size in bytes (not enforced)")
	mode := fl.String("m", "", "the volume's mode: Filesystem")
	action := fl.String("a", "", "create or delete")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "local-path-helper: unexpected argument %q; usage: local-path-helper -p PATH -s SIZE -m Filesystem -a create|delete\n", fl.Arg(0))
		return 2
	}
	if err := do(*action, *path, *mode, *size, stdout); err != nil {
		fmt.Fprintf(stderr, "local-path-helper: %v\n", err)
		return 1
	}
	return 0
}

// do checks the request and carries it out.
func do(action, path, mode string, size int64, stdout io.Writer) error {
	if action != "create" && action != "delete" {
		return fmt.Errorf("-a %q: the action is create or delete", action)
	}
	dir, err := volumeDir(path)
	if err != nil {
		return err
	}
	if mode != "Filesystem" {
		return fmt.Errorf("-m %q for %s: kforge's local volumes are directories (volumeMode: Filesystem); a block volume needs another StorageClass", mode, dir)
	}
	if size < 0 {
		return fmt.Errorf("-s %d for %s: a size is not negative", size, dir)
	}
	if action == "create" {
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return err
		}
		// MkdirAll's mode is cut by the umask; mkdir -m sets it whole.
		if err := os.Chmod(dir, 0o777); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "created %s (mode 0777)\n", dir)
		return nil
	}
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(stdout, "%s was not there\n", dir)
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "removed %s\n", dir)
	return nil
}

// volumeDir is path cleaned, or why it is refused: it is relative, the root, or has a ..
// element (the provisioner joins its base directory and the volume's name; anything else is not
// a volume's directory and must not be made or removed).
func volumeDir(path string) (string, error) {
	switch {
	case path == "":
		return "", errors.New("no -p PATH: the volume's directory is required")
	case !filepath.IsAbs(path):
		return "", fmt.Errorf("-p %q: the volume's directory must be an absolute path", path)
	case filepath.Clean(path) == "/":
		return "", fmt.Errorf("-p %q: the volume's directory cannot be /", path)
	}
	for _, e := range strings.Split(path, "/") {
		if e == ".." {
			return "", fmt.Errorf("-p %q: the volume's directory must not have a .. element", path)
		}
	}
	return filepath.Clean(path), nil
}
