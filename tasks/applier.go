package tasks

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"golang.org/x/sync/errgroup"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/facts"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/preflight"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/templates"
)

// Options are apply's inputs besides the inventory.
type Options struct {
	// StateDir holds the cluster's PKI, bootstrap token and admin kubeconfig.
	StateDir string
	// InventoryDir resolves relative paths of the inventory (external CA files).
	InventoryDir string
	// Limits bound the fan-out over hosts.
	Limits remote.Limits
	// AcceptNewHostKeys trusts unknown hosts and records their keys (--accept-new-host-keys).
	AcceptNewHostKeys bool
	// Ignore turns these preflight errors into warnings (--ignore-preflight-errors).
	Ignore preflight.Ignore
	// ResolvConf is kubelet's resolvConf (empty: the host's /etc/resolv.conf).
	ResolvConf string
	// ConntrackMaxPerCore is kube-proxy's conntrack.maxPerCore (nil: kube-proxy's default;
	// 0 leaves the machine-wide conntrack table alone, as nested hosts need).
	ConntrackMaxPerCore *int32
	// Timeout bounds each wait on the cluster (API server, nodes, pods); default 5 minutes.
	Timeout time.Duration
	Logger  *slog.Logger
	Now     func() time.Time
	Rand    io.Reader
	// Removed are the hosts of the last apply the inventory no longer lists (Removed); with
	// Prune they are drained, reset and deleted (a master's etcd member removed first),
	// otherwise apply only reports them.
	Removed []inventory.Node
	Prune   bool
	// Connect opens a host; remote.Dial when nil. Tests pass in-memory hosts.
	Connect func(ctx context.Context, n inventory.Node) (remote.Host, error)
}

// Dialer is a host that can open TCP connections from where it stands (an SSH tunnel).
type Dialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// Applier is one `kforge apply` in progress: the inventory and what kforge opened, learned
// and made on the way. Its steps are in Steps (apply.go), in order.
type Applier struct {
	inv *inventory.Cluster
	o   Options
	log *slog.Logger

	nodes    []inventory.Node
	hosts    map[string]remote.Host
	facts    map[string]*facts.Facts
	set      *pki.Set
	token    kube.BootstrapToken
	files    map[string][]templates.File // by host
	written  map[string]map[string]bool  // by host: paths written this run
	replaced map[string][]templates.File // by host: static-pod manifests that replaced another this run
	manifest *bundle.Manifest

	workersStaged  chan error   // the workers' background staging; see stage
	mastersShipped []chan error // the masters' background shipments; see shipRest

	etcdSeed string                              // a master whose etcd runs, when masters join (etcd.go)
	etcdJoin map[string]bool                     // masters joining the running etcd cluster
	etcdBoot map[string]*templates.EtcdBootstrap // how each master's etcd member starts, when not new

	pruned  []string  // removed hosts pruned this run
	started time.Time // when the apply began (NewApplier)

	mu      sync.Mutex
	clients kube.Clients
	super   kubernetes.Interface
}

// NewApplier prepares an apply of c; nothing is touched until its steps run.
func NewApplier(c *inventory.Cluster, o Options) *Applier {
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
	return &Applier{inv: c, o: o, log: o.Logger, nodes: c.Nodes(), started: o.Now(),
		hosts: map[string]remote.Host{}, facts: map[string]*facts.Facts{},
		files: map[string][]templates.File{}, written: map[string]map[string]bool{}, replaced: map[string][]templates.File{}}
}

