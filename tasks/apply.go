package tasks

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/facts"
	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/preflight"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/state"
	"github.com/kforge/kforge/templates"
)

// Options are a command's inputs besides the inventory.
type Options struct {
	// State is the cluster's state dir (PKI, bootstrap token, admin kubeconfig, hosts record).
	State state.Dir
	// InventoryDir resolves relative paths of the inventory (external CA files, addons).
	InventoryDir string
	// Limits bound the fan-out over hosts.
	Limits remote.Limits
	// AcceptNewHostKeys trusts unknown hosts and records their keys (--accept-new-host-keys).
	AcceptNewHostKeys bool
	// Connect opens a host; remote.Dial when nil. Tests pass in-memory hosts.
	Connect func(ctx context.Context, n inventory.Node) (remote.Host, error)
	// API is the cluster's API as one of its admin identities (admin.conf, super-admin.conf);
	// built over the first master's SSH tunnel when nil. Tests pass fake clientsets.
	API func(identity string) (kube.Clients, error)
	// Ignore turns these preflight errors into warnings (--ignore-preflight-errors).
	Ignore preflight.Ignore
	// Timeout bounds each wait on the cluster (API server, nodes, pods); default 5 minutes.
	Timeout time.Duration
	// Settle is how long apply's last wait wants every pod ready before it ends (a
	// crash-looping pod is ready for a moment between restarts); default readySettle.
	Settle time.Duration
	// DrainTimeout bounds each drain (an upgraded worker, a pruned host); Timeout when 0.
	DrainTimeout time.Duration
	// Removed are the hosts of the last apply the inventory no longer lists (Removed); with
	// Prune apply removes them from the cluster, otherwise it only reports them. reset resets
	// them too.
	Removed []inventory.Node
	Prune   bool
	// EtcdFrom is where the last apply ran etcd's members (EtcdMove: RoleMaster, RoleEtcd, or
	// "" for a new cluster); an inventory whose EtcdRole differs moves etcd (etcdmove.go).
	EtcdFrom inventory.Role
	// PurgeState makes reset delete the PKI too (reset --purge-state).
	PurgeState bool
	// Force upgrades a cluster that is not healthy (apply --force).
	Force bool
	// WorkerBatch is how many workers an upgrade moves at once; 0 or 1: one at a time.
	WorkerBatch int
	// DialRetry is how long a host that does not answer is retried; default 30 s.
	DialRetry time.Duration
	// Getenv reads the environment variables the inventory names (ssh passwords and
	// passphrases, registry credentials) and HOME; os.Getenv when nil. kforge controller
	// passes its cluster's Secrets.
	Getenv func(string) string
	Logger *slog.Logger
	Now    func() time.Time
	Rand   io.Reader
}

func (o Options) withDefaults() Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Reader
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.Settle == 0 {
		o.Settle = readySettle
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = o.Timeout
	}
	return o
}

// newFleet is the fleet of nodes, reached as o says, gathering what apply and reset need to
// know of each host.
func newFleet(c *inventory.Cluster, nodes []inventory.Node, o Options) *fleet.Fleet {
	hash := []string{hostpath.KubeletKubeconfig, hostpath.APIProxyUnitPath, hostpath.VIPUnitPath, hostpath.EtcdSnapshotTimerPath, hostpath.ResolvConf, facts.ResolvedUpstream}
	if c.Kubelet.ResolvConf != "" {
		hash = append(hash, c.Kubelet.ResolvConf)
	}
	return fleet.New(nodes, fleet.Options{
		Limits: o.Limits, AcceptNewHostKeys: o.AcceptNewHostKeys, Connect: o.Connect, DialRetry: o.DialRetry, Getenv: o.Getenv, Logger: o.Logger, Now: o.Now,
		// kubelet.conf on a worker says it has joined (its kubelet wrote it at TLS bootstrap);
		// the API proxy's and kforge-vip's units, that an earlier run installed them; the
		// resolv.conf files kubelet may give pods (facts.KubeletResolvConf), whose contents
		// CoreDNS follows (upstreamResolv).
		// The kubernetes Service's address: whether a route covers the Service subnet.
		Facts: facts.Options{CRIEndpoint: c.ContainerRuntime.Endpoint, Dirs: templates.CACertDirCandidates, Hash: hash, ServiceAddress: serviceAddress(c), VIP: c.ControlPlaneVIP},
	})
}

