package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/progress"
)

// LabCmd is `kforge lab`: a local fleet of systemd hosts reachable over SSH (docs/lab.md).
type LabCmd struct {
	Up     LabUpCmd     `cmd:"" help:"Bring up N local systemd hosts reachable over SSH, and write an inventory skeleton for them."`
	Status LabStatusCmd `cmd:"" help:"Show the labs on this machine and their hosts."`
	Down   LabDownCmd   `cmd:"" help:"Stop a lab's hosts and remove everything it created."`
	Stop   LabStopCmd   `cmd:"" help:"Cut the power of one lab host: its processes killed at once, what its kernel held wiped."`
	Start  LabStartCmd  `cmd:"" help:"Boot a stopped lab host again (same disk, keys and address) and wait until it runs."`
}

// LabUpCmd is `kforge lab up`.
type LabUpCmd struct {
	Name         string        `default:"kforge" env:"KFORGE_LAB_NAME" help:"Lab name; labs with different names coexist (${env})."`
	Hosts        int           `default:"3" help:"Number of cluster hosts."`
	Masters      int           `default:"1" help:"How many of them are masters in the inventory (the first ones)."`
	LoadBalancer bool          `name:"load-balancer" help:"Add a haproxy host in front of the masters' :6443."`
	VIP          bool          `name:"vip" help:"Reserve an address of the lab subnet for the cluster's controlPlaneVIP (several masters, no load balancer)."`
	Dir          string        `placeholder:"DIR" help:"Where the lab's keys, inventory and host disks go (default $KFORGE_LAB_DIR/<name>, else /var/lib/kforge/lab/<name>)."`
	CacheDir     string        `env:"KFORGE_CACHE_DIR" placeholder:"DIR" help:"Where the base rootfs is cached (${env}; default /var/cache/kforge)."`
	BootTimeout  time.Duration `placeholder:"DURATION" help:"How long to wait for every sshd (default 60s + 1s per host)."`
	Bare         bool          `help:"Cluster hosts without a container runtime (containerd and runc hidden), to prove kforge installs it."`
	VMs          int           `name:"vm" placeholder:"N" help:"Make the last N cluster hosts QEMU virtual machines with their own kernel and cgroup v2 (no container runtime; KVM where it works, else emulation)."`
	VMSuite      string        `name:"vm-suite" default:"bookworm" enum:"bookworm,trixie" help:"Debian release of the VM hosts (bookworm or trixie)."`
	IPv6         bool          `name:"ipv6" help:"Give every host an IPv6 address too (2001:db8:100::/64), and the inventory skeleton a dual-stack cluster. Not with --vm."`
}

func (c *LabUpCmd) Run(ctx context.Context, s *streams, g *Globals, log *slog.Logger) error {
	start := time.Now()
	p := progress.NewPrinter(s.Out, s.Err, g.Output == "json", log)
	var timings progress.Timings
	l, err := lab.Up(ctx, lab.Options{
		Name: c.Name, Hosts: c.Hosts, Masters: c.Masters, LoadBalancer: c.LoadBalancer, VIP: c.VIP,
		Dir: c.Dir, CacheDir: c.CacheDir, BootTimeout: c.BootTimeout, Bare: c.Bare, VMs: c.VMs, VMSuite: c.VMSuite, IPv6: c.IPv6,
		Report: timings.Report(p.Report), Logger: log,
	})
	if errors.Is(err, lab.ErrInvalidOptions) {
		return labUsageError{err}
	}
	if err != nil {
		return err
	}
	p.Summary(fmt.Sprintf("lab %s is up: %d hosts", l.Name, len(l.Hosts)), time.Since(start), timings.List())
	if g.Output == "json" {
		m := labJSON(l)
		m["event"] = "lab-up"
		return json.NewEncoder(s.Out).Encode(m)
	}
	fmt.Fprintf(s.Out, "inventory:   %s\nidentity:    %s\nknown_hosts: %s\n", l.InventoryFile, l.IdentityFile, l.KnownHostsFile)
	if l.VIP != "" {
		fmt.Fprintf(s.Out, "vip:         %s (reserved for controlPlaneVIP)\n", l.VIP)
	}
	fmt.Fprintf(s.Out, "try:         ssh -i %s -o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes root@%s\n",
		l.IdentityFile, l.KnownHostsFile, l.Hosts[0].Address)
	return nil
}