// awaitWorkers waits for the workers' background staging (stage) and returns its error.
func (a *Applier) awaitWorkers(ctx context.Context) error {
	if a.workersStaged == nil {
		return nil
	}
	select {
	case err := <-a.workersStaged:
		a.workersStaged = nil
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close waits for background staging to end, then ends every connection the apply opened.
func (a *Applier) Close() {
	if a.workersStaged != nil {
		<-a.workersStaged
	}
	_ = a.awaitMasters(context.Background())
	for _, h := range a.hosts {
		if c, ok := h.(io.Closer); ok {
			c.Close()
		}
	}
}

// AdminKubeconfigPath is where apply writes the user's admin kubeconfig.
func AdminKubeconfigPath(stateDir string) string { return filepath.Join(stateDir, "admin.conf") }

// bootstrapTokenTTL is how long a bootstrap token lives (kubeadm's default); kforge renews it
// on a run when less than half of it is left.
const bootstrapTokenTTL = 24 * time.Hour

// sysctlFile is kforge's own sysctl.d file; only it is applied (`sysctl --system` fails on
// hosts where some global keys are read-only, such as containers).
const sysctlFile = "/etc/sysctl.d/99-kforge.conf"

const sysctlConf = "# Written by kforge: what Kubernetes networking needs.\nnet.ipv4.ip_forward = 1\nnet.bridge.bridge-nf-call-iptables = 1\nnet.bridge.bridge-nf-call-ip6tables = 1\n"

// cniConfFile is the pod network config kforge writes on each node.
const cniConfFile = "/etc/cni/net.d/10-kforge.conflist"

type nodeRef struct{ inventory.Node }

func (n nodeRef) Name() string { return n.Node.Name }

func (a *Applier) refs(role inventory.Role) []nodeRef {
	var out []nodeRef
	for _, n := range a.nodes {
		if role == "" || n.Role == role {
			out = append(out, nodeRef{n})
		}
	}
	return out
}

func (a *Applier) each(ctx context.Context, role inventory.Role, fn func(ctx context.Context, n inventory.Node, h remote.Host) error) error {
	return remote.Each(ctx, a.refs(role), a.o.Limits, func(ctx context.Context, n nodeRef) error {
		return fn(ctx, n.Node, a.host(n.Node.Name))
	})
}

func (a *Applier) host(name string) remote.Host {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.hosts[name]
}

// connect opens every host and gathers its facts in one round trip.
func (a *Applier) connect(ctx context.Context, r Reporter) error {
	return remote.Each(ctx, a.refs(""), a.o.Limits, func(ctx context.Context, n nodeRef) error {
		start := a.o.Now()
		var h remote.Host
		var err error
		if a.o.Connect != nil {
			h, err = a.o.Connect(ctx, n.Node)
		} else {
			cfg := remote.ConfigFor(n.Node)
			cfg.AcceptNewHostKeys = a.o.AcceptNewHostKeys
			cfg.DialRetry = 30 * time.Second
			h, err = remote.Dial(ctx, cfg, remote.Options{Logger: a.log})
		}
		if err != nil {
			return err
		}
		a.mu.Lock()
		a.hosts[n.Node.Name] = h
		a.mu.Unlock()
		f, err := facts.Gather(ctx, h, facts.Options{CRIEndpoint: a.inv.ContainerRuntime.Endpoint, Dirs: templates.CACertDirCandidates, Now: a.o.Now})
		if err != nil {
			return err
		}
		a.mu.Lock()
		a.facts[n.Node.Name] = f
		a.mu.Unlock()
		r(Event{Kind: HostDone, Host: n.Node.Name, Duration: a.o.Now().Sub(start),
			Message: fmt.Sprintf("%s %s, kernel %s, %d CPUs, %d MiB", f.OS.ID, f.OS.VersionID, f.Kernel, f.CPUs, f.MemoryBytes>>20)})
		return nil
	})
}

// preflight checks every host centrally and fails before anything changes.
func (a *Applier) preflight(_ context.Context, r Reporter) error {
	o := preflight.Options{Ignore: a.o.Ignore}
	if a.inv.Bundle != "" {
		m, err := bundle.LoadManifest(a.inv.Bundle)
		if err != nil {
			return fmt.Errorf("bundle %s: %w", a.inv.Bundle, err)
		}
		a.manifest = m
		_, arch, _ := strings.Cut(m.Platform, "/")
		o.BundleArch = arch
	}
	findings := preflight.Check(a.inv, a.facts, o)
	for _, f := range findings {
		if f.Severity >= preflight.Warning {
			r(Event{Kind: Progress, Host: f.Host, Message: f.String()})
		}
	}
	return findings.Err()
}

// ensurePKI generates or reuses the certificates and the bootstrap token in the state dir.
func (a *Applier) ensurePKI(_ context.Context, r Reporter) error {
	set, changes, err := pki.EnsureCluster(a.inv, a.o.InventoryDir, a.o.StateDir, a.o.Now(), a.o.Rand)
	if err != nil {
		return fmt.Errorf("PKI in %s: %w", filepath.Join(a.o.StateDir, pki.StateSubdir), err)
	}
	a.set = set
	for _, ch := range changes {
		r(Event{Kind: Progress, Message: ch.String()})
	}
	tok, renewed, err := a.bootstrapToken()
	if err != nil {
		return err
	}
	a.token = tok
	if renewed {
		r(Event{Kind: Progress, Message: "bootstrap token " + tok.ID + ": created"})
	}
	return nil
}

// bootstrapToken reuses the state dir's token while more than half its TTL is left, so a
// re-run rewrites no worker's bootstrap kubeconfig.
func (a *Applier) bootstrapToken() (kube.BootstrapToken, bool, error) {
	file := filepath.Join(a.o.StateDir, "bootstrap-token")
	if fi, err := os.Stat(file); err == nil && a.o.Now().Sub(fi.ModTime()) < bootstrapTokenTTL/2 {
		b, err := os.ReadFile(file)
		if err != nil {
			return kube.BootstrapToken{}, false, err
		}
		t, err := kube.ParseBootstrapToken(string(b), bootstrapTokenTTL)
		if err == nil {
			return t, false, nil
		}
	}
	t, err := kube.NewBootstrapToken(a.o.Rand, bootstrapTokenTTL)
	if err != nil {
		return t, false, err
	}
	if err := pki.WriteFile(file, []byte(t.Value()+"\n"), 0o600); err != nil {
		return t, false, err
	}
	return t, true, nil
}

// render makes every host's files from the PKI set and the host's facts.
func (a *Applier) render(_ context.Context, r Reporter) error {
	restrict := map[string]bool{}
	for name, f := range a.facts {
		restrict[name] = !f.HasCapSysResource()
	}
	for _, n := range a.nodes {
		o := templates.Options{BootstrapToken: a.token.Value(), RestrictOOMScoreAdj: restrict, ResolvConf: a.o.ResolvConf, EtcdBoot: a.etcdBoot,
			RetiringMasters: len(names(a.o.Removed, inventory.RoleMaster))}
		if f := a.facts[n.Name]; f != nil {
			o.CACertDirs = f.Dirs
		}
		trees, err := templates.Tree(a.inv, a.set, o)
		if err != nil {
			return err
		}
		for _, t := range trees {
			if t.Node.Name != n.Name {
				continue
			}
			files := append(t.Files, templates.File{Path: sysctlFile, Mode: 0o644, Data: []byte(sysctlConf)})
			if n.Role == inventory.RoleMaster {
				var pods []string
				for _, f := range t.Files {
					if path.Dir(f.Path) == templates.ManifestsDir {
						pods = append(pods, path.Base(f.Path))
					}
				}
				files = append(files, templates.File{Path: facts.ManifestsMarkerPath, Mode: 0o600, Data: facts.ManifestsMarker(a.inv.Name, pods)})
			}
			a.files[n.Name] = files
		}
	}
	return nil
}

// push uploads the files of h that differ from what the host has, atomically, and records
// which were written. Only those paths in scope are pushed (nil: all).
func (a *Applier) push(ctx context.Context, n inventory.Node, h remote.Host, scope func(path string) bool) error {
	var want []templates.File
	a.mu.Lock()
	files := a.files[n.Name]
	a.mu.Unlock()
	for _, f := range files {
		if scope == nil || scope(f.Path) {
			want = append(want, f)
		}
	}
	if len(want) == 0 {
		return nil
	}
	paths := make([]string, len(want))
	for i, f := range want {
		paths[i] = f.Path
	}
	have, err := hashes(ctx, h, paths)
	if err != nil {
		return err
	}
	for _, f := range want {
		sum := sha256.Sum256(f.Data)
		if have[f.Path] == hex.EncodeToString(sum[:]) {
			continue
		}
		if err := h.Upload(ctx, remote.Bytes(f.Path, f.Data, f.Mode)); err != nil {
			return err
		}
		a.mu.Lock()
		if a.written[n.Name] == nil {
			a.written[n.Name] = map[string]bool{}
		}
		a.written[n.Name][f.Path] = true
		if have[f.Path] != "" && path.Dir(f.Path) == templates.ManifestsDir {
			a.replaced[n.Name] = append(a.replaced[n.Name], f)
		}
		a.mu.Unlock()
	}
	return nil
}

// hashes returns the sha256 of each path that is a regular file on h, in one command.
func hashes(ctx context.Context, h remote.Host, paths []string) (map[string]string, error) {
	var b strings.Builder
	b.WriteString("for f in")
	for _, p := range paths {
		b.WriteString(" " + remote.Quote(p))
	}
	b.WriteString(`; do [ -f "$f" ] && sha256sum -- "$f"; done; true`)
	out, err := remote.Output(ctx, h, b.String())
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		sum, p, ok := strings.Cut(line, "  ")
		if ok {
			m[p] = sum
		}
	}
	return m, nil
}

func (a *Applier) wrote(host string, pred func(string) bool) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for p := range a.written[host] {
		if pred(p) {
			return true
		}
	}
	return false
}

