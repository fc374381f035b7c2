package tasks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/scripts"
	"github.com/kforge/kforge/state"
)

// Reset is one `kforge reset`: it undoes on every host what apply did, in parallel and
// idempotently (a second reset finds nothing to do and changes nothing), and needs neither
// preflight nor a working cluster, so it also cleans hosts where apply stopped halfway.
//
// What stays on the hosts, on purpose: the installed binaries (kubelet, CNI plugins), the
// images imported into containerd and containerd's config, so that a new apply ships nothing
// and restarts nothing it need not. On the workstation the PKI stays (a new apply reuses the
// CA) unless Options.PurgeState.
type Reset struct {
	inv   *inventory.Cluster
	o     Options
	fleet *fleet.Fleet // the inventory's hosts and Options.Removed; connected by connect
}

// NewReset prepares a reset of c's hosts plus Options.Removed: hosts a past apply made part of
// the cluster that the inventory no longer lists and no apply --prune has removed.
func NewReset(c *inventory.Cluster, o Options) *Reset {
	o = o.withDefaults()
	nodes := c.Hosts()
	for _, n := range o.Removed {
		if !slices.ContainsFunc(nodes, func(m inventory.Node) bool { return m.Name == n.Name }) {
			nodes = append(nodes, n)
		}
	}
	return &Reset{inv: c, o: o, fleet: newFleet(c, nodes, o)}
}

// Steps is reset, top to bottom.
func (x *Reset) Steps() []Step {
	l := x.hostSteps()
	l.add("state", OnWorkstation, nil, x.resetState, "delete the admin kubeconfig, bootstrap token and hosts record in the state dir; keep the PKI")
	if x.o.PurgeState {
		l.add("purge-state", OnWorkstation, nil, x.purgeState, "delete the cluster's PKI in the state dir")
	}
	return l
}

// hostSteps are the steps of reset that work on the hosts; prune runs them on one host.
func (x *Reset) hostSteps() list {
	all, members := x.fleet.Names(""), append(x.fleet.Names(inventory.RoleMaster), x.fleet.Names(inventory.RoleEtcd)...)
	var l list
	l.add("connect", OnHosts, all, x.fleet.Connect, "connect to %s over SSH (host keys verified) and gather facts in one round trip each", count(len(all), "host"))
	l.add("stop-kubelet", OnHosts, all, x.stopKubelet, "stop and disable kubelet, so nothing starts the containers again")
	l.add("containers", OnHosts, all, x.removeContainers, "kill and remove every container in containerd's k8s.io namespace (images stay)")
	l.add("unmount", OnHosts, all, x.unmountKubelet, "unmount what kubelet mounted under %s and the pods' network namespaces", hostpath.KubeletDir)
	l.add("files", OnHosts, all, x.removeFiles, "remove %s, %s, %s (on %s), the kubelet unit and drop-in, the service-route unit (with its route), %s", hostpath.KubernetesDir, hostpath.KubeletDir, hostpath.EtcdDataDir, strings.Join(members, ", "), hostpath.SysctlFile)
	l.add("network", OnHosts, all, x.cleanNetwork, "delete cni0 and flannel.1, the CNI config and state, /run/flannel, the nftables tables of kube-proxy, flannel, portmap and the NetworkPolicy agent, and the KUBE-/FLANNEL- iptables chains with the jumps to them")
	return l
}

// Close ends every connection reset opened.
func (x *Reset) Close() { x.fleet.Close() }

// resetHostTimeout bounds each reset command on one host.
const resetHostTimeout = 3 * time.Minute

// eachReset runs fn on every host with a deadline and reports its outcome as a host line.
func (x *Reset) eachReset(ctx context.Context, r progress.Reporter, fn func(ctx context.Context, n inventory.Node, h remote.Host) (string, error)) error {
	return x.fleet.Each(ctx, "", func(ctx context.Context, n inventory.Node, h remote.Host) error {
		start := x.o.Now()
		ctx, cancel := context.WithTimeout(ctx, resetHostTimeout)
		defer cancel()
		msg, err := fn(ctx, n, h)
		if err != nil {
			return err
		}
		r(progress.Event{Kind: progress.HostDone, Host: n.Name, Duration: x.o.Now().Sub(start), Message: msg})
		return nil
	})
}

// The reset scripts print one line per thing they changed, "changed WHAT", or said, "note
// WHAT"; a host where nothing is left to do prints nothing.

// stopKubeletScript stops and disables kubelet.service when systemd knows it, including a
// kubelet waiting to be restarted after a crash, then names any kubelet still running in the
// host's own PID namespace (kubelets of nested nodes, kind's say, are not the host's).
var stopKubeletScript = scripts.Command("reset-stop-kubelet")

