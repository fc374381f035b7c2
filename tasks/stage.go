package tasks

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/facts"
	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/scripts"
	"github.com/kforge/kforge/templates"
)

// stage runs every host's pipeline in parallel: what it lacks from the bundle, then
// containerd and kernel settings, then its files; masters go on to start kubelet and with it
// the static-pod control plane. It returns when every master is started, with the work it
// leaves running: the workers finish staging while the control plane comes up (join-workers
// waits for them), and the masters receive the rest of the bundle (vip and core-addons wait
// for it).
func stage(ctx context.Context, t *hop, ep etcdPlan, r progress.Reporter) (*staging, error) {
	f := t.rc.fleet
	if t.inv.ExternalEtcd() {
		// The API servers need etcd: its hosts are staged and started first.
		if err := startEtcdHosts(ctx, t, ep, r); err != nil {
			return nil, err
		}
	}
	fresh, rolling, joining := ep.startOrder(f.Nodes(inventory.RoleMaster))
	if t.inv.ExternalEtcd() && !ep.anew {
		fresh, rolling = runningMasters(f)
	}
	// The workers wait for the registries of the masters staged here (a joining master comes
	// later, one at a time); a failure staging the masters ends that wait.
	filling := 0
	if t.manifest != nil && t.inv.BundleFromMasters() {
		filling = len(fresh) + len(rolling)
	}
	st := &staging{fills: newRegistryFills(filling), etcdFirst: map[string]bool{}}
	st.workers.start(func() error {
		return fleet.EachOf(ctx, f, f.Nodes(inventory.RoleWorker), func(ctx context.Context, n inventory.Node, _ remote.Host) error {
			start := t.rc.o.Now()
			did, err := t.stageHost(ctx, n, st, r)
			if err == nil {
				reportStaged(r, t.rc.o.Now, n, start, append(did, "staged"))
			}
			return err
		})
	})
	stageMaster := func(ctx context.Context, n inventory.Node) error {
		start := t.rc.o.Now()
		did, err := t.stageHost(ctx, n, st, r)
		if err != nil {
			return err
		}
		msg, err := t.startMaster(ctx, n, ep, st, r)
		if err != nil {
			return err
		}
		reportStaged(r, t.rc.o.Now, n, start, append(did, msg))
		return nil
	}
	if err := fleet.EachOf(ctx, f, fresh, func(ctx context.Context, n inventory.Node, _ remote.Host) error {
		return stageMaster(ctx, n)
	}); err != nil {
		st.fills.release()
		return st, err
	}
	// The running masters of a control plane with several roll one at a time, etcd first
	// (pushEtcdFirst), each master's replaced static pods Ready before the next: a changed
	// setting never restarts every API server or etcd member at once.
	for i, n := range rolling {
		st.etcdFirst[n.Name] = true
		if err := stageMaster(ctx, n); err != nil {
			st.fills.release()
			return st, remote.WithHost(n.Name, err)
		}
		if err := t.waitMasterPods(ctx, n, rolling[(i+1)%len(rolling)]); err != nil {
			st.fills.release()
			return st, remote.WithHost(n.Name, err)
		}
	}
	// Masters joining a running etcd cluster start one at a time: each new member must be up
	// before the next is added, or the cluster loses quorum.
	for _, n := range joining {
		if err := stageMaster(ctx, n); err != nil {
			return st, remote.WithHost(n.Name, err)
		}
		if err := ep.waitMember(ctx, t.rc, n); err != nil {
			return st, remote.WithHost(n.Name, err)
		}
	}
	return st, nil
}

// runningMasters splits the masters of a cluster with an external etcd, where none joins an
// etcd cluster, as startOrder does: those whose API server runs (its manifest is there) roll,
// the others start together (rollIfSeveral).
func runningMasters(f *fleet.Fleet) (fresh, rolling []inventory.Node) {
	for _, n := range f.Nodes(inventory.RoleMaster) {
		if runsAPIServer(f.Facts(n.Name)) {
			rolling = append(rolling, n)
		} else {
			fresh = append(fresh, n)
		}
	}
	return rollIfSeveral(fresh, rolling)
}

// runsAPIServer says whether a master's facts show its API server's manifest.
func runsAPIServer(f *facts.Facts) bool {
	return f != nil && slices.Contains(f.Manifests.Entries, path.Base(apiserverManifest))
}

