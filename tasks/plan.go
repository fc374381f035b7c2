package tasks

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/preflight"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/state"
)

// Plan is one `kforge plan` that connects: apply's own steps up to render, run without
// changing anything (the PKI and the bootstrap token are computed in memory, nothing is
// written to the state dir or a host), then what apply would push, install, restart and
// ensure is compared with what each host and the API server have. The comparisons are apply's
// own functions (toWrite, bundle.PlanHost, containerdRestarts, kubeletRestarts, the *Objects
// functions through dry-run clients), so plan cannot disagree with the apply that follows.
type Plan struct {
	rc     *runContext // dryRun: every write through the API is a server-side dry run
	target *hop        // bundle reads its manifest, render its files
	etcd   etcdPlan    // etcd-members
	// Diff is what apply would change: Unreachable by connect, Preflight by preflight,
	// Certificates and BootstrapToken by pki, Hosts by diff-hosts, Objects by diff-api.
	Diff Diff
	// secrets tags redacted values in file diffs; one random key per plan.
	secrets *redactor
}

// Diff is what an apply would change.
type Diff struct {
	// Unreachable are the hosts that did not answer, with why: their part is unknown.
	Unreachable map[string]string `json:"unreachable,omitempty"`
	// Preflight are the errors that would stop apply before it changes anything.
	Preflight []string `json:"preflight,omitempty"`
	// Certificates are what apply would issue, renew or remove in the state dir, with why.
	Certificates []pki.Change `json:"certificates,omitempty"`
	// BootstrapToken is "created" or "renewed" when apply would make a new token.
	BootstrapToken string `json:"bootstrapToken,omitempty"`
	// Upgrade is the route of the upgrade apply would walk, when nodes run an older version.
	Upgrade string `json:"upgrade,omitempty"`
	// Hosts are the reachable hosts apply would change, in inventory order.
	Hosts []HostDiff `json:"hosts,omitempty"`
	// Removed are the hosts no longer in the inventory, with what apply would do to them.
	Removed []RemovedHost `json:"removed,omitempty"`
	// NewCluster says the cluster's CA is new: apply creates the cluster and every object.
	NewCluster bool `json:"newCluster,omitempty"`
	// Objects are the API objects apply would create or update (server-side dry run).
	Objects []kube.Change `json:"objects,omitempty"`
	// Rollouts are workloads apply would restart after an object change (kube-proxy).
	Rollouts []string `json:"rollouts,omitempty"`
	// Rotation is the CA rotation in progress, if any: kforge certs rotate-ca finishes it (apply
	// renders what its phase says meanwhile).
	Rotation string `json:"rotation,omitempty"`
	// KeyRotation is the rotation of the key that encrypts Secrets in progress, if any: kforge
	// secrets rotate-key finishes it (apply keeps the keys as its phase has them meanwhile).
	KeyRotation string `json:"keyRotation,omitempty"`
	// APIUnknown says why the API part is not known, when it is not.
	APIUnknown string `json:"apiUnknown,omitempty"`
}

// HostDiff is what apply would change on one host.
type HostDiff struct {
	Host string         `json:"host"`
	Role inventory.Role `json:"role"`
	// Node is what happens to the host's node: joins, joins etcd, kubelet upgraded.
	Node   []string   `json:"node,omitempty"`
	Files  []FileDiff `json:"files,omitempty"`
	Upload *Upload    `json:"upload,omitempty"`
	// Restarts are the services and static pods that would (re)start.
	Restarts []string `json:"restarts,omitempty"`
}

// FileDiff is one file apply would create, change or remove.
type FileDiff struct {
	Path   string `json:"path"`
	Action string `json:"action"` // create, change, remove
	// Diff is a unified diff of the content (secrets redacted, certificates described), or
	// empty when Note says why not.
	Diff string `json:"diff,omitempty"`
	Note string `json:"note,omitempty"`
}

