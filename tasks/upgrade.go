package tasks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/facts"
	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/release"
	"github.com/kforge/kforge/remote"
)

// An upgrade is what apply does when the cluster runs an older Kubernetes than the inventory
// says: apply's upgrade step reads the route and walks the Upgrade's own list (Upgrade.Steps).
// The route comes from the hosts themselves (each master's kubelet binary and kube-apiserver
// manifest, each joined worker's kubelet), so a run that was interrupted is finished by the
// next from where it stopped, and nothing is done twice:
//
//  1. route: the control plane moves one minor at a time (1.35 → 1.36 → 1.37), through the
//     bundle's release of each minor; a downgrade, or a minor the bundle lacks, is refused
//     before anything changes, naming the bundle to build;
//  2. health: the cluster must be healthy (every node Ready, every kube-system workload ready;
//     apply --force skips this); snapshot: an etcd snapshot is saved to the state dir and
//     verified;
//  3. addon-images: every node receives the images of the cluster's addons (kube-proxy,
//     CoreDNS, flannel, pause) of every hop, so a DaemonSet rolled out to a node not yet
//     upgraded finds its image (the bundle is offline: nothing is pulled);
//  4. per hop, masters one at a time: the hop's binaries and images, its manifests (etcd's
//     version too), kubelet restarted, the static pods waited on until they run the new
//     manifests, the node Ready at the new version; then the addons follow the hop's release;
//  5. workers in batches (apply --worker-batch), straight to the target (kubelets may be three
//     minors behind the API server): cordon, drain (PodDisruptionBudgets respected, within
//     apply's --timeout), new runtime and kubelet, Ready at the new version, uncordon.
//
// A drain that does not finish leaves the worker cordoned, annotated
// (kube.UpgradeCordonAnnotation), with an error that names the pods still there and the
// evictions refused: the next apply drains it again and uncordons it once upgraded.

// upgradeRoute is the way from what the cluster runs to the inventory's version.
type upgradeRoute struct {
	target  string
	from    string            // the oldest master's version
	running map[string]string // node → the version it runs now (masters: the lower of kubelet and kube-apiserver)
	hops    []string          // the control plane's versions, in order, ending at target (empty: masters are there)
	workers []inventory.Node  // joined workers behind target
}

// Upgrade is one walk of an upgradeRoute. Each hop is a plain value: the cluster at that
// version, rendered once; the last is apply's own render of the target.
type Upgrade struct {
	rc    *runContext
	route *upgradeRoute
	hops  []*hop   // the control plane's hops, ending at the target; just the target when the masters are there
	etcd  etcdPlan // how the etcd members start (apply's): an external etcd's hosts keep their bootstrap flags
}

// upgrade is apply's upgrade step: it reads the route and walks it (Upgrade.Steps); nothing
// when no node runs an older version than the inventory's.
func (a *Apply) upgrade(ctx context.Context, r progress.Reporter) error {
	rc := a.rc
	u, err := readUpgradeRoute(ctx, rc, a.target.manifest)
	if err != nil || u == nil {
		return err
	}
	r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("upgrade %s → %s: control plane %s, one master at a time; then %s, %s", strings.Join(running(rc, u), ", "), u.target, routeText(u.hops), count(len(u.workers), "worker"), atATime(workerBatch(rc.o)))})
	if len(a.etcd.join) > 0 {
		return fmt.Errorf("masters join the cluster (%s) while it is upgraded: finish the upgrade with the masters it has, then add them", strings.Join(keysOf(a.etcd.join), ", "))
	}
	if len(a.etcd.leave) > 0 {
		return fmt.Errorf("the inventory moves etcd off %s while the cluster is upgraded to %s: do one, then the other (set kubernetesVersion back to %s and apply the move, then upgrade)", strings.Join(fleet.Names(a.etcd.leave), ", "), u.target, u.from)
	}
	up, err := newUpgrade(rc, u, a.target, a.etcd)
	if err != nil {
		return err
	}
	_, err = Run(ctx, up.Steps(), r, rc.o.Now)
	return err
}