func (x *Reset) stopKubelet(ctx context.Context, r progress.Reporter) error {
	return x.eachReset(ctx, r, func(ctx context.Context, n inventory.Node, h remote.Host) (string, error) {
		changed, notes, err := runReset(ctx, h, stopKubeletScript)
		if err != nil {
			return "", err
		}
		if len(notes) > 0 {
			return "", fmt.Errorf("kubelet still runs outside systemd (%s) and would start the containers again: stop it, then run kforge reset again", strings.Join(notes, ", "))
		}
		return summary(changed, "kubelet not running"), nil
	})
}

// containersScript kills every task in containerd's k8s.io namespace at once, then deletes
// each task and container (with its snapshot), then, with containerd 2, the pod sandboxes it
// keeps apart from containers, and stops any shim of the namespace still running. Images stay.
// A host without containerd running (apply stopped before starting it) has nothing to remove,
// unless shims of the namespace still run.
var containersScript = scripts.Command("reset-containers")

// containerdEnv points ctr at the inventory's runtime socket when it is not containerd's default.
func (x *Reset) containerdEnv() string {
	sock := strings.TrimPrefix(x.inv.ContainerRuntime.Endpoint, "unix://")
	if sock == "" || sock == "/run/containerd/containerd.sock" {
		return ""
	}
	return "export CONTAINERD_ADDRESS=" + remote.Quote(sock) + "\n"
}

// removeContainers kills and removes every container of containerd's k8s.io namespace on h
// (env points ctr at containerd's socket), then restarts containerd when there were any: its
// CRI plugin still holds the removed pod sandboxes in memory, and a restart makes it forget
// them, so the next kubelet starts from nothing.
func removeContainers(ctx context.Context, h remote.Host, env string) (changed, notes []string, err error) {
	changed, notes, err = runReset(ctx, h, env+containersScript)
	if err != nil || len(changed) == 0 {
		return changed, notes, err
	}
	if err := h.Run(ctx, remote.Cmd{Command: "systemctl restart containerd"}); err != nil {
		return nil, nil, err
	}
	return append(changed, "containerd restarted"), notes, nil
}

func (x *Reset) removeContainers(ctx context.Context, r progress.Reporter) error {
	return x.eachReset(ctx, r, func(ctx context.Context, n inventory.Node, h remote.Host) (string, error) {
		changed, notes, err := removeContainers(ctx, h, x.containerdEnv())
		if err != nil {
			return "", err
		}
		if len(notes) > 0 {
			return strings.Join(notes, ", ") + ": no containers to remove", nil
		}
		return summary(changed, "no containers"), nil
	})
}

// unmountScript unmounts, deepest first, every mount below /var/lib/kubelet/ (pod volumes;
// also below its target when it is a symlink, as kubeadm resolves it) and the pods' network
// namespaces (/run/netns/cni-*), then deletes those namespace files.
var unmountScript = scripts.Command("reset-unmount", "kubelet_dir", hostpath.KubeletDir, "netns_prefix", hostpath.CNINetnsPrefix)

func (x *Reset) unmountKubelet(ctx context.Context, r progress.Reporter) error {
	return x.eachReset(ctx, r, func(ctx context.Context, n inventory.Node, h remote.Host) (string, error) {
		changed, _, err := runReset(ctx, h, unmountScript)
		return summary(changed, "nothing mounted"), err
	})
}

// stopServiceRouteScript stops and disables the service-route unit, which removes the route it
// added, before its file goes.
var stopServiceRouteScript = scripts.Command("stop-unit", "unit", hostpath.ServiceRouteUnit, "unit_path", hostpath.ServiceRouteUnitPath,
	"said", "stopped (its route removed) and disabled")

// resetUnits are kforge's own systemd units (name, file) that reset stops and disables before
// their files go.
var resetUnits = [][2]string{
	{hostpath.VIPUnit, hostpath.VIPUnitPath}, {hostpath.APIProxyUnit, hostpath.APIProxyUnitPath},
	{hostpath.RegistryUnit, hostpath.RegistryUnitPath}, {hostpath.EtcdSnapshotTimer, hostpath.EtcdSnapshotTimerPath},
}