// Upload is what apply would send a host from the bundle.
type Upload struct {
	Files  []string `json:"files,omitempty"`
	Images []string `json:"images,omitempty"`
	Bytes  int64    `json:"bytes"`
	// Pin are images the host has that apply would pin (bundle.PinLabel): nothing to upload.
	Pin []string `json:"pin,omitempty"`
	// FromMasters says that the host takes the files and images from the masters' registries
	// first: only what they lack is uploaded (Bytes is at most what that would be).
	FromMasters bool `json:"fromMasters,omitempty"`
}

// RemovedHost is a host of the last apply that the inventory no longer lists.
type RemovedHost struct {
	Host   string `json:"host"`
	Action string `json:"action"`
	// Changes says whether apply would act on it (with --prune) or only report it.
	Changes bool `json:"changes"`
}

// Changes counts what apply would change (hosts, certificates, token, objects, prunes); 0 means
// an apply would change nothing that plan could see.
func (d Diff) Changes() int {
	n := len(d.Hosts) + len(d.Certificates) + len(d.Objects) + len(d.Rollouts)
	if d.BootstrapToken != "" || d.Upgrade != "" || d.Rotation != "" || d.KeyRotation != "" {
		n++
	}
	if d.NewCluster {
		n++
	}
	for _, r := range d.Removed {
		if r.Changes {
			n++
		}
	}
	return n
}

// Complete says whether every host and the API were seen.
func (d Diff) Complete() bool { return len(d.Unreachable) == 0 && d.APIUnknown == "" }

// NewPlan prepares a plan of c; nothing is read or touched until its steps run. Hosts that do
// not answer within o.DialRetry (default 5 s) are shown as unknown.
func NewPlan(c *inventory.Cluster, o Options) *Plan {
	o.DialRetry = cmp.Or(o.DialRetry, 5*time.Second)
	rc := newRunContext(c, c.Hosts(), o)
	rc.dryRun = true
	return &Plan{rc: rc, target: newHop(rc), secrets: newRedactor(rand.Reader)}
}

// Steps is plan, top to bottom.
func (p *Plan) Steps() []Step {
	rc, t := p.rc, p.target
	c, f := rc.inv, rc.fleet
	all, masters := f.Names(""), f.Names(inventory.RoleMaster)
	var l list
	l.add("connect", OnHosts, all, p.connect, "connect to %s over SSH and gather facts; a host that does not answer is shown as unknown", count(len(all), "host"))
	if c.Bundle != "" {
		l.add("bundle", OnWorkstation, nil, t.readBundle, "read the bundle's manifest in %s: its release of Kubernetes %s", c.Bundle, c.KubernetesVersion)
	}
	l.add("preflight", OnHosts, all, p.preflight, "run apply's preflight checks; an error is shown as what would stop apply")
	l.add("pki", OnWorkstation, nil, p.pki, "compute what apply would issue or renew in the state dir (certificates, bootstrap token), in memory only")
	l.add("etcd-members", OnHosts, masters, func(ctx context.Context, r progress.Reporter) (err error) {
		p.etcd, err = planEtcd(ctx, rc, r)
		return err
	}, "read how each running etcd member started, as apply does")
	if c.Bundle != "" {
		l.add("upgrade-route", OnHosts, masters, p.upgradeRoute, "read what each node runs: the route of the upgrade apply would walk, if any")
	}
	l.add("render", OnWorkstation, nil, func(context.Context, progress.Reporter) error {
		return t.render(p.etcd, len(removedMasters(rc.o.Removed)))
	}, "render every host's files as apply would")
	l.add("diff-hosts", OnHosts, all, p.diffHosts, "compare each host's files, bundle binaries and images with what apply would push; the services that would restart; the nodes that would join or change")
	l.add("diff-api", ThroughAPI, nil, p.diffAPI, "run apply's API objects through the API server as a server-side dry run (dryRun=All), through an SSH tunnel to %s", masters[0])
	return l
}

// Close ends every connection.
func (p *Plan) Close() {
	p.etcd.close()
	p.rc.fleet.Close()
}

func (p *Plan) connect(ctx context.Context, r progress.Reporter) error {
	for name, err := range p.rc.fleet.Survey(ctx, r) {
		if p.Diff.Unreachable == nil {
			p.Diff.Unreachable = map[string]string{}
		}
		p.Diff.Unreachable[name] = err.Error()
	}
	return nil
}

