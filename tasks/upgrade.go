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
	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/release"
	"github.com/kforge/kforge/remote"
)

// An upgrade is what apply does when the cluster runs an older Kubernetes than the inventory
// says. The route comes from the hosts themselves (each master's kubelet binary and
// kube-apiserver manifest, each joined worker's kubelet), so a run that was interrupted is
// finished by the next from where it stopped, and nothing is done twice:
//
//  1. route: the control plane moves one minor at a time (1.35 → 1.36 → 1.37), through the
//     bundle's release of each minor; a downgrade, or a minor the bundle lacks, is refused
//     before anything changes, naming the bundle to build;
//  2. before anything changes: the cluster must be healthy (every node Ready, every kube-system
//     workload ready; apply --force skips this) and an etcd snapshot is saved to the state dir
//     and verified;
//  3. every node receives the images of the cluster's addons (kube-proxy, CoreDNS, flannel,
//     pause) of every hop, so a DaemonSet rolled out to a node not yet upgraded finds its image
//     (the bundle is offline: nothing is pulled);
//  4. per hop, masters one at a time: the hop's binaries and images, its manifests (etcd's
//     version too), kubelet restarted, the static pods waited on until they run the new
//     manifests, the node Ready at the new version; then the addons follow the hop's release;
//  5. workers one at a time, straight to the target (kubelets may be three minors behind the
//     API server): cordon, drain (PodDisruptionBudgets respected, within apply's --timeout),
//     new runtime and kubelet, Ready at the new version, uncordon.
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

// upgrade is apply's upgrade step; see above. It does nothing when no node runs an older
// version than the inventory's.
func (a *Apply) upgrade(ctx context.Context, r progress.Reporter) error {
	u, err := a.upgradeRoute(ctx)
	if err != nil || u == nil {
		return err
	}
	r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("upgrade %s → %s: control plane %s, one master at a time; then %s, %s", strings.Join(a.running(u), ", "), u.target, routeText(u.hops), count(len(u.workers), "worker"), atATime(a.workerBatch()))})
	if len(a.etcd.join) > 0 {
		return fmt.Errorf("masters join the cluster (%s) while it is upgraded: finish the upgrade with the masters it has, then add them", strings.Join(keysOf(a.etcd.join), ", "))
	}
	if a.api.Clients.Typed == nil {
		if a.api, err = newAPIClients(a.inv, a.set, a.fleet, a.o.API); err != nil {
			return err
		}
	}
	if err := a.upgradeHealthy(ctx, r, u); err != nil {
		return err
	}
	if err := a.snapshotBeforeUpgrade(ctx, r, u.from); err != nil {
		return err
	}
	versions := u.hops // the control plane's hops, ending at the target
	if len(versions) == 0 {
		versions = []string{u.target} // the masters are there: the workers' version
	}
	hops := make([]*Apply, 0, len(versions))
	for _, v := range versions {
		h, err := a.atVersion(v)
		if err != nil {
			return err
		}
		if err := h.render(ctx, r); err != nil {
			return err
		}
		hops = append(hops, h)
	}
	if err := a.stageAddonImages(ctx, r, u, hops); err != nil {
		return err
	}
	for _, h := range hops[:len(u.hops)] {
		for _, n := range a.fleet.Nodes(inventory.RoleMaster) {
			if v, ok := u.running[n.Name]; !ok || release.Compare(v, h.inv.KubernetesVersion) >= 0 {
				continue // new (render and stage bring it up), or already there
			}
			if err := h.upgradeMaster(ctx, n, r); err != nil {
				return remote.WithHost(n.Name, err)
			}
			u.running[n.Name] = h.inv.KubernetesVersion
		}
		if err := h.upgradeAddons(ctx, r); err != nil {
			return err
		}
	}
	t := hops[len(hops)-1]
	if t.inv.BundleFromMasters() && len(u.workers) > 0 {
		// The workers take the new release from the masters' registries: fill them with it.
		for _, n := range a.fleet.Nodes(inventory.RoleMaster) {
			t.fillRegistry(ctx, n, a.fleet.Host(n.Name), r)
		}
	}
	for batch := range slices.Chunk(u.workers, a.workerBatch()) {
		g, gctx := errgroup.WithContext(ctx)
		for _, n := range batch {
			g.Go(func() error { return remote.WithHost(n.Name, t.upgradeWorker(gctx, n, r)) })
		}
		if err := g.Wait(); err != nil {
			return err
		}
	}
	return nil // mark-nodes uncordons what an interrupted run left cordoned (uncordonUpgraded)
}