// newUpgrade prepares the walk of route u to target, rendering each hop before the target
// once (etcd members keep starting as ep says). The target's files are target's, rendered by
// apply; what the upgrade writes of them is its own (stage, after it, finds them in place).
func newUpgrade(rc *runContext, u *upgradeRoute, target *hop, ep etcdPlan) (*Upgrade, error) {
	up := &Upgrade{rc: rc, route: u, etcd: ep}
	for _, v := range u.hops {
		if v == target.inv.KubernetesVersion {
			break
		}
		h, err := atVersion(rc, v)
		if err != nil {
			return nil, err
		}
		if err := h.render(ep, len(removedMasters(rc.o.Removed))); err != nil {
			return nil, err
		}
		up.hops = append(up.hops, h)
	}
	up.hops = append(up.hops, &hop{rc: rc, inv: target.inv, manifest: target.manifest, files: target.files.unwritten()})
	return up, nil
}

// Steps is the upgrade, top to bottom: one step per hop of the control plane, one per batch
// of workers.
func (up *Upgrade) Steps() []Step {
	u, rc := up.route, up.rc
	t := up.hops[len(up.hops)-1]
	var l list
	l.add("upgrade-health", ThroughAPI, nil, up.healthy, "check that every node is Ready and every kube-system workload ready (an interrupted upgrade is finished whatever its health; --force upgrades anyway)")
	l.add("upgrade-snapshot", OnHosts, rc.fleet.Names(rc.inv.EtcdRole()), up.snapshot, "save an etcd snapshot of the cluster at %s to the state dir and verify it", u.from)
	l.add("upgrade-images", OnHosts, slices.Sorted(maps.Keys(u.running)), up.addonImages, "give every node the addons' images of %s (through the masters' registries when they serve the bundle)", strings.Join(up.versions(), ", "))
	for _, h := range up.hops[:len(u.hops)] {
		v := h.inv.KubernetesVersion
		if etcdHosts := rc.fleet.Names(inventory.RoleEtcd); len(etcdHosts) > 0 {
			l.add("upgrade-etcd-"+v, OnHosts, etcdHosts, func(ctx context.Context, r progress.Reporter) error {
				return up.etcdHosts(ctx, h, r)
			}, "before the API servers, one etcd host at a time, %s to %s's etcd %s: kubelet, the etcd image and manifest, the member started anew and ready (the health gate) before the next", strings.Join(etcdHosts, ", "), v, h.inv.Release().Etcd)
		}
		var masters []string
		for _, n := range rc.fleet.Nodes(inventory.RoleMaster) {
			if was, ok := u.running[n.Name]; ok && release.Compare(was, v) < 0 {
				masters = append(masters, n.Name)
			}
		}
		l.add("upgrade-masters-"+v, OnHosts, masters, func(ctx context.Context, r progress.Reporter) error {
			return up.masters(ctx, h, r)
		}, "one at a time, %s to %s: runtime, binaries and images, then manifests under the new kubelet (etcd first; each static pod replaced once and waited on), Ready at %s", strings.Join(masters, ", "), v, v)
		l.add("upgrade-addons-"+v, ThroughAPI, nil, func(ctx context.Context, r progress.Reporter) error {
			return upgradeAddons(ctx, h, slices.Sorted(maps.Keys(u.running)), r)
		}, "move the addons (kube-proxy, CoreDNS, flannel, the NetworkPolicy agent, metrics-server, the local volumes' provisioner) to %s, and wait until each has rolled out (before any worker is drained)", v)
	}
	if len(u.workers) > 0 {
		workers := fleet.Names(u.workers)
		if t.inv.BundleFromMasters() {
			l.add("upgrade-registries", OnHosts, rc.fleet.Names(inventory.RoleMaster), func(ctx context.Context, r progress.Reporter) error {
				for _, n := range rc.fleet.Nodes(inventory.RoleMaster) {
					t.fillRegistry(ctx, n, rc.fleet.Host(n.Name), r)
				}
				return nil
			}, "fill the masters' registries with %s, which the workers take", t.inv.KubernetesVersion)
		}
		l.add("upgrade-workers", OnHosts, workers, func(ctx context.Context, r progress.Reporter) error {
			return up.workers(ctx, t, r)
		}, "%s, %s, to %s: cordon, drain, runtime and kubelet, Ready, uncordon", strings.Join(workers, ", "), atATime(workerBatch(rc.o)), t.inv.KubernetesVersion)
	}
	return l // mark-nodes uncordons what an interrupted run left cordoned (uncordonUpgraded)
}

