package tasks

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
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
	// PurgeState makes reset delete the PKI too (reset --purge-state).
	PurgeState bool
	// Force upgrades a cluster that is not healthy (apply --force).
	Force bool
	// WorkerBatch is how many workers an upgrade moves at once; 0 or 1: one at a time.
	WorkerBatch int
	// DialRetry is how long a host that does not answer is retried; default 30 s.
	DialRetry time.Duration
	Logger    *slog.Logger
	Now       func() time.Time
	Rand      io.Reader
}

func (o Options) withDefaults() Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Reader
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
	return fleet.New(nodes, fleet.Options{
		Limits: o.Limits, AcceptNewHostKeys: o.AcceptNewHostKeys, Connect: o.Connect, DialRetry: o.DialRetry, Logger: o.Logger, Now: o.Now,
		// kubelet.conf on a worker says it has joined (its kubelet wrote it at TLS bootstrap);
		// the API proxy's and kforge-vip's units, that an earlier run installed them.
		// The kubernetes Service's address: whether a route covers the Service subnet.
		Facts: facts.Options{CRIEndpoint: c.ContainerRuntime.Endpoint, Dirs: templates.CACertDirCandidates, Hash: []string{hostpath.KubeletKubeconfig, hostpath.APIProxyUnitPath, hostpath.VIPUnitPath}, ServiceAddress: serviceAddress(c), VIP: c.ControlPlaneVIP},
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

// Apply is one `kforge apply`. Its steps are in Steps, in order; the fields below the first
// block are what one step makes for later ones, each naming the step that fills it.
type Apply struct {
	inv     *inventory.Cluster
	o       Options
	fleet   *fleet.Fleet // the inventory's hosts; connected by connect
	started time.Time

	manifest *bundle.Manifest    // bundle: the bundle's release of the inventory's version (nil without a bundle)
	set      *pki.Set            // pki
	token    kube.BootstrapToken // pki
	etcd     etcdPlan            // etcd-members: how each master's etcd member starts
	files    *hostFiles          // render; stage and pod-network push them and note what changed
	bg       background          // stage: the workers' staging and the masters' shipments still running
	fills    *registryFills      // stage: the masters' registries filled, which the workers wait for
	api      apiClients          // made by wait-apiserver from set and the first master's connection
	pruned   []string            // prune: the removed hosts it removed
	// kubeconfigWritten: the kubeconfig step wrote (or found) the admin kubeconfig, so Explain
	// names it when a later step fails.
	kubeconfigWritten bool
	restore           *restoreRun // set by NewRestore: apply rebuilds the control plane from a snapshot
}

// NewApply prepares an apply of c; nothing is read or touched until its steps run.
func NewApply(c *inventory.Cluster, o Options) *Apply {
	o = o.withDefaults()
	return &Apply{inv: c, o: o, fleet: newFleet(c, c.Nodes(), o), started: o.Now(), files: newHostFiles()}
}

// ApplyTasks are the tasks `kforge apply` runs for cluster c with options o, in order: what
// `kforge plan` shows.
func ApplyTasks(c *inventory.Cluster, o Options) []Task { return Tasks(NewApply(c, o).Steps()) }

// Steps is apply, top to bottom. Ordinary ifs decide what is in the list.
func (a *Apply) Steps() []Step {
	c, f := a.inv, a.fleet
	all, masters, workers := f.Names(""), f.Names(inventory.RoleMaster), f.Names(inventory.RoleWorker)
	var l list
	if a.restore != nil {
		l.add("snapshot", OnWorkstation, nil, a.verifySnapshot, "verify %s before any host is touched: its sha256, bbolt's integrity check, its revision (etcdutl's library)", a.restore.Snapshot)
	}
	l.add("connect", OnHosts, all, f.Connect, "connect to %s over SSH (host keys verified) and gather facts in one round trip each", count(len(all), "host"))
	if a.restore != nil {
		l.add("quorum", OnHosts, masters, a.checkQuorumLost, "refuse when the masters' etcd still has quorum (a restore would discard what it holds; --force restores anyway)")
	}
	if c.Bundle != "" {
		l.add("bundle", OnWorkstation, nil, a.readBundle, "read the bundle's manifest in %s: its release of Kubernetes %s, platform, files and images", c.Bundle, c.KubernetesVersion)
	}
	l.add("preflight", OnHosts, all, a.preflight, "run kubeadm's preflight checks on every host before anything changes")
	l.add("pki", OnWorkstation, nil, a.ensurePKI, "generate or reuse the cluster's certificates (%s), kubeconfigs and bootstrap token in the state dir", c.PKI.KeyAlgorithm)
	if a.restore != nil {
		l.add("restore-etcd", OnHosts, masters, a.restoreEtcd, "on %s: stop kubelet and containers, replace %s with the snapshot, restored on the workstation as one new etcd cluster of the inventory's masters (revision +1e9, compacted)", strings.Join(masters, ", "), hostpath.EtcdDataDir)
	}
	l.add("etcd-members", OnHosts, masters, a.planEtcd, "keep running etcd members as they started; masters without data join the running cluster one at a time")
	if a.restore == nil && c.Bundle != "" {
		l.add("upgrade", OnHosts, all, a.kubeletsSay(a.upgrade), "when nodes run an older Kubernetes than %s: check the cluster's health, save an etcd snapshot, give every node the addons' images (the workers from the masters' registries when they serve the bundle), move the control plane one minor at a time, one master at a time, the addons with it, then the workers one at a time (cordon, drain, kubelet, uncordon); nothing otherwise", c.KubernetesVersion)
	}
	l.add("render", OnWorkstation, nil, a.render, "render static-pod manifests, kubelet and containerd configuration for every host")
	stageWhat := "configure containerd (" + c.Kubelet.CgroupDriver + " cgroup driver) and kernel settings, push its files"
	if c.Bundle != "" {
		stageWhat = "upload what it lacks from the bundle, " + stageWhat
	}
	l.add("stage", OnHosts, all, a.stage, "on every host in parallel: %s; masters then start kubelet and the static-pod control plane (%s), workers finish staging meanwhile", stageWhat, strings.Join(masters, ", "))
	l.add("wait-apiserver", ThroughAPI, nil, a.kubeletsSay(a.waitAPIServer), "wait until the API server answers, through an SSH tunnel to %s, and for control-plane pods this run replaced", masters[0])
	l.add("kubeconfig", OnWorkstation, nil, a.writeKubeconfig, "write the admin kubeconfig to the state dir: from here on the cluster can be looked at, even when a later step fails")
	removed := fleet.Names(a.o.Removed)
	if a.restore != nil && len(removed) > 0 {
		// Right away: the restored cluster still holds the lost hosts' nodes and pods, which
		// controllers (DaemonSet rollouts, the readiness wait) would otherwise wait on.
		l.add("prune", OnHosts, removed, a.prune, "delete the nodes of %s (not in the inventory: lost before the restore) and their pods, without a drain, so their controllers replace them at once; start resetting those hosts that still answer", strings.Join(removed, ", "))
	}
	l.add("cluster-config", ThroughAPI, nil, a.clusterConfig, "grant kubeadm:cluster-admins, upload kubeadm-config and kubelet-config")
	l.add("bootstrap", ThroughAPI, nil, a.bootstrap, "create the bootstrap token, node-bootstrap RBAC, CSR auto-approval and cluster-info")
	if c.ControlPlaneVIP != "" {
		l.add("vip", OnHosts, masters, a.startVIP, "start kforge-vip on every master: one at a time holds %s (the Lease kube-system/%s) and announces it by ARP; wait until one does", c.ControlPlaneVIP, templates.VIPLease)
	}
	if len(workers) > 0 {
		l.add("join-workers", OnHosts, workers, a.kubeletsSay(a.joinWorkers), "start kubelet on the staged workers: they join by TLS bootstrap")
	}
	l.add("core-addons", ThroughAPI, nil, a.coreAddons, "install kube-proxy and CoreDNS")
	if c.Networking.Plugin == "flannel" {
		l.add("pod-network", OnHosts, all, a.kubeletsSay(a.podNetwork), "install flannel (vxlan) over %s and write each node's CNI config for its pod CIDR", c.Networking.PodSubnet)
	}
	l.add("mark-nodes", ThroughAPI, nil, a.kubeletsSay(a.markNodes), "label and taint the masters, apply the inventory's labels and taints")
	if len(c.Addons) > 0 {
		l.add("addons", ThroughAPI, nil, a.addons, "apply %s (server-side)", count(len(c.Addons), "user manifest"))
	}
	if c.Networking.Plugin != "none" {
		l.add("wait-ready", ThroughAPI, nil, a.kubeletsSay(a.waitReady), "wait until every node is Ready and every pod of kube-system and kube-flannel ready, and stayed so for %s (a crash-looping pod fails apply, its log quoted)", a.o.Settle)
	}
	if a.restore != nil && len(removed) > 0 {
		l.add("reset-lost", OnHosts, removed, a.waitLostReset, "wait for the reset of the lost hosts that answer after all (started by prune)")
	}
	if len(workers) > 0 {
		l.add("forget-token", OnHosts, workers, a.forgetBootstrapToken, "remove %s from workers whose kubelet has its own credentials (kubelet.conf), as kubeadm does after TLS bootstrap", hostpath.BootstrapKubeletConfig)
	}
	if retired := a.retired(); len(retired) > 0 {
		l.add("retire", OnHosts, all, a.retire, "stop and remove, where an earlier run installed them, %s", strings.Join(retired, " and "))
	}
	if len(removed) > 0 && a.restore == nil {
		if a.o.Prune {
			l.add("prune", OnHosts, removed, a.prune, "one at a time: drain %s (no longer in the inventory), remove a master's etcd member, reset the host, delete the node", strings.Join(removed, ", "))
		} else {
			l.add("removed-hosts", OnWorkstation, nil, a.reportRemoved, "report %s: no longer in the inventory, still in the cluster (kforge apply --prune removes them)", strings.Join(removed, ", "))
		}
	}
	l.add("record-hosts", OnWorkstation, nil, a.recordHosts, "record the cluster's hosts in the state dir, to find hosts later removed from the inventory")
	return l
}

// Traffic is the bytes the run's SSH connections sent and received so far.
func (a *Apply) Traffic() (sent, received int64) { return a.fleet.Traffic() }

// Close waits for the work stage left running in the background, then ends every connection.
func (a *Apply) Close() {
	a.bg.waitAll()
	a.fleet.Close()
}

// readBundle reads the bundle's manifest of the inventory's Kubernetes version, which
// preflight checks the hosts against and stage ships from. A bundle that does not hold that
// version fails here, before anything changes, saying which bundle to build.
func (a *Apply) readBundle(context.Context, progress.Reporter) error {
	m, err := bundle.LoadRelease(a.inv.Bundle, a.inv.KubernetesVersion)
	var missing *bundle.MissingReleaseError
	if errors.As(err, &missing) {
		// A downgrade is refused as one: a bundle with that release would be refused too.
		if route := preflight.Route(a.inv, a.fleet.AllFacts()).Err(); route != nil {
			return route
		}
	}
	if err != nil {
		return err
	}
	a.manifest = m
	return nil
}

// preflightOptions are the preflight checks' options: the errors to ignore, the bundle's
// machine architecture.
func (a *Apply) preflightOptions() preflight.Options {
	o := preflight.Options{Ignore: a.o.Ignore}
	if a.manifest != nil {
		_, o.BundleArch, _ = strings.Cut(a.manifest.Platform, "/")
	}
	return o
}

// preflight checks every host centrally and fails before anything changes.
func (a *Apply) preflight(_ context.Context, r progress.Reporter) error {
	findings := preflight.Check(a.inv, a.fleet.AllFacts(), a.preflightOptions())
	for _, f := range findings {
		if f.Severity >= preflight.Warning {
			r(progress.Event{Kind: progress.Info, Host: f.Host, Message: f.String()})
		}
	}
	return findings.Err()
}