// reached are the inventory's nodes that answered.
func (p *Plan) reached() []inventory.Node {
	return slices.DeleteFunc(p.rc.fleet.Nodes(""), func(n inventory.Node) bool { return p.rc.fleet.Facts(n.Name) == nil })
}

// preflight runs apply's checks on the hosts that answered and keeps the errors.
func (p *Plan) preflight(_ context.Context, r progress.Reporter) error {
	for _, f := range preflight.Check(p.rc.inv, p.rc.fleet.AllFacts(), preflightOptions(p.rc.o, p.target.manifest)) {
		switch {
		case f.Check == preflight.CheckFacts && p.Diff.Unreachable[f.Host] != "":
			// shown as unreachable
		case f.Severity == preflight.Error && !f.Ignored:
			p.Diff.Preflight = append(p.Diff.Preflight, f.String())
		case f.Severity >= preflight.Warning:
			r(progress.Event{Kind: progress.Info, Host: f.Host, Message: f.String()})
		}
	}
	return nil
}

// pki is apply's pki step as a dry run.
func (p *Plan) pki(context.Context, progress.Reporter) error {
	rc := p.rc
	set, changes, err := pki.PlanCluster(rc.inv, rc.o.InventoryDir, rc.o.State.PKI(), rc.o.Now(), rc.o.Rand)
	if err != nil {
		return fmt.Errorf("PKI in %s: %w", rc.o.State.PKI(), err)
	}
	for _, ch := range changes {
		if ch.Action == "warning" {
			if ch.Key == "encryption" {
				p.Diff.KeyRotation = ch.Reason
			}
			continue
		}
		if ch.Action == "created" && strings.HasPrefix(ch.Reason, "new CA ") {
			ch.Reason = "new CA" // its pin would be of a key apply does not make until it runs
		}
		p.Diff.Certificates = append(p.Diff.Certificates, ch)
		if ch.Key == pki.CA && ch.Action == "created" {
			p.Diff.NewCluster = true
		}
	}
	rot, err := pki.ReadRotation(rc.o.State.PKI())
	if err != nil {
		return err
	}
	if rot != nil {
		p.Diff.Rotation = fmt.Sprintf("%s, phase %s of %v since %s: kforge certs rotate-ca finishes it", strings.Join(rot.CAs, ", "), rot.Phase, pki.Phases, rot.Started.Format(time.RFC3339))
	}
	tok, fresh, err := currentBootstrapToken(rc.o.State, rc.o)
	if err != nil {
		return err
	}
	rc.setCredentials(set, tok)
	if !fresh {
		p.Diff.BootstrapToken = "renewed"
		if _, err := os.Stat(rc.o.State.BootstrapToken()); err != nil {
			p.Diff.BootstrapToken = "created"
		}
	}
	return nil
}