// reportStaged reports what staging a host did, started at start.
func reportStaged(r progress.Reporter, now func() time.Time, n inventory.Node, start time.Time, did []string) {
	r(progress.Event{Kind: progress.HostDone, Host: n.Name, Duration: now().Sub(start), Message: strings.Join(did, "; ")})
}

// staging is the work stage leaves running when it returns, for the steps that need it
// finished: the workers' staging, the masters' shipments of the rest of the bundle, and the
// masters' registries being filled (the workers wait for those). A nil staging has nothing
// running.
type staging struct {
	workers    jobs
	shipments  jobs
	fills      *registryFills
	etcdFirst  map[string]bool // running masters whose files land etcd first (pushEtcdFirst)
	newKubelet bool            // an upgrade's hosts: their files land under the new kubelet (pushUnderRestartedKubelet)
}

func (st *staging) waitWorkers(ctx context.Context) error {
	if st == nil {
		return nil
	}
	return st.workers.wait(ctx)
}

func (st *staging) waitShipments(ctx context.Context) error {
	if st == nil {
		return nil
	}
	return st.shipments.wait(ctx)
}

// waitAll waits for whatever is still running (Close).
func (st *staging) waitAll() {
	if st != nil {
		_ = st.workers.wait(context.Background())
		_ = st.shipments.wait(context.Background())
	}
}

// stageHost is one host's pipeline, up to its files; see stage. The runtime comes first: with
// containerRuntime.install: bundle, its binaries are shipped, then configured and (re)started,
// because the bundle's images are imported into the running containerd. st says which
// registries to wait for (nil: none; an upgrade fills them before it stages the workers).
func (h *hop) stageHost(ctx context.Context, n inventory.Node, st *staging, r progress.Reporter) ([]string, error) {
	host := h.rc.fleet.Host(n.Name)
	var did []string
	var mirrors []string
	if h.manifest != nil {
		mirrors = h.mirrorsFor(n)
	}
	if len(mirrors) > 0 {
		// The bundle comes from the masters' registries: first what trusts them, then wait
		// until they are filled.
		if err := push(ctx, h.files, host, isRegistryClientFile); err != nil {
			return nil, err
		}
		if st != nil {
			if err := st.fills.wait(ctx); err != nil {
				return nil, err
			}
		}
	}
	installed := false
	if h.manifest != nil && h.inv.ContainerRuntime.Install == inventory.RuntimeFromBundle {
		p, msg, err := h.ship(ctx, host, bundle.Need{Runtime: true, Only: bundle.IsRuntime}, mirrors, r)
		if err != nil {
			return nil, err
		}
		installed = p.installed()
		if installed {
			did = append(did, "runtime "+msg)
		}
	}
	msg, err := h.configureRuntime(ctx, n, host, installed)
	if err != nil {
		return nil, err
	}
	did = append(did, msg)
	if h.manifest != nil {
		need := bundleNeed(h.inv, n.Role)
		if n.Role == inventory.RoleMaster {
			need.Only = controlPlaneFirst // the rest follows in the background
		}
		_, msg, err := h.ship(ctx, host, need, mirrors, r)
		if err != nil {
			return nil, err
		}
		did = append(did, msg)
	}
	switch {
	case st != nil && st.etcdFirst[n.Name]:
		err = pushEtcdFirst(ctx, h.rc, h.files, n, host, nil, false, r)
	case st != nil && st.newKubelet:
		err = pushUnderRestartedKubelet(ctx, h.rc, h.files, n, host, nil)
	default:
		err = push(ctx, h.files, host, nil)
	}
	if err != nil {
		return nil, err
	}
	did = append(did, fmt.Sprintf("%d files written", h.files.countWritten(n.Name)))
	if h.inv.LocalAPIProxy() && n.Role != inventory.RoleEtcd {
		msg, err := h.startAPIProxy(ctx, n, host)
		if err != nil {
			return nil, err
		}
		did = append(did, msg)
	}
	return did, nil
}