// versions are the hops' versions.
func (up *Upgrade) versions() []string {
	var out []string
	for _, h := range up.hops {
		out = append(out, h.inv.KubernetesVersion)
	}
	return out
}

// masters moves the masters behind hop h to it, one at a time.
func (up *Upgrade) masters(ctx context.Context, h *hop, r progress.Reporter) error {
	u := up.route
	for _, n := range up.rc.fleet.Nodes(inventory.RoleMaster) {
		if v, ok := u.running[n.Name]; !ok || release.Compare(v, h.inv.KubernetesVersion) >= 0 {
			continue // new (render and stage bring it up), or already there
		}
		if err := upgradeMaster(ctx, h, n, r); err != nil {
			return remote.WithHost(n.Name, err)
		}
		u.running[n.Name] = h.inv.KubernetesVersion
	}
	return nil
}

// etcdHosts moves an external etcd's hosts to hop h, one at a time (rollEtcdHost): each member
// runs h's etcd and answers before the next one is touched, and before any API server moves.
func (up *Upgrade) etcdHosts(ctx context.Context, h *hop, r progress.Reporter) error {
	for _, n := range up.rc.fleet.Nodes(inventory.RoleEtcd) {
		// The hop's files land under its kubelet, as on a master: it starts the new member once.
		if err := h.rollEtcdHost(ctx, n, up.etcd, &staging{newKubelet: true}, r); err != nil {
			return remote.WithHost(n.Name, err)
		}
	}
	return nil
}

// workers moves the workers behind the target to it, in batches.
func (up *Upgrade) workers(ctx context.Context, t *hop, r progress.Reporter) error {
	for batch := range slices.Chunk(up.route.workers, workerBatch(up.rc.o)) {
		g, gctx := errgroup.WithContext(ctx)
		for _, n := range batch {
			g.Go(func() error { return remote.WithHost(n.Name, upgradeWorker(gctx, t, n, r)) })
		}
		if err := g.Wait(); err != nil {
			return err
		}
	}
	return nil
}

// readUpgradeRoute reads what each node runs and returns the way to the inventory's version,
// or nil when there is nothing to upgrade (a new cluster, or one at the version already).
// manifest is the bundle's release of the inventory's version (nil without a bundle).
func readUpgradeRoute(ctx context.Context, rc *runContext, manifest *bundle.Manifest) (*upgradeRoute, error) {
	inv := rc.inv
	u := &upgradeRoute{target: inv.KubernetesVersion, running: map[string]string{}}
	behind := false
	var cp string // the oldest master
	for _, n := range rc.fleet.Nodes(inventory.AnyNode) {
		v, err := runningVersion(ctx, rc, n)
		if err != nil {
			return nil, remote.WithHost(n.Name, err)
		}
		if v == "" {
			continue // not in the cluster yet
		}
		u.running[n.Name] = v
		switch c := release.Compare(v, u.target); {
		case c > 0:
			return nil, fmt.Errorf("%s runs Kubernetes %s, newer than the inventory's %s: Kubernetes does not support downgrades (set kubernetesVersion back to %s, or restore an etcd snapshot taken before the upgrade)", n.Name, v, u.target, v)
		case c < 0:
			behind = true
			if n.Role == inventory.RoleWorker {
				u.workers = append(u.workers, n)
			}
		}
		if n.Role == inventory.RoleMaster && (cp == "" || release.Compare(v, cp) < 0) {
			cp = v
		}
	}
	if !behind {
		return nil, nil
	}
	u.from = cmp.Or(cp, u.target)
	if manifest == nil {
		return nil, fmt.Errorf("the cluster runs %s; an upgrade to %s needs a bundle that holds every release on the way (kforge bundle build --kubernetes %s), set as the inventory's bundle", strings.Join(running(rc, u), ", "), u.target, u.target)
	}
	for _, w := range u.workers {
		if err := release.KubeletSkewOK(u.target, u.running[w.Name]); err != nil {
			return nil, fmt.Errorf("%s: %w; upgrade it to within three minors of %s first", w.Name, err, u.target)
		}
	}
	if cp == "" || release.Compare(cp, u.target) == 0 {
		return u, nil // the masters are there: workers only
	}
	held, err := bundleVersions(inv.Bundle)
	if err != nil {
		return nil, err
	}
	from, to := version.MustParseSemantic(cp), version.MustParseSemantic(u.target)
	var missing []string
	for minor := from.Minor() + 1; minor < to.Minor(); minor++ {
		v := newestOfMinor(held, to.Major(), minor)
		if v == "" {
			missing = append(missing, fmt.Sprintf("v%d.%d", to.Major(), minor))
			continue
		}
		u.hops = append(u.hops, v)
	}
	if len(missing) > 0 {
		var want []string
		for _, m := range missing {
			v := m + ".x"
			for _, r := range release.All() {
				if r.Minor == m {
					v = r.Kubernetes // the catalogue's release of that minor
				}
			}
			want = append(want, v)
		}
		return nil, fmt.Errorf("the control plane runs %s and moves one minor at a time to %s, through %s, which bundle %s does not hold (it holds %s): build one that does, kforge bundle build --kubernetes %s -o %s",
			cp, u.target, strings.Join(missing, ", "), inv.Bundle, strings.Join(held, ", "), strings.Join(release.SortVersions(append(append([]string{cp}, want...), u.target)), ","), remote.Quote(inv.Bundle))
	}
	u.hops = append(u.hops, u.target)
	return u, nil
}