func isRuntimeFile(p string) bool { return p == sysctlFile || p == templates.ContainerdConfigPath }

// controlPlaneFirst is what a master needs before its kubelet can start the control plane:
// everything else of the bundle (the addons' images, the tools) is shipped while the API server
// starts.
func controlPlaneFirst(name string) bool {
	switch name {
	case "kubelet", "bridge", "host-local", "loopback", "portmap",
		"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "pause":
		return true
	}
	return false
}

// ship brings h up to date with the part of the bundle need names and says what it did.
func (a *Applier) ship(ctx context.Context, h remote.Host, need bundle.Need, r Reporter) (string, error) {
	t := a.o.Now()
	p, err := bundle.Ship(ctx, h, a.inv.Bundle, a.manifest, need, uploadProgress(r, a.o.Now))
	if err != nil {
		return "", err
	}
	if p.Empty() {
		return "bundle up to date", nil
	}
	return fmt.Sprintf("bundle: %d files, %d images, %d MiB in %s", len(p.Install), len(p.Import), p.Bytes()>>20, a.o.Now().Sub(t).Round(100*time.Millisecond)), nil
}

// shipRest ships the rest of the bundle to a master in the background; core-addons waits for
// it (awaitMasters) before the addons' pods can be scheduled there.
func (a *Applier) shipRest(ctx context.Context, n inventory.Node, h remote.Host, r Reporter) {
	done := make(chan error, 1)
	a.mu.Lock()
	a.mastersShipped = append(a.mastersShipped, done)
	a.mu.Unlock()
	go func() {
		msg, err := a.ship(ctx, h, bundle.Need{ControlPlane: true}, r)
		if err == nil && msg != "bundle up to date" {
			r(Event{Kind: HostDone, Host: n.Name, Message: "rest of the " + msg})
		}
		done <- remote.WithHost(n.Name, err)
	}()
}