// startMaster starts a staged master: its etcd member added when it joins a running cluster,
// kubelet (and with it the static-pod control plane) started, and the rest of the bundle
// shipped in the background (st's shipments), filling its registry on the way.
func (h *hop) startMaster(ctx context.Context, n inventory.Node, ep etcdPlan, st *staging, r progress.Reporter) (string, error) {
	host := h.rc.fleet.Host(n.Name)
	if err := ep.addMember(ctx, h.rc, n); err != nil {
		return "", err
	}
	msg, err := startKubelet(ctx, h.files, host)
	if err != nil || h.manifest == nil {
		return msg, err
	}
	st.shipments.start(func() error {
		filled := sync.OnceFunc(st.fills.done) // the workers wait for it, whatever happens here
		defer filled()
		rest := bundleNeed(h.inv, inventory.RoleMaster)
		if h.inv.BundleFromMasters() {
			// What the other nodes need first, then the registry is filled, then the
			// tools for people (kubeadm, kubectl).
			served := rest
			served.Only = func(name string) bool { return !bundle.IsTool(name) }
			if err := h.shipRest(ctx, n, host, served, r); err != nil {
				return err
			}
			h.fillRegistry(ctx, n, host, r)
			filled()
		}
		return h.shipRest(ctx, n, host, rest, r)
	})
	return msg, nil
}

// bundleNeed is what a node of this role gets of the bundle: the control plane's part on
// masters, the node-local API proxy where the nodes use it, kforge-vip on the masters of a
// cluster with a controlPlaneVIP, the scheduled snapshots' program on the masters of a cluster
// that takes them.
func bundleNeed(c *inventory.Cluster, role inventory.Role) bundle.Need {
	if role == inventory.RoleEtcd { // kubelet, etcd's image and the sandbox's, from the control plane's part
		return bundle.Need{ControlPlane: true, Only: etcdHostPart, EtcdSnapshots: c.ScheduledSnapshots()}
	}
	master := role == inventory.RoleMaster
	return bundle.Need{ControlPlane: master, APIProxy: c.LocalAPIProxy(), VIP: master && c.ControlPlaneVIP != "", EtcdSnapshots: master && c.ScheduledSnapshots() && !c.ExternalEtcd(),
		LocalVolumes: c.LocalVolumes.On()}
}

// controlPlaneFirst is what a master needs before its kubelet can start the control plane:
// everything else of the bundle (the addons' images, the tools) is shipped while the API server
// starts.
func controlPlaneFirst(name string) bool {
	switch name {
	case "kubelet", "bridge", "host-local", "loopback", "portmap", bundle.APIProxyFile,
		"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "pause":
		return true
	}
	return false
}

// etcdHostPart is what an external etcd's host needs of the bundle: kubelet and the images of
// etcd's static pod, and the scheduled snapshots' program.
func etcdHostPart(name string) bool {
	switch name {
	case "kubelet", "etcd", "pause", bundle.EtcdSnapshotFile:
		return true
	}
	return false
}

const bundleUpToDate = "bundle up to date"

// shipRest ships master n the part of the bundle need names after its control plane started,
// and reports it as the rest of the bundle.
func (t *hop) shipRest(ctx context.Context, n inventory.Node, h remote.Host, need bundle.Need, r progress.Reporter) error {
	_, msg, err := t.ship(ctx, h, need, nil, r)
	if err != nil {
		return remote.WithHost(n.Name, err)
	}
	if msg != bundleUpToDate {
		r(progress.Event{Kind: progress.HostDone, Host: n.Name, Message: "rest of the " + msg})
	}
	return nil
}

// shipment is what ship did on a host: uploaded (HostPlan) and taken from the masters'
// registries (got).
type shipment struct {
	bundle.HostPlan
	got bundle.Fetched
}

// installed says whether the shipment put a new binary in place, however it reached the host
// (uploaded or taken from the masters' registries): with the runtime's part, containerd
// restarts on it.
func (s shipment) installed() bool { return len(s.Install)+len(s.got.Files) > 0 }