// upgradeRoute reads what each node runs and returns the way to the inventory's version, or
// nil when there is nothing to upgrade (a new cluster, or one at the version already).
func (a *Apply) upgradeRoute(ctx context.Context) (*upgradeRoute, error) {
	u := &upgradeRoute{target: a.inv.KubernetesVersion, running: map[string]string{}}
	behind := false
	var cp string // the oldest master
	for _, n := range a.fleet.Nodes("") {
		v, err := a.runningVersion(ctx, n)
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
	if a.manifest == nil {
		return nil, fmt.Errorf("the cluster runs %s; an upgrade to %s needs a bundle that holds every release on the way (kforge bundle build --kubernetes %s), set as the inventory's bundle", strings.Join(a.running(u), ", "), u.target, u.target)
	}
	for _, w := range u.workers {
		if err := release.KubeletSkewOK(u.target, u.running[w.Name]); err != nil {
			return nil, fmt.Errorf("%s: %w; upgrade it to within three minors of %s first", w.Name, err, u.target)
		}
	}
	if cp == "" || release.Compare(cp, u.target) == 0 {
		return u, nil // the masters are there: workers only
	}
	held, err := bundleVersions(a.inv.Bundle)
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
			cp, u.target, strings.Join(missing, ", "), a.inv.Bundle, strings.Join(held, ", "), strings.Join(release.SortVersions(append(append([]string{cp}, want...), u.target)), ","), remote.Quote(a.inv.Bundle))
	}
	u.hops = append(u.hops, u.target)
	return u, nil
}