// awaitMasters waits for the masters' background shipments (shipRest).
func (a *Applier) awaitMasters(ctx context.Context) error {
	a.mu.Lock()
	pending := a.mastersShipped
	a.mastersShipped = nil
	a.mu.Unlock()
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

// uploadProgress reports a host's large uploads at most every two seconds.
func uploadProgress(r Reporter, now func() time.Time) bundle.Progress {
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
		r(Event{Kind: Progress, Host: host, Message: fmt.Sprintf("uploading %s: %d of %d MiB", artifact, sent>>20, total>>20)})
	}
}

// configureRuntime configures containerd and the kernel settings on one host; containerd
// restarts only when its config changed. It says what it did.
func (a *Applier) configureRuntime(ctx context.Context, n inventory.Node, h remote.Host) (string, error) {
	if err := a.push(ctx, n, h, isRuntimeFile); err != nil {
		return "", err
	}
	f := a.facts[n.Name]
	var cmds []string
	if a.wrote(n.Name, func(p string) bool { return p == sysctlFile }) ||
		f.Sysctls["net.ipv4.ip_forward"] != "1" || f.Sysctls["net.bridge.bridge-nf-call-iptables"] != "1" {
		cmds = append(cmds, "sysctl -q -p "+sysctlFile)
	}
	restart := a.wrote(n.Name, func(p string) bool { return p == templates.ContainerdConfigPath })
	if restart {
		cmds = append(cmds, "systemctl restart containerd")
	}
	cmds = append(cmds, "{ systemctl is-enabled -q containerd || systemctl enable -q containerd; }", "{ systemctl is-active -q containerd || systemctl start containerd; }")
	if err := h.Run(ctx, remote.Cmd{Command: strings.Join(cmds, " && ")}); err != nil {
		return "", err
	}
	return restartedMsg(restart, "containerd"), nil
}