// ship brings h up to date with the part of the bundle need names, first from the masters'
// registries when mirrors names them, and says what it did.
func (hp *hop) ship(ctx context.Context, h remote.Host, need bundle.Need, mirrors []string, r progress.Reporter) (shipment, string, error) {
	now := hp.rc.o.Now
	t := now()
	p, got, err := bundle.ShipVia(ctx, h, hp.inv.Bundle, hp.manifest, need, uploadProgress(r, now), mirrors, hostpath.CACert)
	s := shipment{HostPlan: p, got: got}
	for _, f := range append(slices.Clone(p.Install), got.Files...) {
		// A new binary is a written file: a new kubelet restarts kubelet (isKubeletInput).
		hp.files.noteWritten(h.Name(), templates.File{Path: f.Install}, true)
	}
	if err != nil {
		return s, "", err
	}
	if p.Empty() && got.Empty() {
		return s, bundleUpToDate, nil
	}
	msg := fmt.Sprintf("bundle: %d files, %d images, %d MiB in %s", len(p.Install), len(p.Import), p.Bytes()>>20, now().Sub(t).Round(100*time.Millisecond))
	if !got.Empty() {
		msg = fmt.Sprintf("bundle: %d files, %d images from the masters' registries, %d files, %d images (%d MiB) uploaded in %s",
			len(got.Files), len(got.Images), len(p.Install), len(p.Import), p.Bytes()>>20, now().Sub(t).Round(100*time.Millisecond))
	}
	if got.NoCurl && len(p.Install) > 0 {
		msg += " (no curl on this host to take files from the masters)"
	}
	if len(p.Pin) > 0 {
		msg += fmt.Sprintf("; %d images pinned against kubelet's image garbage collection", len(p.Pin))
	}
	return s, msg, nil
}

// uploadProgress reports a host's large uploads at most every two seconds.
func uploadProgress(r progress.Reporter, now func() time.Time) bundle.Progress {
	var mu sync.Mutex
	last := map[string]time.Time{}
	return func(host, artifact string, sent, total int64) {
		mu.Lock()
		t := now()
		if t.Sub(last[host]) < 2*time.Second {
			mu.Unlock()
			return
		}
		last[host] = t
		mu.Unlock()
		r(progress.Event{Kind: progress.Info, Host: host, Message: fmt.Sprintf("uploading %s: %d of %d MiB", artifact, sent>>20, total>>20)})
	}
}

// loadModulesScript loads the kernel modules containerd and bridged pod traffic need, where the
// kernel has not got them yet (built-in modules need nothing); the modules-load.d file loads
// them at boot.
const loadModulesScript = `{ grep -qw overlay /proc/filesystems || modprobe overlay; } && { [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ] || modprobe br_netfilter; }`

// configureRuntime configures containerd and the kernel settings on one host; containerd
// restarts only when its config, its unit or (installed from the bundle) its binaries
// changed, or when the containerd that runs is not its installed binary (runtimeStale). It
// says what it did.
func (hp *hop) configureRuntime(ctx context.Context, n inventory.Node, h remote.Host, installed bool) (string, error) {
	if err := push(ctx, hp.files, h, isRuntimeFile); err != nil {
		return "", err
	}
	f := hp.rc.fleet.Facts(n.Name)
	stale := ""
	if !installed {
		stale = runtimeStale(hp.inv, f)
	}
	wrote := func(pred func(string) bool) bool { return hp.files.wrote(n.Name, pred) }
	cmds := []string{loadModulesScript}
	// Only the settings that differ are written: a host may hold a machine-wide one read-only
	// at the right value (a container sharing its kernel), and the file applies them at boot.
	var set []string
	for _, s := range templates.SysctlsFor(hp.inv.Networking.DualStack()) {
		if f.Sysctls[s.Key] != s.Value {
			set = append(set, s.Key+"="+s.Value)
		}
	}
	if len(set) > 0 {
		cmds = append(cmds, "sysctl -q -w "+strings.Join(set, " "))
	}
	routeUnit := wrote(func(p string) bool { return p == hostpath.ServiceRouteUnitPath })
	if routeUnit || wrote(func(p string) bool { return p == hostpath.ContainerdUnitPath }) {
		cmds = append(cmds, "systemctl daemon-reload")
	}
	restart := containerdRestarts(wrote, installed || stale != "")
	if restart {
		cmds = append(cmds, "systemctl restart containerd")
	}
	cmds = append(cmds, "{ systemctl is-enabled -q containerd || systemctl enable -q containerd; }", "{ systemctl is-active -q containerd || systemctl start containerd; }")
	if n.Role != inventory.RoleEtcd { // an etcd host reaches no Service
		cmds = append(cmds, serviceRouteScript(routeUnit))
	}
	out, err := remote.Output(ctx, h, strings.Join(cmds, " && "))
	if err != nil {
		return "", err
	}
	var what string
	switch {
	case installed:
		what = "containerd (re)started on the bundle's binaries"
	case stale != "":
		what = "containerd restarted: " + stale
	case restart:
		what = "containerd restarted"
	default:
		what = "containerd unchanged"
	}
	if devs := slices.Compact(strings.Fields(string(out))); len(devs) > 0 {
		what += fmt.Sprintf("; service subnet routed through %s by %s (no other route covers it)", strings.Join(devs, " and "), hostpath.ServiceRouteUnit)
	}
	return what, nil
}