// resetFiles are the paths reset removes on a node: everything kforge wrote there except the
// bundle's binaries, containerd's config, the scheduled etcd snapshots (in
// hostpath.EtcdSnapshotDir: with etcd's data gone they may be the cluster's last copy) and the
// local volumes' directory (localVolumes.path, which the inventory keeps outside these: the
// users' data). Directories that are mount points or symlinks (a separate disk for
// /var/lib/etcd, say) are emptied instead.
func resetFiles(role inventory.Role) []string {
	ps := []string{hostpath.KubernetesDir, hostpath.KubeletDir}
	if role == inventory.RoleMaster || role == inventory.RoleEtcd {
		ps = append(ps, hostpath.EtcdDataDir)
	}
	return append(ps, hostpath.KubeletUnitPath, hostpath.KubeletDropInPath, hostpath.ServiceRouteUnitPath, hostpath.SysctlFile,
		hostpath.APIProxyUnitPath, hostpath.APIProxyConfig, path.Dir(hostpath.APIProxyState),
		hostpath.VIPUnitPath, hostpath.VIPConfig, path.Dir(hostpath.VIPState),
		hostpath.RegistryUnitPath, hostpath.RegistryConfig, hostpath.RegistryFillConfig, hostpath.RegistryDir,
		hostpath.EtcdSnapshotTimerPath, hostpath.EtcdSnapshotUnitPath, hostpath.EtcdSnapshotConfig)
}

// removeScript removes each of paths, then emptyDir if it is empty, and prints what it
// removed. It also removes the facts' cache (hostpath.FactsCacheDir) without a word: every
// connect writes it, reset's own included. A directory that is a mount point, or a symlink to a directory (the user's layout:
// /var/lib/kubelet on another disk, say), is emptied and kept, as kubeadm's CleanDir does.
func removeScript(paths []string, emptyDir string) string {
	return scripts.Command("reset-remove", "kubelet_dir", hostpath.KubeletDir, "paths", scripts.Lines(paths), "empty_dir", emptyDir,
		"facts_cache", hostpath.FactsCacheDir)
}

func (x *Reset) removeFiles(ctx context.Context, r progress.Reporter) error {
	return x.eachReset(ctx, r, func(ctx context.Context, n inventory.Node, h remote.Host) (string, error) {
		stopped, _, err := runReset(ctx, h, stopServiceRouteScript)
		if err != nil {
			return "", err
		}
		for _, u := range resetUnits {
			unit, _, err := runReset(ctx, h, stopUnitScript(u[0], u[1]))
			if err != nil {
				return "", err
			}
			stopped = append(stopped, unit...)
		}
		changed, _, err := runReset(ctx, h, removeScript(resetFiles(n.Role), path.Dir(hostpath.KubeletDropInPath)))
		if err != nil {
			return "", err
		}
		changed = append(stopped, changed...)
		if slices.ContainsFunc(changed, func(c string) bool { return strings.Contains(c, "/etc/systemd/system/") }) {
			if err := h.Run(ctx, remote.Cmd{Command: "systemctl daemon-reload"}); err != nil {
				return "", err
			}
			changed = append(changed, "systemd reloaded")
		}
		return summary(changed, "no files left"), nil
	})
}

// cniNetwork is the name of kforge's CNI network (templates.FlannelCNIConfig): host-local
// keeps its IP allocations under /var/lib/cni/networks/<name>.
const cniNetwork = "kforge"

// networkScript deletes the pod network's links, config and state. Pods were killed without
// a CNI DEL, so their IP allocations and cached results are removed here too.
var networkScript = scripts.Command("reset-network", "cni_conf", hostpath.CNIConfFile, "cni_network", cniNetwork,
	"cni_state", hostpath.CNIStateDir, "flannel_run", hostpath.FlannelRunDir)

// iptablesDumpScript prints the rules of every iptables variant on the host, each after a
// "#kforge-iptables NAME" line: legacy and nft, IPv4 and IPv6 where present, else whatever
// plain iptables-save is.
var iptablesDumpScript = scripts.Command("reset-iptables-dump")

// resetChainPrefixes name the iptables chains kube-proxy, kubelet, flannel and the portmap CNI
// plugin make; reset deletes them and every rule that jumps to them, in every table.
var resetChainPrefixes = []string{"KUBE-", "FLANNEL-", "CNI-HOSTPORT-", "CNI-DN-"}

func (x *Reset) cleanNetwork(ctx context.Context, r progress.Reporter) error {
	return x.eachReset(ctx, r, func(ctx context.Context, n inventory.Node, h remote.Host) (string, error) {
		changed, _, err := runReset(ctx, h, networkScript)
		if err != nil {
			return "", err
		}
		out, err := remote.Output(ctx, h, iptablesDumpScript)
		if err != nil {
			return "", err
		}
		for _, d := range splitIptablesDump(string(out)) {
			restore, rules, chains := CleanIptables(d.save, resetChainPrefixes)
			if restore == "" {
				continue
			}
			if err := h.Run(ctx, remote.Cmd{Command: d.tool + "-restore -w 10", Stdin: strings.NewReader(restore)}); err != nil {
				return "", err
			}
			changed = append(changed, fmt.Sprintf("%s: %d chains, %d rules removed", d.tool, chains, rules))
		}
		return summary(changed, "nothing left"), nil
	})
}

