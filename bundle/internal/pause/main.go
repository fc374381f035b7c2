// Command pause is the pod sandbox's placeholder process: it sleeps until SIGINT or SIGTERM
// and, as PID 1 of the pod, reaps the zombies of processes that share its PID namespace. As
// upstream's pause.c, `pause -v` prints its version and exits 0: kubeadm's upgrade runs the
// pause image with -v as a Job and waits for it to complete.
// The bundle builder embeds this file and compiles it into the pause image.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// version is set by the bundle builder (-X main.version=3.10.2).
var version = "unknown"

func main() {
	for _, a := range os.Args[1:] {
		if strings.EqualFold(a, "-v") {
			fmt.Printf("pause v%s\n", version)
			return
		}
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