// running lists what the nodes run, "name version", in inventory order.
func running(rc *runContext, u *upgradeRoute) []string {
	var out []string
	for _, n := range rc.fleet.Nodes(inventory.AnyNode) {
		if v, ok := u.running[n.Name]; ok {
			out = append(out, n.Name+" "+v)
		}
	}
	return out
}

// apiserverImageRE finds the version in a kube-apiserver manifest's image.
var apiserverImageRE = regexp.MustCompile(`image: \S*/kube-apiserver:(v\d+\.\d+\.\d+)`)

// runningVersion is the Kubernetes version a node of the cluster runs: its kubelet binary's
// (kforge's: the drop-in is there), and on a master the lower of that and its kube-apiserver
// manifest's, since a run may have been interrupted between the two. "" for a host that is not
// in the cluster yet: a master without etcd data, a worker that has not joined.
func runningVersion(ctx context.Context, rc *runContext, n inventory.Node) (string, error) {
	f := rc.fleet.Facts(n.Name)
	if f == nil {
		return "", nil
	}
	b := f.Binaries["kubelet"]
	if !f.KubeletDropIn || b.Path != hostpath.DefaultKubeletPath || b.Version == "" {
		return "", nil
	}
	v := "v" + strings.TrimPrefix(b.Version, "v")
	switch {
	case n.Role == inventory.RoleWorker && !rc.joined(n.Name):
		return "", nil
	case n.Role == inventory.RoleMaster && !masterJoined(rc.inv, f):
		return "", nil
	case n.Role == inventory.RoleMaster:
		m, err := remote.ReadFile(ctx, rc.fleet.Host(n.Name), path.Join(hostpath.ManifestsDir, "kube-apiserver.yaml"))
		if err != nil {
			return "", fmt.Errorf("read its kube-apiserver manifest: %w", err)
		}
		if s := apiserverImageRE.FindSubmatch(m); s != nil && release.Compare(string(s[1]), v) < 0 {
			v = string(s[1])
		}
	}
	return v, nil
}

// masterJoined says whether a master is part of the cluster already: its etcd member has data
// (stacked etcd), or its API server's manifest is there (an external etcd: the master holds no
// etcd data).
func masterJoined(c *inventory.Cluster, f *facts.Facts) bool {
	if c.ExternalEtcd() {
		return runsAPIServer(f)
	}
	return len(f.EtcdDataDir) > 0
}

// bundleVersions are the Kubernetes versions bundle dir holds.
func bundleVersions(dir string) ([]string, error) {
	m, err := bundle.LoadManifest(dir)
	if err != nil {
		return nil, err
	}
	return m.Kubernetes(), nil
}

// newestOfMinor is the newest of versions with that major and minor, or "".
func newestOfMinor(versions []string, major, minor uint) string {
	best := ""
	for _, v := range versions {
		sv, err := version.ParseSemantic(v)
		if err != nil || sv.Major() != major || sv.Minor() != minor {
			continue
		}
		if best == "" || release.Compare(v, best) > 0 {
			best = v
		}
	}
	return best
}

func routeText(hops []string) string {
	if len(hops) == 0 {
		return "already there"
	}
	return "→ " + strings.Join(hops, " → ")
}

