package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/tasks"
)

// ResetCmd undoes on every host what apply did. It asks for the cluster's name first, unless
// --yes.
type ResetCmd struct {
	Yes               bool `help:"Do not ask: reset without confirmation (needed when stdin is not a terminal)."`
	PurgeState        bool `help:"Also delete the cluster's PKI from the state dir (by default it is kept, so a new apply reuses the same CA)."`
	AcceptNewHostKeys bool `help:"Trust hosts whose SSH key is not yet in known_hosts, and record their keys (trust on first use)."`
}

func (c *ResetCmd) Run(ctx context.Context, s *streams, g *Globals, log *slog.Logger, dl *debugLog) (err error) {
	run, err := startClusterRun(ctx, "reset", s, g, log, dl)
	if err != nil {
		return err
	}
	defer run.close(ctx, &err)
	// Hosts that left the inventory but are still part of the cluster are reset too.
	removed, err := removedEvenIfNoMasterLeft(run.inv, run.state)
	if err != nil {
		return err
	}
	if !c.Yes {
		fd := int(os.Stdin.Fd())
		if err := confirmReset(os.Stdin, term.IsTerminal(fd), s.Err, run.inv, removed); err != nil {
			return err
		}
	}
	o := run.options(g, log)
	o.AcceptNewHostKeys, o.Removed, o.PurgeState = c.AcceptNewHostKeys, removed, c.PurgeState
	x := tasks.NewReset(run.inv, o)
	defer x.Close()
	timings, err := run.run(ctx, x.Steps())
	if err != nil {
		return err
	}
	kept := "kept on the hosts: installed binaries, imported images, containerd's config"
	if l := run.inv.LocalVolumes; l.On() {
		kept += ", the local volumes' data in " + l.Path
	}
	if !c.PurgeState {
		kept += "; in " + run.state.Path() + ": the PKI"
	}
	run.printer.Summary(fmt.Sprintf("cluster %s reset on %d hosts (%s)", run.inv.Name, len(run.inv.Hosts())+len(removed), kept), time.Since(run.start), timings)
	return nil
}

// confirmReset asks on the terminal for the cluster's name; without a terminal it refuses.
func confirmReset(in io.Reader, terminal bool, w io.Writer, inv *inventory.Cluster, removed []inventory.Node) error {
	if !terminal {
		return refusedError{"kforge reset deletes cluster " + inv.Name + " from its hosts and asks first, but stdin is not a terminal: pass --yes to reset without asking"}
	}
	var hosts []string
	for _, n := range append(inv.Hosts(), removed...) {
		hosts = append(hosts, n.Name)
	}
	fmt.Fprintf(w, "kforge reset stops kubelet and removes the containers, Kubernetes files, etcd data, pod network and iptables rules of cluster %s on %s.\n", inv.Name, strings.Join(hosts, ", "))
	fmt.Fprintf(w, "Type the cluster's name (%s) to go on: ", inv.Name)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if strings.TrimSpace(line) != inv.Name {
		return refusedError{fmt.Sprintf("reset cancelled: %q is not the cluster's name %q; nothing was changed", strings.TrimSpace(line), inv.Name)}
	}
	return nil
}

// refusedError is a reset that was not confirmed: nothing was changed.
type refusedError struct{ msg string }

func (e refusedError) Error() string { return e.msg }
func (refusedError) ExitCode() int   { return exitInvalid }