// running lists what the nodes run, "name version", in inventory order.
func (a *Apply) running(u *upgradeRoute) []string {
	var out []string
	for _, n := range a.fleet.Nodes("") {
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
func (a *Apply) runningVersion(ctx context.Context, n inventory.Node) (string, error) {
	f := a.fleet.Facts(n.Name)
	if f == nil {
		return "", nil
	}
	b := f.Binaries["kubelet"]
	if !f.KubeletDropIn || b.Path != hostpath.DefaultKubeletPath || b.Version == "" {
		return "", nil
	}
	v := "v" + strings.TrimPrefix(b.Version, "v")
	switch {
	case n.Role == inventory.RoleWorker && !a.joined(n.Name):
		return "", nil
	case n.Role == inventory.RoleMaster && len(f.EtcdDataDir) == 0:
		return "", nil
	case n.Role == inventory.RoleMaster:
		m, err := remote.ReadFile(ctx, a.fleet.Host(n.Name), path.Join(hostpath.ManifestsDir, "kube-apiserver.yaml"))
		if err != nil {
			return "", fmt.Errorf("read its kube-apiserver manifest: %w", err)
		}
		if s := apiserverImageRE.FindSubmatch(m); s != nil && release.Compare(string(s[1]), v) < 0 {
			v = string(s[1])
		}
	}
	return v, nil
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

// atVersion is a copy of a for one hop of an upgrade: the inventory at version v (with its
// release row), the bundle's release of it, files of its own; the fleet, PKI, token, etcd plan
// and API clients are a's.
func (a *Apply) atVersion(v string) (*Apply, error) {
	inv, err := a.inv.AtVersion(v)
	if err != nil {
		return nil, err
	}
	m, err := bundle.LoadRelease(inv.Bundle, v)
	if err != nil {
		return nil, err
	}
	return &Apply{inv: inv, o: a.o, fleet: a.fleet, started: a.started, manifest: m, set: a.set, token: a.token, etcd: a.etcd, files: newHostFiles(), api: a.api}, nil
}

// upgradeHealthy refuses to start upgrading a cluster that is not healthy (apply --force
// upgrades anyway): every node Ready and every kube-system workload ready, with what is not.
// An upgrade that an interrupted run left half done (nodes at different versions) is finished
// whatever the health it left behind.
func (a *Apply) upgradeHealthy(ctx context.Context, r progress.Reporter, u *upgradeRoute) error {
	st, err := kube.CheckReady(ctx, a.api.Typed, slices.Sorted(maps.Keys(u.running)), []string{"kube-system"})
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
	case a.o.Force:
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

// snapshotBeforeUpgrade saves and verifies an etcd snapshot in the state dir, recorded with the
// version the cluster runs.
func (a *Apply) snapshotBeforeUpgrade(ctx context.Context, r progress.Reporter, running string) error {
	x := NewEtcdSnapshot(a.inv, a.o, SnapshotOptions{Kubernetes: running})
	defer x.Close()
	for _, s := range x.Steps() {
		if err := s.Run(ctx, r); err != nil {
			return fmt.Errorf("etcd snapshot before the upgrade: %w", err)
		}
	}
	r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("etcd snapshot before the upgrade: %s (revision %d, %s, sha256 %s)", x.Saved.File, x.Saved.Revision, mib(x.Saved.Size), x.Saved.SHA256)})
	return nil
}

// addonImage says whether a bundle artifact is an image of the cluster's addons (or pause),
// which every node may be asked to run before it is upgraded itself.
func addonImage(name string) bool {
	switch name {
	case "kube-proxy", "coredns", "flannel", "pause":
		return true
	}
	return false
}

// stageAddonImages imports every hop's addon images on every node of the cluster, in parallel
// (new hosts get their images when they are staged). When the masters serve the bundle
// (BundleFromMasters), the workstation uploads them to the masters only: each master adds them
// to its registry, and the other nodes take them from there (what they cannot take is uploaded,
// as at stage).
func (a *Apply) stageAddonImages(ctx context.Context, r progress.Reporter, u *upgradeRoute, hops []*Apply) error {
	nodes := slices.DeleteFunc(a.fleet.Nodes(""), func(n inventory.Node) bool { _, ok := u.running[n.Name]; return !ok })
	need := bundle.Need{Only: addonImage}
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
	if !a.inv.BundleFromMasters() {
		return fleet.EachOf(ctx, a.fleet, nodes, func(ctx context.Context, n inventory.Node, host remote.Host) error {
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
	if err := fleet.EachOf(ctx, a.fleet, masters, func(ctx context.Context, n inventory.Node, host remote.Host) error {
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
	return fleet.EachOf(ctx, a.fleet, others, func(ctx context.Context, n inventory.Node, host remote.Host) error {
		return ship(ctx, n, host, a.mirrorsFor(n))
	})
}

// upgradeMaster moves one master to h's version, in kubeadm's order: the runtime first (restarted
// only when the release changes it), then the hop's binaries and images, then its files; the
// kubelet that runs replaces the static pods (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler) and kforge waits until they run the new manifests, Ready; only then is kubelet
// restarted on its new binary and configuration, which leaves the running pods alone. (Restarting
// kubelet while it replaces kube-apiserver left the old one holding :6443 and the new one in
// CrashLoopBackOff for minutes.)
func (h *Apply) upgradeMaster(ctx context.Context, n inventory.Node, r progress.Reporter) error {
	start := h.o.Now()
	host := h.fleet.Host(n.Name)
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
	if err := push(ctx, h.files, host, nil); err != nil {
		return err
	}
	if err := h.waitRestartedPods(ctx, r); err != nil {
		return err
	}
	if _, err := startKubelet(ctx, h.files, host); err != nil {
		return err
	}
	if err := kube.WaitNodeVersion(ctx, h.api.Typed, n.Name, h.inv.KubernetesVersion, h.o.Timeout); err != nil {
		return err
	}
	// The new kubelet may replace the static pods once more (it hashes a static pod as it
	// defaults it, and defaults change between minors): on to the next master or the workers
	// only when they have stayed Ready a while.
	if err := kube.WaitStaticPodsSteady(ctx, h.api.Typed, n.Name, controlPlaneSteady, h.o.Timeout); err != nil {
		return err
	}
	r(progress.Event{Kind: progress.HostDone, Host: n.Name, Duration: h.o.Now().Sub(start), Message: "control plane at " + h.inv.KubernetesVersion})
	return nil
}

// controlPlaneSteady is how long a master's static pods must stay Ready, unchanged, after its
// kubelet restarted on a new version.
const controlPlaneSteady = 15 * time.Second

// upgradeAddons moves kube-proxy, CoreDNS and flannel to h's release.
func (h *Apply) upgradeAddons(ctx context.Context, r progress.Reporter) error {
	cs, err := h.coreAddonObjects(ctx)
	if err != nil {
		return err
	}
	if h.inv.Networking.Plugin == "flannel" {
		fc, err := h.podNetworkObjects(ctx)
		if err != nil {
			return err
		}
		cs = append(cs, fc...)
	}
	r(progress.Event{Kind: progress.Info, Message: "addons of " + h.inv.KubernetesVersion + ": " + kube.Summary(cs)})
	return nil
}

// workerBatch is how many workers an upgrade moves at once.
func (a *Apply) workerBatch() int { return max(a.o.WorkerBatch, 1) }

// upgradeWorker moves one joined worker to h's version: cordon, drain, stage, kubelet
// restarted, Ready at the new version, uncordon.
func (h *Apply) upgradeWorker(ctx context.Context, n inventory.Node, r progress.Reporter) error {
	start := h.o.Now()
	v := h.inv.KubernetesVersion
	if err := kube.CordonForUpgrade(ctx, h.api.Typed, n.Name, v); err != nil {
		return err
	}
	evicted, err := kube.Drain(ctx, h.api.Typed, n.Name, h.o.DrainTimeout)
	if err != nil {
		return fmt.Errorf("%w; it stays cordoned: the next apply drains it again and upgrades it (kubectl uncordon %s gives up)", err, n.Name)
	}
	if err := h.stageHost(ctx, n, r); err != nil {
		return err
	}
	if _, err := startKubelet(ctx, h.files, h.fleet.Host(n.Name)); err != nil {
		return err
	}
	if err := kube.WaitNodeVersion(ctx, h.api.Typed, n.Name, v, h.o.Timeout); err != nil {
		return err
	}
	if _, err := kube.UncordonAfterUpgrade(ctx, h.api.Typed, n.Name); err != nil {
		return err
	}
	r(progress.Event{Kind: progress.HostDone, Host: n.Name, Duration: h.o.Now().Sub(start), Message: fmt.Sprintf("at %s (%s drained, uncordoned)", v, count(len(evicted), "pod"))})
	return nil
}

// uncordonUpgraded uncordons the nodes an interrupted upgrade left cordoned that run the
// inventory's version now.
func (a *Apply) uncordonUpgraded(ctx context.Context, r progress.Reporter) error {
	cordoned, err := kube.CordonedForUpgrade(ctx, a.api.Typed)
	if err != nil {
		return err
	}
	for _, n := range slices.Sorted(maps.Keys(cordoned)) {
		if cordoned[n] != a.inv.KubernetesVersion {
			continue
		}
		if ok, err := kube.UncordonAfterUpgrade(ctx, a.api.Typed, n); err != nil {
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