// LabStatusCmd is `kforge lab status`.
type LabStatusCmd struct {
	Name string `env:"KFORGE_LAB_NAME" help:"Only this lab (${env}); default every lab."`
}

func (c *LabStatusCmd) Run(ctx context.Context, s *streams, g *Globals) error {
	names := []string{c.Name}
	if c.Name == "" {
		var err error
		if names, err = lab.List(); err != nil {
			return err
		}
	}
	var labs []map[string]any
	tw := tabwriter.NewWriter(s.Out, 0, 4, 2, ' ', 0)
	if g.Output != "json" {
		fmt.Fprintln(tw, "LAB\tHOST\tROLE\tKIND\tADDRESS\tSTATE")
	}
	for _, n := range names {
		l, err := lab.Open(n)
		if err != nil {
			return err
		}
		hosts := l.Hosts
		if l.LoadBalancer != nil {
			hosts = append(hosts, *l.LoadBalancer)
		}
		var hs []map[string]any
		for _, h := range hosts {
			st := "stopped"
			if l.Running(h.Name) {
				st = "running"
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				out, _ := l.Exec(cctx, h.Name, "systemctl", "is-system-running")
				cancel()
				if o := strings.TrimSpace(string(out)); o != "" {
					st = o
				}
			}
			kind := "nspawn"
			if h.VM {
				kind = "vm"
			}
			hs = append(hs, map[string]any{"name": h.Name, "role": h.Role, "kind": kind, "address": h.Address, "port": h.Port, "state": st})
			if g.Output != "json" {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", l.Name, h.Name, h.Role, kind, h.Address, st)
			}
		}
		m := labJSON(l)
		m["hosts"] = hs
		labs = append(labs, m)
	}
	if g.Output == "json" {
		return json.NewEncoder(s.Out).Encode(map[string]any{"labs": labs})
	}
	if len(names) == 0 {
		fmt.Fprintln(s.Err, "no lab on this machine (kforge lab up)")
		return nil
	}
	return tw.Flush()
}

// LabDownCmd is `kforge lab down`.
type LabDownCmd struct {
	Name string `default:"kforge" env:"KFORGE_LAB_NAME" help:"Lab name (${env})."`
	All  bool   `help:"Every lab on this machine."`
}