// serviceRouteScript enables and starts the service-route unit (restarts it when its file was
// written), and prints the interface of the route it added, if it added one.
func serviceRouteScript(written bool) string {
	script := unitScript(hostpath.ServiceRouteUnit, written)
	for _, m := range []string{hostpath.ServiceRouteMarker, hostpath.ServiceRouteMarkerIPv6} {
		script += " && { [ ! -f " + m + " ] || cat " + m + "; }"
	}
	return script
}

// unitScript enables a systemd unit of kforge's and starts it, or restarts it.
func unitScript(unit string, restart bool) string {
	start := "{ systemctl is-active -q " + unit + " || systemctl start " + unit + "; }"
	if restart {
		start = "systemctl restart " + unit
	}
	return "{ systemctl is-enabled -q " + unit + " || systemctl enable -q " + unit + "; } && " + start
}

// startUnitScript enables and starts one of kforge's own units (the node-local API proxy,
// kforge-vip), restarting it when restart says so (its unit, binary or configuration was
// written: systemd reloads first).
func startUnitScript(unit string, restart bool) string {
	if restart {
		return "systemctl daemon-reload && " + unitScript(unit, true)
	}
	return unitScript(unit, false)
}

// hasUnit says whether an earlier run installed the unit at unitPath on a host (the facts
// hashed it).
func hasUnit(f *facts.Facts, unitPath string) bool {
	if f == nil {
		return false
	}
	_, ok := f.Files[unitPath]
	return ok
}

// stopUnitScript stops and disables one of kforge's units (the node-local API proxy,
// kforge-vip, which releases the virtual IP) before its files go.
func stopUnitScript(unit, unitPath string) string {
	return scripts.Command("stop-unit", "unit", unit, "unit_path", unitPath, "said", "stopped and disabled")
}

// retireUnitScript stops, disables and removes one of kforge's units and its files, printing
// "removed" when the unit was there.
func retireUnitScript(unit, unitPath string, files ...string) string {
	return scripts.Command("retire-unit", "unit", unit, "unit_path", unitPath, "files", scripts.Lines(files))
}

// containerdRestarts says whether containerd restarts on a host: when its binaries were
// installed from the bundle, or its config or unit written (wrote says whether a path matching
// pred was, or would be, written).
func containerdRestarts(wrote func(pred func(string) bool) bool, installed bool) bool {
	return installed || wrote(func(p string) bool { return p == hostpath.ContainerdConfigPath || p == hostpath.ContainerdUnitPath })
}

// runtimeStale says why the containerd that runs on a host is not the bundle's binary installed
// there ("it runs 2.3.7, its binary is 2.4.2"): the binary was replaced and containerd not
// restarted, by an earlier run that failed in between or by anything else. "" when they agree,
// when containerd does not answer (it starts anyway), or when the runtime is the host's own.
func runtimeStale(c *inventory.Cluster, f *facts.Facts) string {
	if f == nil || c.ContainerRuntime.Install != inventory.RuntimeFromBundle || !f.Runtime.Answering {
		return ""
	}
	b := f.Binaries["containerd"]
	if b.Path != path.Join(hostpath.RuntimeBinDir, "containerd") {
		return ""
	}
	running, installed := facts.VersionNumber(f.Runtime.Version), facts.VersionNumber(b.Version)
	if running == "" || installed == "" || running == installed {
		return ""
	}
	return fmt.Sprintf("it ran %s, its binary is %s", running, installed)
}

