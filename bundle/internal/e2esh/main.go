// Command e2e-sh is /bin/sh of the conformance kit's busybox images (busybox, nonroot,
// nonewprivs). It is busybox's ash, as in upstream's busybox image, whose messages some specs
// compare word for word ("/bin/sh: can't create /file: Read-only file system"), except when
// the environment holds a variable whose name is not a shell identifier (data-1, from a
// ConfigMap): Debian's busybox 1.35 ash drops those, upstream's 1.37 keeps them, and so does
// bash, which then runs instead. argv[0] is kept, so errors name the shell as it was called.
package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

func main() {
	shell := "/usr/bin/busybox"
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !identifier(name) {
			shell = "/usr/bin/bash"
			break
		}
	}
	err := syscall.Exec(shell, os.Args, os.Environ())
	fmt.Fprintf(os.Stderr, "%s: exec %s: %v\n", os.Args[0], shell, err)
	os.Exit(127)
}

// identifier says whether name is a shell variable name: a letter or _, then letters, digits
// and _.
func identifier(name string) bool {
	if name == "" {
		return false
	}
	for i, c := range name {
		if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}