func restartedMsg(restarted bool, what string) string {
	if restarted {
		return what + " restarted"
	}
	return what + " unchanged"
}

// isKubeletInput says whether a change of p needs a kubelet restart.
func isKubeletInput(p string) bool {
	return strings.HasPrefix(p, "/var/lib/kubelet/") || strings.HasPrefix(p, "/etc/systemd/system/kubelet.service") ||
		p == "/etc/kubernetes/kubelet.conf" || p == templates.BootstrapKubeletConfig || p == "/etc/kubernetes/pki/ca.crt"
}

// startKubelet (re)starts kubelet on h when its inputs changed, or starts it when it is not
// running; an unchanged running kubelet is left alone.
func (a *Applier) startKubelet(ctx context.Context, n inventory.Node, h remote.Host) (string, error) {
	var cmds []string
	if a.wrote(n.Name, func(p string) bool { return strings.HasPrefix(p, "/etc/systemd/system/") }) {
		cmds = append(cmds, "systemctl daemon-reload")
	}
	cmds = append(cmds, "{ systemctl is-enabled -q kubelet || systemctl enable -q kubelet; }")
	what := "kubelet unchanged"
	if a.wrote(n.Name, isKubeletInput) {
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

// stage runs every host's pipeline in parallel: what it lacks from the bundle, then
// containerd and kernel settings, then its files; masters go on to start kubelet and with it
// the static-pod control plane. The step ends when every master is started: workers finish
// staging in the background while the control plane comes up, and joinWorkers waits for them.
func (a *Applier) stage(ctx context.Context, r Reporter) error {
	workers := a.refs(inventory.RoleWorker)
	done := make(chan error, 1)
	a.workersStaged = done
	go func() {
		done <- remote.Each(ctx, workers, a.o.Limits, func(ctx context.Context, n nodeRef) error {
			return a.stageHost(ctx, n.Node, r)
		})
	}()
	var fresh, joining []nodeRef
	for _, n := range a.refs(inventory.RoleMaster) {
		if a.etcdJoin[n.Node.Name] {
			joining = append(joining, n)
		} else {
			fresh = append(fresh, n)
		}
	}
	if err := remote.Each(ctx, fresh, a.o.Limits, func(ctx context.Context, n nodeRef) error {
		return a.stageHost(ctx, n.Node, r)
	}); err != nil {
		return err
	}
	// Masters joining a running etcd cluster start one at a time: each new member must be up
	// before the next is added, or the cluster loses quorum.
	for _, n := range joining {
		if err := a.stageHost(ctx, n.Node, r); err != nil {
			return remote.WithHost(n.Node.Name, err)
		}
		if err := a.waitEtcdMember(ctx, n.Node); err != nil {
			return remote.WithHost(n.Node.Name, err)
		}
	}
	return nil
}

// stageHost is one host's pipeline; see stage.
func (a *Applier) stageHost(ctx context.Context, n inventory.Node, r Reporter) error {
	h := a.host(n.Name)
	start := a.o.Now()
	var did []string
	if a.manifest != nil {
		need := bundle.Need{ControlPlane: n.Role == inventory.RoleMaster}
		if need.ControlPlane {
			need.Only = controlPlaneFirst // the rest follows in the background, see shipRest
		}
		msg, err := a.ship(ctx, h, need, r)
		if err != nil {
			return err
		}
		did = append(did, msg)
	}
	msg, err := a.configureRuntime(ctx, n, h)
	if err != nil {
		return err
	}
	did = append(did, msg)
	if err := a.push(ctx, n, h, nil); err != nil {
		return err
	}
	a.mu.Lock()
	did = append(did, fmt.Sprintf("%d files written", len(a.written[n.Name])))
	a.mu.Unlock()
	if n.Role == inventory.RoleMaster {
		if err := a.addEtcdMember(ctx, n); err != nil {
			return err
		}
		msg, err := a.startKubelet(ctx, n, h)
		if err != nil {
			return err
		}
		did = append(did, msg)
		if a.manifest != nil {
			a.shipRest(ctx, n, h, r)
		}
	} else {
		did = append(did, "staged")
	}
	r(Event{Kind: HostDone, Host: n.Name, Duration: a.o.Now().Sub(start), Message: strings.Join(did, "; ")})
	return nil
}

// restConfig is a client config as one of the cluster's admin identities (admin.conf,
// super-admin.conf) whose connections go through the first master's SSH connection to its own
// API server.
func (a *Applier) restConfig(identity string) (*rest.Config, error) {
	kubeconfig, err := pki.Kubeconfig(a.inv.Name, pki.APIServerURL(pki.Endpoint(a.inv)), a.set.CAs[pki.CA].Cert, a.set.Get(identity, ""))
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	m := a.inv.Masters[0]
	if d, ok := a.hosts[m.Name].(Dialer); ok {
		target := net.JoinHostPort(m.NodeIP(), fmt.Sprint(pki.APIServerPort))
		cfg.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, target)
		}
	}
	cfg.QPS, cfg.Burst = 50, 100
	return cfg, nil
}