// kubeletRestarts says whether kubelet restarts on a host: when one of its inputs was written.
func kubeletRestarts(wrote func(pred func(string) bool) bool) bool { return wrote(isKubeletInput) }

func isRuntimeFile(p string) bool {
	switch p {
	case hostpath.SysctlFile, hostpath.ContainerdConfigPath, hostpath.ContainerdUnitPath, hostpath.ModulesLoadFile, hostpath.ServiceRouteUnitPath:
		return true
	}
	return false
}

// isKubeletInput says whether a change of p needs a kubelet restart.
func isKubeletInput(p string) bool {
	if p == hostpath.KubeletServerCert || p == hostpath.KubeletServerKey { // kubelet reloads them
		return false
	}
	return p == hostpath.DefaultKubeletPath || strings.HasPrefix(p, hostpath.KubeletDir+"/") || strings.HasPrefix(p, hostpath.KubeletUnitPath) ||
		p == hostpath.KubeletKubeconfig || p == hostpath.BootstrapKubeletConfig || p == hostpath.PKIDir+"/ca.crt"
}

// startKubelet (re)starts kubelet on h when its inputs changed, or starts it when it is not
// running; an unchanged running kubelet is left alone.
func startKubelet(ctx context.Context, files *hostFiles, h remote.Host) (string, error) {
	var cmds []string
	if files.wrote(h.Name(), func(p string) bool { return strings.HasPrefix(p, "/etc/systemd/system/") }) {
		cmds = append(cmds, "systemctl daemon-reload")
	}
	cmds = append(cmds, "{ systemctl is-enabled -q kubelet || systemctl enable -q kubelet; }")
	what := "kubelet unchanged"
	if kubeletRestarts(func(pred func(string) bool) bool { return files.wrote(h.Name(), pred) }) {
		cmds = append(cmds, "systemctl restart kubelet")
		what = "kubelet restarted"
	} else {
		cmds = append(cmds, "{ systemctl is-active -q kubelet || { systemctl start kubelet && echo started; }; }")
	}
	out, err := remote.Output(ctx, h, strings.Join(cmds, " && "))
	if strings.Contains(string(out), "started") {
		what = "kubelet started"
	}
	return what, err
}

// hostFiles are the files each host should have (render sets them, pod-network adds CNI
// configs) and what pushing them changed this run. Safe for concurrent use.
type hostFiles struct {
	mu       sync.Mutex
	want     map[string][]templates.File
	written  map[string]map[string]bool  // by host: paths written this run
	replaced map[string][]templates.File // by host: static-pod manifests that replaced another
}

func newHostFiles() *hostFiles {
	return &hostFiles{want: map[string][]templates.File{}, written: map[string]map[string]bool{}, replaced: map[string][]templates.File{}}
}

// unwritten is a copy of the files each host should have, with nothing written yet: an
// upgrade's own record of what it pushes of apply's rendered target.
func (hf *hostFiles) unwritten() *hostFiles {
	hf.mu.Lock()
	defer hf.mu.Unlock()
	c := newHostFiles()
	for host, files := range hf.want {
		c.want[host] = slices.Clone(files)
	}
	return c
}

func (hf *hostFiles) set(host string, files []templates.File) {
	hf.mu.Lock()
	defer hf.mu.Unlock()
	hf.want[host] = files
}

func (hf *hostFiles) add(host string, f templates.File) {
	hf.mu.Lock()
	defer hf.mu.Unlock()
	hf.want[host] = append(hf.want[host], f)
}

func (hf *hostFiles) get(host string, scope func(string) bool) []templates.File {
	hf.mu.Lock()
	defer hf.mu.Unlock()
	var out []templates.File
	for _, f := range hf.want[host] {
		if scope == nil || scope(f.Path) {
			out = append(out, f)
		}
	}
	return out
}

func (hf *hostFiles) noteWritten(host string, f templates.File, replaced bool) {
	hf.mu.Lock()
	defer hf.mu.Unlock()
	if hf.written[host] == nil {
		hf.written[host] = map[string]bool{}
	}
	hf.written[host][f.Path] = true
	// kubelet runs the manifests in its static-pod directory, not its dot-files (kforge's marker).
	if replaced && path.Dir(f.Path) == hostpath.ManifestsDir && !strings.HasPrefix(path.Base(f.Path), ".") {
		hf.replaced[host] = append(hf.replaced[host], f)
	}
}