// serviceAddress is the kubernetes Service's address; "" when the subnet is invalid (load
// refuses such an inventory).
func serviceAddress(c *inventory.Cluster) string {
	subnet := c.Networking.ServiceSubnet
	if subnet == "" {
		subnet = inventory.DefaultServiceSubnet
	}
	ip, err := pki.FirstServiceIP(subnet)
	if err != nil {
		return ""
	}
	return ip.String()
}

// Apply is one `kforge apply`. Its steps are in Steps, in order; the fields below rc are what
// one step makes for later ones, each naming the step that makes it and passed on in Steps.
type Apply struct {
	rc     *runContext
	target *hop     // the inventory's version: bundle reads its manifest, render its files
	etcd   etcdPlan // etcd-members: how each master's etcd member starts
	up     *bringUp // stage and the steps after it, over target and etcd
}

// NewApply prepares an apply of c; nothing is read or touched until its steps run.
func NewApply(c *inventory.Cluster, o Options) *Apply {
	rc := newRunContext(c, c.Hosts(), o)
	a := &Apply{rc: rc, target: newHop(rc)}
	a.up = &bringUp{t: a.target, etcd: &a.etcd}
	return a
}

// ApplyTasks are the tasks `kforge apply` runs for cluster c with options o, in order: what
// `kforge plan` shows.
func ApplyTasks(c *inventory.Cluster, o Options) []Task { return Tasks(NewApply(c, o).Steps()) }

// Steps is apply, top to bottom. Ordinary ifs decide what is in the list.
func (a *Apply) Steps() []Step {
	rc, t := a.rc, a.target
	c, f := rc.inv, rc.fleet
	all, members := f.Names(""), f.Names(c.EtcdRole())
	removed := fleet.Names(rc.o.Removed)
	var l list
	l.add("connect", OnHosts, all, f.Connect, "connect to %s over SSH (host keys verified) and gather facts in one round trip each", count(len(all), "host"))
	if c.Bundle != "" {
		l.add("bundle", OnWorkstation, nil, t.readBundle, "read the bundle's manifest in %s: its release of Kubernetes %s, platform, files and images", c.Bundle, c.KubernetesVersion)
	}
	l.add("preflight", OnHosts, all, t.preflight, "run kubeadm's preflight checks on every host before anything changes")
	if c.Firewall == inventory.FirewallOpen {
		l.add("firewall", OnHosts, all, rc.openFirewalls, "open the ports each host's role needs in its firewall (firewalld, ufw), and let the pod and Service subnets in, for good; nothing where it lets them in")
	}
	l.add("etcd-user", OnHosts, members, rc.etcdUser, "make the system user etcd runs as where it is missing, and give it %s (0700)", hostpath.EtcdDataDir)
	l.add("pki", OnWorkstation, nil, rc.ensurePKI, "generate or reuse the cluster's certificates (%s), kubeconfigs and bootstrap token in the state dir", c.PKI.KeyAlgorithm)
	l.add("etcd-members", OnHosts, members, func(ctx context.Context, r progress.Reporter) (err error) {
		a.etcd, err = planEtcd(ctx, rc, r)
		return err
	}, "keep running etcd members as they started; %s without data join the running cluster one at a time", etcdHostsWord(c))
	moving := etcdMoving(c, rc.o)
	if moving {
		l.add("etcd-move-snapshot", OnWorkstation, nil, func(ctx context.Context, r progress.Reporter) error {
			return moveSnapshot(ctx, rc, &a.etcd, r)
		}, "etcd moves from the %s to the %s: save an etcd snapshot of the cluster as it runs to the state dir, verified", roleWord(rc.o.EtcdFrom), etcdHostsWord(c))
	}
	l.add("render", OnWorkstation, nil, func(context.Context, progress.Reporter) error {
		// Removed masters run until apply --prune drains them.
		return t.render(a.etcd, len(removedMasters(rc.o.Removed)))
	}, "render static-pod manifests, kubelet and containerd configuration for every host")
	if c.Bundle != "" {
		l.add("upgrade", OnHosts, all, rc.kubeletsSay(a.upgrade), "when nodes run an older Kubernetes than %s: walk the upgrade's own steps (upgrade.go): check the cluster's health, save an etcd snapshot, give every node the addons' images, move the control plane one minor at a time, one master at a time, the addons with it, then the workers in batches (cordon, drain, kubelet, uncordon); nothing otherwise", c.KubernetesVersion)
	}
	if moving && !c.ExternalEtcd() {
		l.add("join-etcd", OnHosts, members, func(ctx context.Context, r progress.Reporter) error {
			return joinEtcd(ctx, t, &a.etcd, r)
		}, "one master at a time, while its API server still uses the etcd hosts: add its etcd member, push its etcd manifest and certificates, wait until the member has started and is ready")
	}
	a.up.startSteps(&l)
	if moving {
		l.add("leave-etcd", OnHosts, nil, func(ctx context.Context, r progress.Reporter) error {
			return leaveEtcd(ctx, rc, &a.etcd, r)
		}, "every API server uses the %s' members now: one at a time, take etcd off the %s (leadership handed over, member removed, static pod stopped, data, certificates and snapshot timer removed)", etcdHostsWord(c), roleWord(rc.o.EtcdFrom))
	}
	a.up.clusterSteps(&l)
	a.up.tidySteps(&l)
	kept := rc.o.Removed // still in the cluster after this run
	switch {
	case len(removed) > 0 && rc.o.Prune:
		l.add("prune", OnHosts, removed, rc.prune, "one at a time: drain %s (no longer in the inventory), remove a master's etcd member, reset the host, delete the node", strings.Join(removed, ", "))
		kept = nil
	case len(removed) > 0:
		l.add("removed-hosts", OnWorkstation, nil, rc.reportRemoved, "report %s: no longer in the inventory, still in the cluster (kforge apply --prune removes them)", strings.Join(removed, ", "))
	}
	l.add("record-hosts", OnWorkstation, nil, func(context.Context, progress.Reporter) error {
		return recordHosts(rc, kept)
	}, "record the cluster's hosts in the state dir, to find hosts later removed from the inventory")
	return l
}