// waitAPIServer waits until the API server answers through an SSH tunnel to the first master.
func (a *Applier) waitAPIServer(ctx context.Context, r Reporter) error {
	cfg, err := a.restConfig("admin.conf")
	if err != nil {
		return err
	}
	if a.clients, err = kube.NewClients(cfg); err != nil {
		return err
	}
	if cfg, err = a.restConfig("super-admin.conf"); err != nil {
		return err
	}
	if a.super, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	last := time.Time{}
	// Poll often: each attempt is one request on the open SSH connection.
	err = kube.WaitForAPIServer(ctx, a.super, kube.WaitAPIServerInput{Timeout: a.o.Timeout, Interval: 200 * time.Millisecond, MaxInterval: 250 * time.Millisecond, Progress: func(h kube.HealthAnswer) {
		if time.Since(last) > 5*time.Second {
			last = time.Now()
			r(Event{Kind: Progress, Message: fmt.Sprintf("waiting for the API server (%s): %s", h.Elapsed.Round(time.Second), h.String())})
		}
	}})
	if err != nil {
		return a.explainAPIServer(ctx, err)
	}
	return a.waitRestartedPods(ctx, r)
}

// waitRestartedPods waits for the control-plane pods whose manifests this run replaced (new
// flags, image, or re-issued credentials: templates.InputsAnnotation) until kubelet runs the
// new ones and they are Ready, so that no later step talks to a component about to restart.
func (a *Applier) waitRestartedPods(ctx context.Context, r Reporter) error {
	var pods []kube.StaticPod
	var names []string
	for _, n := range a.nodes {
		for _, f := range a.replaced[n.Name] {
			var pod corev1.Pod
			if err := yaml.Unmarshal(f.Data, &pod); err != nil {
				return fmt.Errorf("%s: %s: %w", n.Name, f.Path, err)
			}
			s := kube.StaticPod{Node: n.Name, Pod: &pod}
			pods, names = append(pods, s), append(names, s.MirrorName())
		}
	}
	if len(pods) == 0 {
		return nil
	}
	r(Event{Kind: Progress, Message: "waiting for kubelet to restart " + strings.Join(names, ", ") + " with their new manifests"})
	return kube.WaitForStaticPods(ctx, a.clients.Typed, pods, a.o.Timeout)
}

// explainAPIServer adds what the first master's kubelet says to a failed wait.
func (a *Applier) explainAPIServer(ctx context.Context, err error) error {
	m := a.inv.Masters[0].Name
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	out, _ := remote.Output(ctx, a.hosts[m], "systemctl is-active kubelet; journalctl -u kubelet -n 8 --no-pager -o cat 2>/dev/null | cut -c1-240")
	return &APIServerError{Host: m, Err: err, Kubelet: strings.TrimSpace(string(out))}
}

// APIServerError is a control plane that did not come up: the last health answer, kubelet's
// state on the first master, and where to look next.
type APIServerError struct {
	Host    string
	Err     error
	Kubelet string
}

func (e *APIServerError) Error() string {
	return fmt.Sprintf("%s: API server not ready: %v", e.Host, e.Err)
}
func (e *APIServerError) Unwrap() error { return e.Err }
func (e *APIServerError) Details() []string {
	d := []string{e.Error()}
	if e.Kubelet != "" {
		d = append(d, "kubelet on "+e.Host+":")
		for _, l := range strings.Split(e.Kubelet, "\n") {
			d = append(d, "    "+l)
		}
	}
	return append(d, fmt.Sprintf("see more: ssh to %s and run: journalctl -u kubelet; crictl ps -a (or ctr -n k8s.io containers ls)", e.Host))
}