// healthy refuses to start upgrading a cluster that is not healthy (apply --force upgrades
// anyway): every node Ready and every kube-system workload ready, with what is not. An upgrade
// that an interrupted run left half done (nodes at different versions) is finished whatever
// the health it left behind.
func (up *Upgrade) healthy(ctx context.Context, r progress.Reporter) error {
	u := up.route
	api, err := up.rc.clients()
	if err != nil {
		return err
	}
	st, err := kube.CheckReady(ctx, api.Typed, slices.Sorted(maps.Keys(u.running)), []string{"kube-system"})
	if err == nil && st.Ready() {
		return nil
	}
	if err == nil {
		err = &kube.NotReadyError{Last: st}
	}
	switch {
	case u.resuming():
		r(progress.Event{Kind: progress.Info, Message: "finishing an interrupted upgrade; the cluster is not healthy yet: " + err.Error()})
		return nil
	case up.rc.o.Force:
		r(progress.Event{Kind: progress.Info, Message: "the cluster is not healthy; upgrading anyway (--force): " + err.Error()})
		return nil
	}
	return &UnhealthyError{Err: err}
}

// resuming says whether an earlier run started this upgrade: its nodes run different versions.
func (u *upgradeRoute) resuming() bool {
	seen := map[string]bool{}
	for _, v := range u.running {
		seen[v] = true
	}
	return len(seen) > 1
}

// UnhealthyError is an upgrade refused because the cluster is not healthy.
type UnhealthyError struct{ Err error }

func (e *UnhealthyError) Error() string {
	return "the cluster is not healthy, so it is not upgraded (fix what is below, or apply --force to upgrade anyway): " + e.Err.Error()
}
func (e *UnhealthyError) Unwrap() error { return e.Err }
func (e *UnhealthyError) Details() []string {
	var d interface{ Details() []string }
	if errors.As(e.Err, &d) {
		more := d.Details()
		if len(more) > 0 && more[0] == e.Err.Error() {
			more = more[1:] // the headline, which this one already says
		}
		return append([]string{e.Error()}, more...)
	}
	return []string{e.Error()}
}

// snapshot saves and verifies an etcd snapshot in the state dir, recorded with the version the
// cluster runs: etcd snapshot's own steps.
func (up *Upgrade) snapshot(ctx context.Context, r progress.Reporter) error {
	return snapshotBefore(ctx, up.rc.inv, up.rc.o, SnapshotOptions{Kubernetes: up.route.from}, "the upgrade", r)
}

// snapshotBefore saves and verifies an etcd snapshot of cluster c's etcd in the state dir
// before what, with etcd snapshot's own steps, and says where it is.
func snapshotBefore(ctx context.Context, c *inventory.Cluster, o Options, so SnapshotOptions, what string, r progress.Reporter) error {
	x := NewEtcdSnapshot(c, o, so)
	defer x.Close()
	for _, s := range x.Steps() {
		if err := s.Run(ctx, r); err != nil {
			return fmt.Errorf("etcd snapshot before %s: %w", what, err)
		}
	}
	r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("etcd snapshot before %s: %s (revision %d, %s, sha256 %s)", what, x.Saved.File, x.Saved.Revision, mib(x.Saved.Size), x.Saved.SHA256)})
	return nil
}

// addonImage says whether a bundle artifact is an image of the cluster's addons (or pause),
// which every node may be asked to run before it is upgraded itself: the local volumes' helper
// runs on the node that holds a volume, whichever it is.
func addonImage(name string) bool {
	switch name {
	case "kube-proxy", "coredns", "flannel", "kube-network-policies", "metrics-server", "local-path-provisioner", "local-path-helper", "pause":
		return true
	}
	return false
}