// Traffic is the bytes the run's SSH connections sent and received so far.
func (a *Apply) Traffic() (sent, received int64) { return a.rc.fleet.Traffic() }

// Close waits for the work stage left running in the background, then ends every connection.
func (a *Apply) Close() {
	a.up.staged.waitAll()
	a.etcd.close()
	a.rc.fleet.Close()
}

// Explain adds to an error of apply's steps how to look at the cluster; see runContext.explain.
func (a *Apply) Explain(err error) error { return a.rc.explain(err) }

// readBundle reads the bundle's manifest of the hop's Kubernetes version, which preflight
// checks the hosts against and stage ships from. A bundle that does not hold that version
// fails here, before anything changes, saying which bundle to build.
func (h *hop) readBundle(context.Context, progress.Reporter) error {
	m, err := bundle.LoadRelease(h.inv.Bundle, h.inv.KubernetesVersion)
	var missing *bundle.MissingReleaseError
	if errors.As(err, &missing) {
		// A downgrade is refused as one: a bundle with that release would be refused too.
		if route := preflight.Route(h.inv, h.rc.fleet.AllFacts()).Err(); route != nil {
			return route
		}
	}
	if err != nil {
		return err
	}
	h.manifest = m
	return nil
}

// preflightOptions are the preflight checks' options: the errors to ignore, the bundle's
// machine architecture.
func preflightOptions(o Options, m *bundle.Manifest) preflight.Options {
	po := preflight.Options{Ignore: o.Ignore}
	if m != nil {
		_, po.BundleArch, _ = strings.Cut(m.Platform, "/")
	}
	return po
}

// preflight checks every host centrally and fails before anything changes.
func (h *hop) preflight(_ context.Context, r progress.Reporter) error {
	findings := preflight.Check(h.inv, h.rc.fleet.AllFacts(), preflightOptions(h.rc.o, h.manifest))
	for _, f := range findings {
		if f.Severity >= preflight.Warning {
			r(progress.Event{Kind: progress.Info, Host: f.Host, Message: f.String()})
		}
	}
	return findings.Err()
}