// clusterConfig grants the admins their rights and uploads kubeadm-compatible config.
func (a *Applier) clusterConfig(ctx context.Context, r Reporter) error {
	var all []kube.Change
	cs, err := kube.EnsureClusterAdmins(ctx, a.super)
	if err != nil {
		return err
	}
	all = append(all, cs...)
	cc, err := kube.ClusterConfigurationFor(a.inv)
	if err != nil {
		return err
	}
	kc, err := kube.KubeletConfigurationFor(a.inv, templates.Options{ResolvConf: a.o.ResolvConf})
	if err != nil {
		return err
	}
	cs, err = kube.UploadConfig(ctx, a.clients.Typed, kube.UploadConfigInput{Cluster: cc, Kubelet: kc})
	all = append(all, cs...)
	r(Event{Kind: Progress, Message: kube.Summary(all)})
	return err
}

func (a *Applier) bootstrap(ctx context.Context, r Reporter) error {
	cs, err := kube.Bootstrap(ctx, a.clients.Typed, kube.BootstrapInputFor(a.inv, a.set, a.token, a.o.Now()))
	r(Event{Kind: Progress, Message: kube.Summary(cs)})
	return err
}

// joinWorkers waits for the workers' staging, starts their kubelets, and answers their client
// certificate requests: they join by TLS bootstrap with the bootstrap token. kforge approves and
// signs those requests itself, as kube-controller-manager would, because on a fresh cluster
// the controller-manager's signers start seconds after the API server answers, and a kubelet
// without its certificate makes its first requests as system:anonymous and backs off.
func (a *Applier) joinWorkers(ctx context.Context, r Reporter) error {
	if err := a.awaitWorkers(ctx); err != nil {
		return err
	}
	err := a.each(ctx, inventory.RoleWorker, func(ctx context.Context, n inventory.Node, h remote.Host) error {
		msg, err := a.startKubelet(ctx, n, h)
		if err == nil {
			r(Event{Kind: HostDone, Host: n.Name, Message: msg})
		}
		return err
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, a.o.Timeout)
	defer cancel()
	cs, err := kube.SignKubeletCSRs(ctx, a.clients.Typed, kube.SignKubeletCSRsInput{
		Nodes: names(a.nodes, inventory.RoleWorker), Requestor: "system:bootstrap:" + a.token.ID,
		CA: a.set.CAs[pki.CA], Now: a.o.Now, Random: a.o.Rand,
	})
	if len(cs) > 0 {
		r(Event{Kind: Progress, Message: fmt.Sprintf("approved and signed %s", count(len(cs), "kubelet client certificate"))})
	}
	return err
}

func (a *Applier) images() (kube.Images, error) {
	if a.manifest != nil {
		return kube.ImagesFromManifest(a.manifest)
	}
	v, err := bundle.DefaultVersions(a.inv.KubernetesVersion)
	if err != nil {
		return kube.Images{}, err
	}
	return kube.ImagesFor(a.inv.ImageRepository, v), nil
}

func (a *Applier) coreAddons(ctx context.Context, r Reporter) error {
	if err := a.awaitMasters(ctx); err != nil {
		return err
	}
	im, err := a.images()
	if err != nil {
		return err
	}
	var all []kube.Change
	cs, err := kube.KubeProxy(ctx, a.clients.Typed, kube.KubeProxyInputFor(a.inv, im, a.o.ConntrackMaxPerCore))
	all = append(all, cs...)
	if err != nil {
		return err
	}
	cs, err = kube.CoreDNS(ctx, a.clients.Typed, kube.CoreDNSInputFor(a.inv, im))
	all = append(all, cs...)
	r(Event{Kind: Progress, Message: kube.Summary(all)})
	return err
}

// podNetwork installs flannel and writes each node's CNI config over its pod CIDR as soon as
// the node has one (kubelet reports the node NotReady until then). Nodes that registered
// without a pod CIDR get one from kforge right away (kube.PodCIDRs says how it stays clear of
// kube-controller-manager's node IPAM).
func (a *Applier) podNetwork(ctx context.Context, r Reporter) error {
	im, err := a.images()
	if err != nil {
		return err
	}
	cs, err := kube.Flannel(ctx, a.clients.Typed, kube.FlannelInputFor(a.inv, im))
	if err != nil {
		return err
	}
	r(Event{Kind: Progress, Message: "flannel: " + kube.Summary(cs)})
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cmp.Or(a.o.Limits.Hosts, remote.DefaultConcurrency))
	byName := map[string]inventory.Node{}
	for _, n := range a.nodes {
		byName[n.Name] = n
	}
	_, cs, err = kube.PodCIDRs(gctx, a.clients.Typed, kube.PodCIDRsInput{
		Nodes: names(a.nodes, ""), Timeout: a.o.Timeout,
		Subnet: a.inv.Networking.PodSubnet, MaskSize: a.inv.Networking.NodeCIDRMaskSize,
		Have: func(node, cidr string) {
			g.Go(func() error { return a.writeCNIConfig(gctx, byName[node], cidr, r) })
		},
	})
	if len(cs) > 0 {
		r(Event{Kind: Progress, Message: fmt.Sprintf("gave %s a pod CIDR", count(len(cs), "node"))})
	}
	if werr := g.Wait(); err == nil {
		err = werr
	}
	return err
}