func (p *Plan) diffHosts(ctx context.Context, r progress.Reporter) error {
	nodes := p.reached()
	diffs := make([]HostDiff, len(nodes))
	var mu sync.Mutex
	err := forEachNode(ctx, p.rc.fleet, nodes, func(ctx context.Context, i int, n inventory.Node, h remote.Host) error {
		d, err := p.diffHost(ctx, n, h)
		if err != nil {
			return err
		}
		mu.Lock()
		diffs[i] = d
		mu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	for _, d := range diffs {
		if len(d.Node)+len(d.Files)+len(d.Restarts) > 0 || d.Upload != nil {
			p.Diff.Hosts = append(p.Diff.Hosts, d)
		}
	}
	for _, n := range p.rc.o.Removed {
		rh := RemovedHost{Host: n.Name, Action: "still in the cluster: apply reports it (apply --prune drains it, resets the host and deletes its node)"}
		if p.rc.o.Prune {
			rh.Action, rh.Changes = "drained, reset and its node deleted (--prune)", true
			if n.Role == inventory.RoleMaster {
				rh.Action = "its etcd member removed, drained, reset and its node deleted (--prune)"
			}
		}
		p.Diff.Removed = append(p.Diff.Removed, rh)
	}
	return nil
}

// forEachNode runs fn for nodes over the fleet's fan-out, with each node's index.
func forEachNode(ctx context.Context, f *fleet.Fleet, nodes []inventory.Node, fn func(ctx context.Context, i int, n inventory.Node, h remote.Host) error) error {
	index := map[string]int{}
	for i, n := range nodes {
		index[n.Name] = i
	}
	return fleet.EachOf(ctx, f, nodes, func(ctx context.Context, n inventory.Node, h remote.Host) error {
		return remote.WithHost(n.Name, fn(ctx, index[n.Name], n, h))
	})
}

// diffHost compares one host with what apply would do there.
func (p *Plan) diffHost(ctx context.Context, n inventory.Node, h remote.Host) (HostDiff, error) {
	rc, t := p.rc, p.target
	d := HostDiff{Host: n.Name, Role: n.Role}
	f := rc.fleet.Facts(n.Name)
	want := t.files.get(n.Name, nil)
	paths := make([]string, 0, len(want)+1)
	for _, fl := range want {
		paths = append(paths, fl.Path)
	}
	joined := n.Role == inventory.RoleWorker && rc.joined(n.Name)
	if joined {
		paths = append(paths, hostpath.BootstrapKubeletConfig)
	}
	have, err := hashes(ctx, h, paths)
	if err != nil {
		return d, err
	}
	write := toWrite(want, have)
	for _, fl := range write {
		fd := FileDiff{Path: fl.Path, Action: "create"}
		var old []byte
		if have[fl.Path] != "" {
			fd.Action = "change"
			if !isPrivateKey(fl.Path) {
				if old, err = remote.ReadFile(ctx, h, fl.Path); err != nil {
					return d, err
				}
			}
		}
		fd.Diff, fd.Note = p.secrets.fileDiff(fl.Path, old, fl.Data, fd.Action == "create")
		d.Files = append(d.Files, fd)
	}
	if joined && have[hostpath.BootstrapKubeletConfig] != "" {
		d.Files = append(d.Files, FileDiff{Path: hostpath.BootstrapKubeletConfig, Action: "remove", Note: "holds the bootstrap token; the kubelet has its own credentials (forget-token)"})
	}
	written := make([]string, 0, len(write))
	for _, fl := range write {
		written = append(written, fl.Path)
	}
	wrote := func(pred func(string) bool) bool { return slices.ContainsFunc(written, pred) }

	installed := false
	if m := t.manifest; m != nil {
		st, err := bundle.ReadHostState(ctx, h, m)
		if err != nil {
			return d, err
		}
		fromBundle := t.inv.ContainerRuntime.Install == inventory.RuntimeFromBundle
		need := bundleNeed(t.inv, n.Role)
		need.Runtime = fromBundle
		hp := bundle.PlanHost(m, st, need)
		if !hp.Empty() {
			u := &Upload{Bytes: hp.Bytes(), FromMasters: len(t.mirrorsFor(n)) > 0}
			for _, fl := range hp.Install {
				u.Files = append(u.Files, fl.Install)
				written = append(written, fl.Install) // a new kubelet binary restarts kubelet, as in ship
				installed = installed || bundle.IsRuntime(fl.Name)
			}
			for _, im := range hp.Import {
				u.Images = append(u.Images, im.Name)
			}
			for _, im := range hp.Pin {
				u.Pin = append(u.Pin, im.Name)
			}
			d.Upload = u
		}
	}

	stale := ""
	if !installed {
		stale = runtimeStale(t.inv, f)
	}
	if containerdRestarts(wrote, installed || stale != "") {
		what := "containerd restarts"
		switch {
		case !f.Runtime.Answering:
			what = "containerd starts"
		case stale != "":
			what += " (" + stale + ")"
		}
		d.Restarts = append(d.Restarts, what)
	}
	if wrote(func(p string) bool { return p == hostpath.ServiceRouteUnitPath }) {
		d.Restarts = append(d.Restarts, hostpath.ServiceRouteUnit+" (re)starts")
	}
	switch {
	case t.inv.LocalAPIProxy() && apiProxyRestarts(wrote):
		d.Restarts = append(d.Restarts, hostpath.APIProxyUnit+" (re)starts")
	case !t.inv.LocalAPIProxy() && hasUnit(f, hostpath.APIProxyUnitPath):
		d.Restarts = append(d.Restarts, hostpath.APIProxyUnit+" stops (removed: the nodes use "+pki.NodeEndpoint(t.inv)+")")
	}
	if n.Role == inventory.RoleMaster && t.inv.BundleFromMasters() && wrote(registryRestarts) {
		d.Restarts = append(d.Restarts, hostpath.RegistryUnit+" (re)starts")
	}
	switch {
	case t.inv.ControlPlaneVIP != "" && n.Role == inventory.RoleMaster && vipRestarts(wrote):
		d.Restarts = append(d.Restarts, hostpath.VIPUnit+" (re)starts")
	case t.inv.ControlPlaneVIP == "" && hasUnit(f, hostpath.VIPUnitPath):
		d.Restarts = append(d.Restarts, hostpath.VIPUnit+" stops (removed: the admin kubeconfig uses "+pki.Endpoint(t.inv)+")")
	}
	switch {
	case n.Role == inventory.RoleMaster && t.inv.ScheduledSnapshots() && snapshotTimerRestarts(wrote):
		d.Restarts = append(d.Restarts, hostpath.EtcdSnapshotTimer+" (re)starts")
	case n.Role == inventory.RoleMaster && !t.inv.ScheduledSnapshots() && hasUnit(f, hostpath.EtcdSnapshotTimerPath):
		d.Restarts = append(d.Restarts, hostpath.EtcdSnapshotTimer+" stops (removed: etcdSnapshots is off; the snapshots stay)")
	}
	switch {
	case n.Role == inventory.RoleWorker && !joined:
		d.Restarts = append(d.Restarts, "kubelet starts")
		d.Node = append(d.Node, "joins the cluster (TLS bootstrap)")
	case kubeletRestarts(wrote):
		d.Restarts = append(d.Restarts, "kubelet restarts")
	}
	for _, fl := range write {
		if path.Dir(fl.Path) == hostpath.ManifestsDir {
			verb := "restarts"
			if have[fl.Path] == "" {
				verb = "starts"
			}
			d.Restarts = append(d.Restarts, fmt.Sprintf("static pod %s %s", strings.TrimSuffix(path.Base(fl.Path), ".yaml"), verb))
		}
	}
	switch {
	case p.etcd.joins(n.Name):
		d.Node = append(d.Node, fmt.Sprintf("joins the running etcd cluster (its member added through %s)", p.etcd.seed))
	case slices.ContainsFunc(p.etcd.leave, func(l inventory.Node) bool { return l.Name == n.Name }):
		d.Node = append(d.Node, fmt.Sprintf("etcd moves off it to the %s: its member is removed once every API server uses theirs, its data cleared", etcdHostsWord(t.inv)))
	case n.Role == inventory.RoleMaster && len(f.EtcdDataDir) == 0 && len(p.etcd.boot) == 0:
		d.Node = append(d.Node, "starts a new etcd cluster and control plane")
	}
	if v := f.Binaries["kubelet"].Version; v != "" && v != strings.TrimPrefix(t.inv.KubernetesVersion, "v") && d.Upload != nil {
		d.Node = append(d.Node, fmt.Sprintf("kubelet %s → %s", v, strings.TrimPrefix(t.inv.KubernetesVersion, "v")))
	}
	return d, nil
}

// upgradeRoute is the route apply's upgrade step would take; an error is what would stop it.
func (p *Plan) upgradeRoute(ctx context.Context, _ progress.Reporter) error {
	u, err := readUpgradeRoute(ctx, p.rc, p.target.manifest)
	switch {
	case err != nil:
		p.Diff.Preflight = append(p.Diff.Preflight, "upgrade: "+err.Error())
	case u != nil:
		var workers []string
		for _, w := range u.workers {
			workers = append(workers, w.Name)
		}
		p.Diff.Upgrade = fmt.Sprintf("%s → %s: an etcd snapshot first; control plane %s, one master at a time, the addons with each hop; then the workers one at a time (%s): cordon, drain, kubelet, uncordon",
			strings.Join(running(p.rc, u), ", "), u.target, routeText(u.hops), strings.Join(workers, ", "))
	}
	return nil
}

// diffAPI runs apply's object functions through dry-run clients.
func (p *Plan) diffAPI(ctx context.Context, r progress.Reporter) error {
	rc, t := p.rc, p.target
	first := rc.inv.Masters[0].Name
	switch {
	case p.Diff.NewCluster:
		return nil // nothing to ask: every object is created
	case rc.fleet.Facts(first) == nil:
		p.Diff.APIUnknown = first + " did not answer; the API is reached through it"
		return nil
	}
	api, err := rc.clients()
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := kube.WaitForAPIServer(wctx, api.super, kube.WaitAPIServerInput{Timeout: 15 * time.Second, Interval: 500 * time.Millisecond}); err != nil {
		p.Diff.APIUnknown = "the API server does not answer through " + first + ": " + err.Error()
		return nil
	}
	var all []kube.Change
	objects := []func(context.Context) ([]kube.Change, error){
		func(ctx context.Context) ([]kube.Change, error) { return clusterConfigObjects(ctx, rc) },
		func(ctx context.Context) ([]kube.Change, error) { return bootstrapObjects(ctx, rc) },
	}
	kit, kitErr := t.addonKit() // read once; its error stops the dry run where the addons begin
	for _, a := range hopAddons(rc.inv) {
		objects = append(objects, func(ctx context.Context) ([]kube.Change, error) {
			if kitErr != nil {
				return nil, kitErr
			}
			return a(ctx, kit)
		})
	}
	objects = append(objects, func(ctx context.Context) ([]kube.Change, error) { return markObjects(ctx, rc, api) })
	if len(rc.inv.Addons) > 0 {
		objects = append(objects, func(ctx context.Context) ([]kube.Change, error) { return addonObjects(ctx, rc) })
	}
	for _, fn := range objects {
		cs, err := fn(ctx)
		all = append(all, cs...)
		if err != nil {
			p.Diff.APIUnknown = "the dry run stopped: " + err.Error()
			break
		}
	}
	for _, ch := range all {
		if ch.Action != kube.Unchanged {
			p.Diff.Objects = append(p.Diff.Objects, ch)
		}
	}
	if kubeProxyRestarts(all) {
		p.Diff.Rollouts = append(p.Diff.Rollouts, "DaemonSet kube-system/kube-proxy restarts (its configuration changed)")
	}
	r(progress.Event{Kind: progress.Info, Message: kube.Summary(all)})
	return nil
}

// markObjects is mark-nodes' dry run for the nodes registered now (the others join first).
func markObjects(ctx context.Context, rc *runContext, api apiClients) ([]kube.Change, error) {
	nodes, err := api.Typed.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var marks []kube.NodeMarks
	for _, m := range kube.NodeMarksFor(rc.inv) {
		if slices.ContainsFunc(nodes.Items, func(n corev1.Node) bool { return n.Name == m.Name }) {
			marks = append(marks, m)
		}
	}
	return kube.MarkNodes(ctx, api.Typed, marks, time.Second)
}

// currentBootstrapToken is bootstrapToken without writing: the state dir's token while more than
// half its TTL is left (fresh), else a new one in memory.
func currentBootstrapToken(d state.Dir, o Options) (kube.BootstrapToken, bool, error) {
	file := d.BootstrapToken()
	if fi, err := os.Stat(file); err == nil && o.Now().Sub(fi.ModTime()) < bootstrapTokenTTL/2 {
		b, err := os.ReadFile(file)
		if err != nil {
			return kube.BootstrapToken{}, false, err
		}
		if t, err := kube.ParseBootstrapToken(string(b), bootstrapTokenTTL); err == nil {
			return t, true, nil
		}
	}
	t, err := kube.NewBootstrapToken(o.Rand, bootstrapTokenTTL)
	return t, false, err
}