func (c *LabDownCmd) Run(ctx context.Context, s *streams, g *Globals, log *slog.Logger) error {
	names := []string{c.Name}
	if c.All {
		var err error
		if names, err = lab.List(); err != nil {
			return err
		}
	}
	p := progress.NewPrinter(s.Out, s.Err, g.Output == "json", log)
	var errs []error
	for _, n := range names {
		l, err := lab.Open(n)
		if errors.Is(err, lab.ErrNotFound) {
			p.Report(progress.Event{Kind: progress.Info, Task: "down", Message: fmt.Sprintf("lab %s: not found (nothing to do)", n)})
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		l.SetLogger(log)
		l.SetReport(p.Report)
		if err := l.Down(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// LabStopCmd is `kforge lab stop`: a power cut of one host.
type LabStopCmd struct {
	Name string `default:"kforge" env:"KFORGE_LAB_NAME" help:"Lab name (${env})."`
	Host string `arg:"" help:"The host to power off (kforge lab status lists them)."`
}

func (c *LabStopCmd) Run(ctx context.Context, s *streams, g *Globals, log *slog.Logger) error {
	return onLabHost(s, g, log, c.Name, c.Host, "stop", "cut the power of lab %s's host %s", func(l *lab.Lab, r progress.Reporter) error {
		if !l.Running(c.Host) {
			r(progress.Event{Kind: progress.Info, Host: c.Host, Message: "already stopped (nothing to do)"})
			return nil
		}
		start := time.Now()
		if err := l.StopHost(ctx, c.Host); err != nil {
			return err
		}
		r(progress.Event{Kind: progress.HostDone, Host: c.Host, Message: "powered off", Duration: time.Since(start)})
		return nil
	})
}

// LabStartCmd is `kforge lab start`.
type LabStartCmd struct {
	Name string `default:"kforge" env:"KFORGE_LAB_NAME" help:"Lab name (${env})."`
	Host string `arg:"" help:"The host to boot (kforge lab status lists them)."`
}

func (c *LabStartCmd) Run(ctx context.Context, s *streams, g *Globals, log *slog.Logger) error {
	return onLabHost(s, g, log, c.Name, c.Host, "start", "boot lab %s's host %s and wait until sshd answers and systemd runs", func(l *lab.Lab, r progress.Reporter) error {
		if l.Running(c.Host) {
			r(progress.Event{Kind: progress.Info, Host: c.Host, Message: "already running (nothing to do)"})
			return nil
		}
		l.SetReport(r)
		return l.StartHost(ctx, c.Host)
	})
}

// onLabHost runs fn as one reported task (what: its description, of the lab's and the host's
// names) on host of the lab called name.
func onLabHost(s *streams, g *Globals, log *slog.Logger, name, host, task, what string, fn func(*lab.Lab, progress.Reporter) error) error {
	l, err := openLabHost(name, host)
	if err != nil {
		return err
	}
	l.SetLogger(log)
	p := progress.NewPrinter(s.Out, s.Err, g.Output == "json", log)
	return progress.Task(p.Report, task, fmt.Sprintf(what, l.Name, host), func(r progress.Reporter) error { return fn(l, r) })
}

// openLabHost opens the lab called name and checks that it has the host; either missing is a
// usage error that lists what there is.
func openLabHost(name, host string) (*lab.Lab, error) {
	l, err := lab.Open(name)
	if errors.Is(err, lab.ErrNotFound) {
		names, lerr := lab.List()
		if lerr != nil {
			return nil, err
		}
		if len(names) == 0 {
			return nil, labUsageError{fmt.Errorf("lab %s not found: there is no lab on this machine (kforge lab up)", name)}
		}
		return nil, labUsageError{fmt.Errorf("lab %s not found: the labs on this machine are %s (choose one with --name)", name, strings.Join(names, ", "))}
	}
	if err != nil {
		return nil, labUsageError{err}
	}
	if err := labHasHost(l, host); err != nil {
		return nil, err
	}
	return l, nil
}

// labHasHost returns nil when the lab has the host, else a usage error listing its hosts.
func labHasHost(l *lab.Lab, host string) error {
	hosts := l.Hosts
	if l.LoadBalancer != nil {
		hosts = append(hosts[:len(hosts):len(hosts)], *l.LoadBalancer)
	}
	var names []string
	for _, h := range hosts {
		if h.Name == host {
			return nil
		}
		names = append(names, h.Name)
	}
	return labUsageError{fmt.Errorf("lab %s has no host %q: its hosts are %s", l.Name, host, strings.Join(names, ", "))}
}

// labUsageError exits with exitInvalid: the command line was wrong and nothing was changed.
type labUsageError struct{ error }

func (e labUsageError) Unwrap() error { return e.error }
func (labUsageError) ExitCode() int   { return exitInvalid }

func labJSON(l *lab.Lab) map[string]any {
	return map[string]any{
		"name": l.Name, "dir": l.Dir, "hosts": l.Hosts, "loadBalancer": l.LoadBalancer, "vip": l.VIP,
		"inventory": l.InventoryFile, "identityFile": l.IdentityFile, "knownHostsFile": l.KnownHostsFile,
	}
}