// writeCNIConfig writes node n's CNI config for its pod CIDR.
func (a *Applier) writeCNIConfig(ctx context.Context, n inventory.Node, cidr string, r Reporter) error {
	conf, err := templates.FlannelCNIConfig(cidr, a.inv.Networking.PodSubnet)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.files[n.Name] = append(a.files[n.Name], templates.File{Path: cniConfFile, Mode: 0o644, Data: conf})
	a.mu.Unlock()
	if err := a.push(ctx, n, a.host(n.Name), func(p string) bool { return p == cniConfFile }); err != nil {
		return err
	}
	r(Event{Kind: HostDone, Host: n.Name, Message: "pod CIDR " + cidr})
	return nil
}

func (a *Applier) markNodes(ctx context.Context, r Reporter) error {
	ctx, cancel := context.WithTimeout(ctx, a.o.Timeout)
	defer cancel()
	cs, err := kube.MarkNodes(ctx, a.clients.Typed, kube.NodeMarksFor(a.inv), time.Second)
	r(Event{Kind: Progress, Message: kube.Summary(cs)})
	return err
}

func (a *Applier) addons(ctx context.Context, r Reporter) error {
	ms, err := kube.ManifestsFor(a.inv, a.o.InventoryDir)
	if err != nil {
		return err
	}
	cs, err := kube.ApplyManifests(ctx, a.clients.Dynamic, a.clients.Mapper, kube.ApplyInput{Manifests: ms})
	r(Event{Kind: Progress, Message: kube.Summary(cs)})
	return err
}

func (a *Applier) waitReady(ctx context.Context, r Reporter) error {
	ctx, cancel := context.WithTimeout(ctx, a.o.Timeout)
	defer cancel()
	ns := []string{"kube-system"}
	if a.inv.Networking.Plugin == "flannel" {
		ns = append(ns, "kube-flannel")
	}
	last, nodesReady := time.Time{}, false
	return kube.WaitForReady(ctx, a.clients.Typed, kube.WaitReadyInput{Nodes: names(a.nodes, ""), Namespaces: ns, Progress: func(s kube.ReadyStatus) {
		if !nodesReady && s.ReadyNodes == s.TotalNodes {
			nodesReady = true
			r(Event{Kind: Progress, Message: fmt.Sprintf("%s Ready %s after apply started", count(s.TotalNodes, "node"), a.o.Now().Sub(a.started).Round(100*time.Millisecond))})
		}
		if time.Since(last) > 5*time.Second {
			last = time.Now()
			r(Event{Kind: Progress, Message: s.String()})
		}
	}})
}

// writeKubeconfig writes the user's admin kubeconfig into the state dir.
func (a *Applier) writeKubeconfig(_ context.Context, r Reporter) error {
	admin, err := templates.AdminKubeconfig(a.inv, a.set)
	if err != nil {
		return err
	}
	p := AdminKubeconfigPath(a.o.StateDir)
	if old, err := os.ReadFile(p); err == nil && slices.Equal(old, admin) {
		r(Event{Kind: Progress, Message: p + " unchanged"})
		return nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := pki.WriteFile(p, admin, 0o600); err != nil {
		return err
	}
	r(Event{Kind: Progress, Message: "wrote " + p})
	return nil
}