func (hf *hostFiles) wrote(host string, pred func(string) bool) bool {
	hf.mu.Lock()
	defer hf.mu.Unlock()
	for p := range hf.written[host] {
		if pred(p) {
			return true
		}
	}
	return false
}

func (hf *hostFiles) countWritten(host string) int {
	hf.mu.Lock()
	defer hf.mu.Unlock()
	return len(hf.written[host])
}

func (hf *hostFiles) replacedManifests(host string) []templates.File {
	hf.mu.Lock()
	defer hf.mu.Unlock()
	return hf.replaced[host]
}

// push uploads the files of h that differ from what the host has, atomically, and notes which
// were written. Only those paths in scope are pushed (nil: all).
func push(ctx context.Context, files *hostFiles, h remote.Host, scope func(path string) bool) error {
	want, have, err := wantAndHave(ctx, files, h, scope)
	if err != nil {
		return err
	}
	return upload(ctx, files, h, toWrite(want, have), have)
}

// wantAndHave are h's files in scope and the hashes of what the host has at their paths.
func wantAndHave(ctx context.Context, files *hostFiles, h remote.Host, scope func(path string) bool) ([]templates.File, map[string]string, error) {
	want := files.get(h.Name(), scope)
	if len(want) == 0 {
		return nil, nil, nil
	}
	paths := make([]string, len(want))
	for i, f := range want {
		paths[i] = f.Path
	}
	have, err := hashes(ctx, h, paths)
	return want, have, err
}

// upload writes files to h and notes each as written, replacing another where have (hashes of
// the host's files) held one.
func upload(ctx context.Context, files *hostFiles, h remote.Host, write []templates.File, have map[string]string) error {
	for _, f := range write {
		u := remote.Bytes(f.Path, f.Data, f.Mode)
		u.UID, u.GID = f.UID, f.GID
		if err := h.Upload(ctx, u); err != nil {
			return err
		}
		files.noteWritten(h.Name(), f, have[f.Path] != "")
	}
	return nil
}

// toWrite are the files of want whose content the host does not have: have maps a path to the
// sha256 of the file there (hashes). apply pushes them; plan shows them.
func toWrite(want []templates.File, have map[string]string) []templates.File {
	var out []templates.File
	for _, f := range want {
		if have[f.Path] != f.State() {
			out = append(out, f)
		}
	}
	return out
}

// hashes returns the state of each path that is a regular file on h (templates.File.State: its
// sha256, mode and owner), in one command.
func hashes(ctx context.Context, h remote.Host, paths []string) (map[string]string, error) {
	var b strings.Builder
	b.WriteString("for f in")
	for _, p := range paths {
		b.WriteString(" " + remote.Quote(p))
	}
	b.WriteString(`; do [ -f "$f" ] && set -- "$@" "$f"; done; [ $# -eq 0 ] || { sha256sum -- "$@" && stat -c 'meta %a %u:%g %n' -- "$@"; }; true`)
	out, err := remote.Output(ctx, h, b.String())
	if err != nil {
		return nil, err
	}
	sums, meta := map[string]string{}, map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "meta "); ok {
			if f := strings.SplitN(rest, " ", 3); len(f) == 3 {
				meta[f[2]] = f[0] + " " + f[1]
			}
		} else if sum, p, ok := strings.Cut(line, "  "); ok {
			sums[p] = sum
		}
	}
	m := map[string]string{}
	for p, sum := range sums {
		m[p] = strings.TrimSpace(sum + " " + meta[p])
	}
	return m, nil
}

// jobs are goroutines one step starts and a later step waits for.
type jobs struct {
	mu      sync.Mutex
	pending []chan error
}

func (j *jobs) start(fn func() error) {
	done := make(chan error, 1)
	j.mu.Lock()
	j.pending = append(j.pending, done)
	j.mu.Unlock()
	go func() { done <- fn() }()
}

// wait waits for every job started so far and returns their errors.
func (j *jobs) wait(ctx context.Context) error {
	j.mu.Lock()
	pending := j.pending
	j.pending = nil
	j.mu.Unlock()
	var errs []error
	for _, ch := range pending {
		select {
		case err := <-ch:
			errs = append(errs, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return errors.Join(errs...)
}