// stageAddonImages imports every hop's addon images on every node of the cluster, in parallel
// (new hosts get their images when they are staged). When the masters serve the bundle
// (BundleFromMasters), the workstation uploads them to the masters only: each master adds them
// to its registry, and the other nodes take them from there (what they cannot take is uploaded,
// as at stage).
func (up *Upgrade) addonImages(ctx context.Context, r progress.Reporter) error {
	u, hops, f := up.route, up.hops, up.rc.fleet
	nodes := slices.DeleteFunc(f.Nodes(inventory.AnyNode), func(n inventory.Node) bool { _, ok := u.running[n.Name]; return !ok })
	need := bundle.Need{Only: addonImage, LocalVolumes: up.rc.inv.LocalVolumes.On()}
	ship := func(ctx context.Context, n inventory.Node, host remote.Host, mirrors []string) error {
		for _, h := range hops {
			if _, msg, err := h.ship(ctx, host, need, mirrors, r); err != nil {
				return err
			} else if msg != bundleUpToDate {
				r(progress.Event{Kind: progress.HostDone, Host: n.Name, Message: "addon images of " + h.inv.KubernetesVersion + ": " + msg})
			}
		}
		return nil
	}
	if !up.rc.inv.BundleFromMasters() {
		return fleet.EachOf(ctx, f, nodes, func(ctx context.Context, n inventory.Node, host remote.Host) error {
			return ship(ctx, n, host, nil)
		})
	}
	var images []bundle.Image
	for _, h := range hops {
		_, ims := bundle.Served(h.manifest, need)
		for _, im := range ims {
			if !slices.ContainsFunc(images, func(o bundle.Image) bool { return o.Name == im.Name && o.Digest == im.Digest }) {
				images = append(images, im)
			}
		}
	}
	masters := slices.DeleteFunc(slices.Clone(nodes), func(n inventory.Node) bool { return n.Role != inventory.RoleMaster })
	if err := fleet.EachOf(ctx, f, masters, func(ctx context.Context, n inventory.Node, host remote.Host) error {
		if err := ship(ctx, n, host, nil); err != nil {
			return err
		}
		runFill(ctx, n, host, bundle.FillCommand(nil, images, bundle.FillAdd), fmt.Sprintf("registry: %d addon images added for the nodes", len(images)),
			"the addon images were not added to its registry (the nodes get them uploaded instead)", r)
		return nil
	}); err != nil {
		return err
	}
	others := slices.DeleteFunc(nodes, func(n inventory.Node) bool { return n.Role == inventory.RoleMaster })
	return fleet.EachOf(ctx, f, others, func(ctx context.Context, n inventory.Node, host remote.Host) error {
		return ship(ctx, n, host, hops[len(hops)-1].mirrorsFor(n))
	})
}

// upgradeMaster moves one master to hop h's version, in kubeadm's order: the runtime first
// (restarted only when the release changes it), then the hop's binaries and images, then its
// files (etcd's first, under a stopped API server: pushEtcdFirst) under the new kubelet, which
// replaces the static pods (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) once;
// kforge waits until they run the new manifests and answer their readiness checks, and for the
// node to report the new version. (kubeadm's order, manifests under the old kubelet and then
// the new kubelet, restarts the control plane twice: the new kubelet hashes each static pod
// anew. Restarting kubelet while it replaced kube-apiserver left the old one holding :6443 and
// the new one in CrashLoopBackOff for minutes: kubelet is stopped while the files land.)
func upgradeMaster(ctx context.Context, h *hop, n inventory.Node, r progress.Reporter) error {
	start := h.rc.o.Now()
	host := h.rc.fleet.Host(n.Name)
	api, err := h.rc.clients()
	if err != nil {
		return err
	}
	installed := false
	if h.inv.ContainerRuntime.Install == inventory.RuntimeFromBundle {
		p, _, err := h.ship(ctx, host, bundle.Need{Runtime: true, Only: bundle.IsRuntime}, nil, r)
		if err != nil {
			return err
		}
		installed = p.installed()
	}
	if _, err := h.configureRuntime(ctx, n, host, installed); err != nil {
		return err
	}
	if _, _, err := h.ship(ctx, host, bundleNeed(h.inv, inventory.RoleMaster), nil, r); err != nil {
		return err
	}
	if err := pushEtcdFirst(ctx, h.rc, h.files, n, host, nil, true, r); err != nil {
		return err
	}
	if err := h.waitMasterPods(ctx, n, n); err != nil {
		return err
	}
	if err := kube.WaitNodeVersion(ctx, api.Typed, n.Name, h.inv.KubernetesVersion, h.rc.o.Timeout); err != nil {
		return err
	}
	r(progress.Event{Kind: progress.HostDone, Host: n.Name, Duration: h.rc.o.Now().Sub(start), Message: "control plane at " + h.inv.KubernetesVersion})
	return nil
}