type iptablesDump struct{ tool, save string }

func splitIptablesDump(out string) []iptablesDump {
	var ds []iptablesDump
	for _, part := range strings.Split(out, "#kforge-iptables ")[1:] {
		tool, save, _ := strings.Cut(part, "\n")
		ds = append(ds, iptablesDump{tool: strings.TrimSpace(tool), save: save})
	}
	return ds
}

// CleanIptables takes iptables-save output and returns iptables-restore input for the tables
// that hold chains named with one of prefixes: those tables without such chains and without
// the rules that jump or go to them; every other chain and rule of the table is kept as it was.
// restore is empty when nothing matched: the host's rules are already clean.
func CleanIptables(save string, prefixes []string) (restore string, rules, chains int) {
	ours := func(chain string) bool {
		return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(chain, p) })
	}
	var out strings.Builder
	var table []string
	dropped := false
	for _, line := range strings.Split(save, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table, dropped = []string{line}, false
		case line == "COMMIT":
			if dropped {
				out.WriteString(strings.Join(table, "\n") + "\nCOMMIT\n")
			}
			table = nil
		case table == nil, strings.HasPrefix(line, "#"), strings.TrimSpace(line) == "":
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			if ours(name) {
				chains++
				dropped = true
				continue
			}
			table = append(table, line)
		case strings.HasPrefix(line, "-A "):
			f := shellFields(line)
			if len(f) > 1 && ours(f[1]) || ours(jumpTarget(f)) {
				rules++
				dropped = true
				continue
			}
			table = append(table, line)
		default:
			table = append(table, line)
		}
	}
	return out.String(), rules, chains
}

// jumpTarget is the chain a rule jumps (-j) or goes (-g) to.
func jumpTarget(f []string) string {
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "-j" || f[i] == "--jump" || f[i] == "-g" || f[i] == "--goto" {
			return f[i+1]
		}
	}
	return ""
}

// shellFields splits an iptables-save rule into words, keeping double-quoted words (comments)
// whole.
func shellFields(s string) []string {
	var fs []string
	var cur strings.Builder
	in, esc, have := false, false, false
	for _, c := range s {
		switch {
		case esc:
			cur.WriteRune(c)
			esc = false
		case c == '\\' && in:
			esc = true
		case c == '"':
			in, have = !in, true
		case c == ' ' && !in:
			if have {
				fs = append(fs, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(c)
			have = true
		}
	}
	if have {
		fs = append(fs, cur.String())
	}
	return fs
}

// runReset runs a reset script on h and splits its "changed" and "note" lines.
func runReset(ctx context.Context, h remote.Host, script string) (changed, notes []string, err error) {
	out, err := remote.Output(ctx, h, script)
	if err != nil {
		return nil, nil, err
	}
	for _, line := range strings.Split(string(out), "\n") {
		if c, ok := strings.CutPrefix(line, "changed "); ok {
			changed = append(changed, c)
		} else if c, ok := strings.CutPrefix(line, "note "); ok {
			notes = append(notes, c)
		}
	}
	return changed, notes, nil
}

func summary(changed []string, clean string) string {
	if len(changed) == 0 {
		return clean
	}
	return strings.Join(changed, ", ")
}

// resetStateFiles are what reset deletes from the state dir: what lets someone into the
// cluster that is no more. The PKI stays unless the state is purged.
func resetStateFiles(d state.Dir) []string {
	return []string{d.AdminKubeconfig(), d.BootstrapToken(), d.HostsRecord()}
}

func (x *Reset) resetState(_ context.Context, r progress.Reporter) error {
	removed, err := x.o.State.Remove(resetStateFiles(x.o.State)...)
	if len(removed) > 0 {
		r(progress.Event{Kind: progress.Info, Message: "deleted " + strings.Join(removed, ", ")})
	}
	if err != nil {
		return err
	}
	if _, err := os.Stat(x.o.State.PKI()); err == nil && !x.o.PurgeState {
		r(progress.Event{Kind: progress.Info, Message: "kept the PKI in " + x.o.State.PKI() + ": a new apply reuses the same CA (kforge reset --purge-state deletes it)"})
	}
	return nil
}

func (x *Reset) purgeState(_ context.Context, r progress.Reporter) error {
	p := x.o.State.PKI()
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	r(progress.Event{Kind: progress.Info, Message: "deleted " + p + " (a new apply makes a new CA)"})
	return nil
}