// upgradeAddons moves kube-proxy, CoreDNS, flannel, the NetworkPolicy agent, metrics-server and
// the local volumes' provisioner and helper to h's release, and waits until they have rolled
// out and every pod of theirs on nodes (the cluster's) is ready.
func upgradeAddons(ctx context.Context, h *hop, nodes []string, r progress.Reporter) error {
	k, err := h.addonKit()
	if err != nil {
		return err
	}
	var cs []kube.Change
	for _, a := range hopAddons(h.inv) {
		more, err := a(ctx, k)
		cs = append(cs, more...)
		if err != nil {
			return err
		}
	}
	r(progress.Event{Kind: progress.Info, Message: "addons of " + h.inv.KubernetesVersion + ": " + kube.Summary(cs)})
	api, err := h.rc.clients()
	if err != nil {
		return err
	}
	// Rolled out and ready before any worker is drained: a node whose kube-proxy is being
	// replaced does not follow the endpoints a drain moves.
	start := h.rc.o.Now()
	wctx, cancel := context.WithTimeout(ctx, h.rc.o.Timeout)
	defer cancel()
	if err := kube.WaitForReady(wctx, api.Typed, kube.WaitReadyInput{Nodes: nodes, Namespaces: addonNamespaces(h.inv)}); err != nil {
		return fmt.Errorf("the addons of %s: %w", h.inv.KubernetesVersion, err)
	}
	r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("addons of %s rolled out after %s", h.inv.KubernetesVersion, h.rc.o.Now().Sub(start).Round(100*time.Millisecond))})
	return nil
}

// workerBatch is how many workers an upgrade moves at once.
func workerBatch(o Options) int { return max(o.WorkerBatch, 1) }

// upgradeWorker moves one joined worker to h's version: cordon, drain, stage, kubelet
// restarted, Ready at the new version, uncordon.
func upgradeWorker(ctx context.Context, h *hop, n inventory.Node, r progress.Reporter) error {
	start := h.rc.o.Now()
	v := h.inv.KubernetesVersion
	api, err := h.rc.clients()
	if err != nil {
		return err
	}
	if err := kube.CordonForUpgrade(ctx, api.Typed, n.Name, v); err != nil {
		return err
	}
	evicted, err := kube.Drain(ctx, api.Typed, n.Name, h.rc.o.DrainTimeout)
	if err != nil {
		return fmt.Errorf("%w; it stays cordoned: the next apply drains it again and upgrades it (kubectl uncordon %s gives up)", err, n.Name)
	}
	did, err := h.stageHost(ctx, n, nil, r) // the masters' registries were filled before
	if err != nil {
		return err
	}
	reportStaged(r, h.rc.o.Now, n, start, did)
	if _, err := startKubelet(ctx, h.files, h.rc.fleet.Host(n.Name)); err != nil {
		return err
	}
	if err := kube.WaitNodeVersion(ctx, api.Typed, n.Name, v, h.rc.o.Timeout); err != nil {
		return err
	}
	if _, err := kube.UncordonAfterUpgrade(ctx, api.Typed, n.Name); err != nil {
		return err
	}
	r(progress.Event{Kind: progress.HostDone, Host: n.Name, Duration: h.rc.o.Now().Sub(start), Message: fmt.Sprintf("at %s (%s drained, uncordoned)", v, count(len(evicted), "pod"))})
	return nil
}

// uncordonUpgraded uncordons the nodes an interrupted upgrade left cordoned that run the
// inventory's version now.
func uncordonUpgraded(ctx context.Context, rc *runContext, r progress.Reporter) error {
	api, err := rc.clients()
	if err != nil {
		return err
	}
	cordoned, err := kube.CordonedForUpgrade(ctx, api.Typed)
	if err != nil {
		return err
	}
	for _, n := range slices.Sorted(maps.Keys(cordoned)) {
		if cordoned[n] != rc.inv.KubernetesVersion {
			continue
		}
		if ok, err := kube.UncordonAfterUpgrade(ctx, api.Typed, n); err != nil {
			return err
		} else if ok {
			r(progress.Event{Kind: progress.Info, Host: n, Message: "uncordoned: upgraded to " + cordoned[n]})
		}
	}
	return nil
}

func keysOf(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) }

func atATime(n int) string {
	if n == 1 {
		return "one at a time"
	}
	return fmt.Sprintf("%d at a time", n)
}
