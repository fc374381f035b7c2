package tasks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/scripts"
	"github.com/kforge/kforge/templates"
)

// apiClients talk to the cluster through the first master's SSH connection: as the admin
// (admin.conf) for most things, as super-admin.conf to grant the admins their rights.
type apiClients struct {
	kube.Clients
	super kubernetes.Interface
}

// newAPIClients are the clients for cluster c, with credentials from set and connections
// through the first master of f; from api instead when it is set (Options.API).
func newAPIClients(c *inventory.Cluster, set *pki.Set, f *fleet.Fleet, api func(identity string) (kube.Clients, error)) (apiClients, error) {
	if api != nil {
		admin, err := api("admin.conf")
		if err != nil {
			return apiClients{}, err
		}
		super, err := api("super-admin.conf")
		return apiClients{Clients: admin, super: super.Typed}, err
	}
	return dialAPIClients(c, set, f, false)
}

// dialAPIClients are the clients for cluster c, with credentials from set and connections
// through the first master of f.
// With dryRun every write is a server-side dry run (kube.DryRun), for plan.
func dialAPIClients(c *inventory.Cluster, set *pki.Set, f *fleet.Fleet, dryRun bool) (apiClients, error) {
	var api apiClients
	config := func(identity string) (*rest.Config, error) {
		cfg, err := restConfig(c, set, f, identity)
		if err == nil && dryRun {
			cfg = kube.DryRun(cfg)
		}
		return cfg, err
	}
	cfg, err := config("admin.conf")
	if err != nil {
		return api, err
	}
	if api.Clients, err = kube.NewClients(cfg); err != nil {
		return api, err
	}
	if cfg, err = config("super-admin.conf"); err != nil {
		return api, err
	}
	api.super, err = kubernetes.NewForConfig(cfg)
	return api, err
}

// restConfig is a client config as one of the cluster's admin identities (admin.conf,
// super-admin.conf) whose connections go through the first master's SSH connection to its own
// API server.
func restConfig(c *inventory.Cluster, set *pki.Set, f *fleet.Fleet, identity string) (*rest.Config, error) {
	return restConfigVia(c, set, f, identity, c.Masters[0])
}

// restConfigVia is restConfig through master m's SSH connection to its own API server, which
// it names by m's address: the name its certificate is valid for whatever the cluster's
// endpoint (the first master's, when several masters have no endpoint and no virtual IP).
func restConfigVia(c *inventory.Cluster, set *pki.Set, f *fleet.Fleet, identity string, m inventory.Host) (*rest.Config, error) {
	target := net.JoinHostPort(m.NodeIP(), fmt.Sprint(pki.APIServerPort))
	kubeconfig, err := pki.Kubeconfig(c.Name, pki.APIServerURL(target), set.TrustPEM(pki.CA), set.Get(identity, ""))
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	if d, err := f.Dialer(m.Name); err == nil {
		cfg.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, target)
		}
	}
	cfg.QPS, cfg.Burst = 50, 100
	return cfg, nil
}

// waitAPIServer waits until the API server answers through an SSH tunnel to the first master,
// then for the control-plane pods this run replaced.
func (h *hop) waitAPIServer(ctx context.Context, r progress.Reporter) error {
	rc := h.rc
	api, err := rc.clients()
	if err != nil {
		return err
	}
	last := time.Time{}
	// Poll often: each attempt is one request on the open SSH connection.
	err = kube.WaitForAPIServer(ctx, api.super, kube.WaitAPIServerInput{Timeout: rc.o.Timeout, Interval: 200 * time.Millisecond, MaxInterval: 250 * time.Millisecond, Progress: func(h kube.HealthAnswer) {
		if time.Since(last) > 5*time.Second {
			last = time.Now()
			r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("waiting for the API server (%s): %s", h.Elapsed.Round(time.Second), h.String())})
		}
	}})
	if err != nil {
		return explainAPIServer(ctx, rc.fleet, h.inv.Masters[0].Name, err)
	}
	return h.waitRestartedPods(ctx, r)
}

// waitMasterPods waits, through master via's API server, until the static pods this run
// replaced on master n run their new manifests and answer their readiness checks.
func (h *hop) waitMasterPods(ctx context.Context, n, via inventory.Node) error {
	pods, err := replacedPods(h.files, []inventory.Node{n})
	if err != nil || len(pods) == 0 {
		return err
	}
	return waitPodsVia(ctx, h.rc, pods, via)
}

// replacedPods are the static pods whose manifests this run replaced on masters.
func replacedPods(files *hostFiles, masters []inventory.Node) ([]kube.StaticPod, error) {
	var pods []kube.StaticPod
	for _, n := range masters {
		for _, f := range files.replacedManifests(n.Name) {
			var pod corev1.Pod
			if err := yaml.Unmarshal(f.Data, &pod); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", n.Name, f.Path, err)
			}
			pods = append(pods, kube.StaticPod{Node: n.Name, Pod: &pod})
		}
	}
	return pods, nil
}

// waitPodsVia waits, through master via's API server, until kubelet runs pods' new manifests,
// then until each answers its readiness checks (sooner than the kubelet's probes say it).
func waitPodsVia(ctx context.Context, rc *runContext, pods []kube.StaticPod, via inventory.Node) error {
	cfg, err := restConfigVia(rc.inv, rc.set, rc.fleet, "super-admin.conf", via.Host)
	if err != nil {
		return err
	}
	c, err := kube.NewClients(cfg)
	if err != nil {
		return err
	}
	if err := kube.WaitForStaticPods(ctx, c.Typed, kube.StaticPodWait{Pods: pods, Timeout: rc.o.Timeout, Started: true}); err != nil {
		return err
	}
	return waitProbes(ctx, rc, pods)
}

// waitRestartedPods waits for the control-plane pods whose manifests this run replaced (new
// flags, image, or re-issued credentials: templates.InputsAnnotation) until kubelet runs the
// new ones and they answer their readiness checks, so that no later step talks to a component
// about to restart. The checks are asked directly (waitProbes), as waitPodsVia does: the
// kubelet's own say Ready only after its startup probe's first look, 10 s in, and its next
// status update (on the lab, 30 s after a single master's new kube-apiserver answered).
func (h *hop) waitRestartedPods(ctx context.Context, r progress.Reporter) error {
	rc := h.rc
	pods, err := replacedPods(h.files, rc.fleet.Nodes(inventory.RoleMaster))
	if err != nil {
		return err
	}
	var names []string
	for _, p := range pods {
		names = append(names, p.MirrorName())
	}
	if len(pods) > 0 {
		r(progress.Event{Kind: progress.Info, Message: "waiting for kubelet to restart " + strings.Join(names, ", ") + " with their new manifests"})
		api, err := rc.clients()
		if err != nil {
			return err
		}
		if err := kube.WaitForStaticPods(ctx, api.Typed, kube.StaticPodWait{Pods: pods, Timeout: rc.o.Timeout, Started: true}); err != nil {
			return err
		}
		if err := waitProbes(ctx, rc, pods); err != nil {
			return err
		}
	}
	// Serving certificates are reloaded, not restarted for (templates.Reloaded): wait until
	// the new ones are served, so that a later step does not meet the old one.
	masters := rc.fleet.Nodes(inventory.RoleMaster)
	var by []string
	for _, n := range masters {
		if s := servedNew(h.files, n.Name); len(s) > 0 {
			by = append(by, n.Name+" ("+strings.Join(s, ", ")+")")
		}
	}
	if len(by) == 0 {
		return nil
	}
	r(progress.Event{Kind: progress.Info, Message: "waiting until the new serving certificates are served, without a restart, on " + strings.Join(by, ", ")})
	return waitServed(ctx, rc.fleet, h.files, masters, rc.o.Timeout)
}

// explainAPIServer adds what a master's kubelet says to a failed wait.
func explainAPIServer(ctx context.Context, f *fleet.Fleet, master string, err error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	out, _ := remote.Output(ctx, f.Host(master), "systemctl is-active kubelet; journalctl -u kubelet -n 8 --no-pager -o cat 2>/dev/null | cut -c1-240")
	return &APIServerError{Host: master, Err: err, Kubelet: strings.TrimSpace(string(out))}
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
	return append(d, fmt.Sprintf("see more: ssh to %s and run: journalctl -u kubelet; ctr -n k8s.io tasks ls; the pods' logs are under /var/log/pods", e.Host))
}

// clusterConfig grants the admins their rights and uploads kubeadm-compatible config.
func (rc *runContext) clusterConfig(ctx context.Context, r progress.Reporter) error {
	cs, err := clusterConfigObjects(ctx, rc)
	r(progress.Event{Kind: progress.Info, Message: kube.Summary(cs)})
	return err
}

// The functions named *Objects ensure the API objects of one apply step and return what they
// did; kforge plan calls the same functions through dry-run clients (kube.DryRun).

func clusterConfigObjects(ctx context.Context, rc *runContext) ([]kube.Change, error) {
	api, err := rc.clients()
	if err != nil {
		return nil, err
	}
	all, err := kube.EnsureClusterAdmins(ctx, api.super)
	if err != nil {
		return all, err
	}
	if !rc.dryRun && slices.ContainsFunc(all, func(c kube.Change) bool { return c.Action == kube.Created }) {
		if err := kube.WaitAdminsAuthorized(ctx, api.Typed, 30*time.Second); err != nil {
			return all, err
		}
	}
	cc, err := kube.ClusterConfigurationFor(rc.inv)
	if err != nil {
		return all, err
	}
	kc, err := kube.KubeletConfigurationFor(rc.inv)
	if err != nil {
		return all, err
	}
	cs, err := kube.UploadConfig(ctx, api.Typed, kube.UploadConfigInput{Cluster: cc, Kubelet: kc})
	return append(all, cs...), err
}

func (rc *runContext) bootstrap(ctx context.Context, r progress.Reporter) error {
	cs, err := bootstrapObjects(ctx, rc)
	r(progress.Event{Kind: progress.Info, Message: kube.Summary(cs)})
	return err
}

func bootstrapObjects(ctx context.Context, rc *runContext) ([]kube.Change, error) {
	api, err := rc.clients()
	if err != nil {
		return nil, err
	}
	return kube.Bootstrap(ctx, api.Typed, kube.BootstrapInputFor(rc.inv, rc.set, rc.token, rc.o.Now()))
}

// joinWorkers waits for the workers' staging, starts their kubelets, and answers their client
// certificate requests: they join by TLS bootstrap with the bootstrap token. kforge approves and
// signs those requests itself, as kube-controller-manager would, because on a fresh cluster
// the controller-manager's signers start seconds after the API server answers, and a kubelet
// without its certificate makes its first requests as system:anonymous and backs off.
func joinWorkers(ctx context.Context, t *hop, st *staging, r progress.Reporter) error {
	rc := t.rc
	if err := st.waitWorkers(ctx); err != nil {
		return err
	}
	api, err := rc.clients()
	if err != nil {
		return err
	}
	server := pki.APIServerURL(pki.NodeEndpoint(t.inv))
	err = rc.fleet.Each(ctx, inventory.RoleWorker, func(ctx context.Context, n inventory.Node, h remote.Host) error {
		moved, err := repointKubelet(ctx, h, server)
		if err != nil {
			return err
		}
		msg, err := startKubelet(ctx, t.files, h)
		if moved != "" {
			msg = fmt.Sprintf("kubelet.conf moved from %s to %s, kubelet restarted", moved, server)
		}
		if err == nil {
			r(progress.Event{Kind: progress.HostDone, Host: n.Name, Message: msg})
		}
		return err
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, rc.o.Timeout)
	defer cancel()
	cs, err := kube.SignKubeletCSRs(ctx, api.Typed, kube.SignKubeletCSRsInput{
		Nodes: rc.fleet.Names(inventory.RoleWorker), Requestor: "system:bootstrap:" + rc.token.ID,
		CA: rc.set.CAs[pki.CA], Validity: rc.set.Params.CertValidity, Now: rc.o.Now, Random: rc.o.Rand,
	})
	if len(cs) > 0 {
		r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("approved and signed %s", count(len(cs), "kubelet client certificate"))})
	}
	return err
}

// markNodes labels and taints the nodes, and uncordons what an interrupted upgrade left
// cordoned once it runs the inventory's version.
func (rc *runContext) markNodes(ctx context.Context, r progress.Reporter) error {
	ctx, cancel := context.WithTimeout(ctx, rc.o.Timeout)
	defer cancel()
	api, err := rc.clients()
	if err != nil {
		return err
	}
	cs, err := kube.MarkNodes(ctx, api.Typed, kube.NodeMarksFor(rc.inv), time.Second)
	r(progress.Event{Kind: progress.Info, Message: kube.Summary(cs)})
	if err != nil {
		return err
	}
	return uncordonUpgraded(ctx, rc, r)
}

func (rc *runContext) addons(ctx context.Context, r progress.Reporter) error {
	cs, err := addonObjects(ctx, rc)
	r(progress.Event{Kind: progress.Info, Message: kube.Summary(cs)})
	return err
}

func addonObjects(ctx context.Context, rc *runContext) ([]kube.Change, error) {
	ms, err := kube.ManifestsFor(rc.inv, rc.o.InventoryDir)
	if err != nil {
		return nil, err
	}
	api, err := rc.clients()
	if err != nil {
		return nil, err
	}
	return kube.ApplyManifests(ctx, api.Dynamic, api.Mapper, kube.ApplyInput{Manifests: ms})
}

func (rc *runContext) waitReady(ctx context.Context, r progress.Reporter) error {
	ctx, cancel := context.WithTimeout(ctx, rc.o.Timeout)
	defer cancel()
	api, err := rc.clients()
	if err != nil {
		return err
	}
	last, nodesReady := time.Time{}, false
	return kube.WaitForReady(ctx, api.Typed, kube.WaitReadyInput{Nodes: rc.fleet.Names(inventory.AnyNode), Namespaces: addonNamespaces(rc.inv), Settle: rc.o.Settle, Progress: func(s kube.ReadyStatus) {
		if !nodesReady && s.ReadyNodes == s.TotalNodes {
			nodesReady = true
			r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("%s Ready %s after the run started", count(s.TotalNodes, "node"), rc.o.Now().Sub(rc.started).Round(100*time.Millisecond))})
		}
		if time.Since(last) > 5*time.Second {
			last = time.Now()
			r(progress.Event{Kind: progress.Info, Message: s.String()})
		}
	}})
}

// addonNamespaces are the namespaces of the cluster's addons, whose pods apply waits for and
// rotate-ca replaces: kube-system, and kube-flannel and local-path-storage when the inventory
// runs them.
func addonNamespaces(c *inventory.Cluster) []string {
	ns := []string{"kube-system"}
	if c.Networking.Plugin == "flannel" {
		ns = append(ns, kube.FlannelNamespace)
	}
	if c.LocalVolumes.On() {
		ns = append(ns, kube.LocalPathNamespace)
	}
	return ns
}

// readySettle is how long apply's last wait wants, by default, every pod of the cluster's
// namespaces to have stayed ready: a crash-looping pod (CoreDNS forwarding to itself) is ready for a moment
// between its restarts.
const readySettle = 10 * time.Second

// writeKubeconfig writes the user's admin kubeconfig into the state dir.
func (rc *runContext) writeKubeconfig(_ context.Context, r progress.Reporter) error {
	admin, err := templates.AdminKubeconfig(rc.inv, rc.set)
	if err != nil {
		return err
	}
	p := rc.o.State.AdminKubeconfig()
	if old, err := os.ReadFile(p); err == nil && slices.Equal(old, admin) {
		rc.kubeconfigWritten = true
		r(progress.Event{Kind: progress.Info, Message: p + " unchanged"})
		return nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := rc.o.State.Write(p, admin, 0o600); err != nil {
		return err
	}
	rc.kubeconfigWritten = true
	r(progress.Event{Kind: progress.Info, Message: "wrote " + p})
	return nil
}

// explain adds to an error of a command's steps what the user can do with the cluster as it
// is: once the API server has answered, the admin kubeconfig is in the state dir (kubeadm, too,
// writes admin.conf before it waits), so the cluster that failed can be looked at.
func (rc *runContext) explain(err error) error {
	if err == nil || !rc.kubeconfigWritten {
		return err
	}
	return &LookError{Err: err, Kubeconfig: rc.o.State.AdminKubeconfig()}
}

// LookError is a run that failed after the API server answered: the cluster can be looked at
// with the admin kubeconfig it names.
type LookError struct {
	Err        error
	Kubeconfig string
}

func (e *LookError) Error() string { return e.Err.Error() }
func (e *LookError) Unwrap() error { return e.Err }

// Details are the error's own, then how to look at the cluster.
func (e *LookError) Details() []string {
	d := []string{"kforge: error: " + e.Err.Error()}
	var inner interface{ Details() []string }
	if errors.As(e.Err, &inner) {
		d = inner.Details()
	}
	return append(d, "  the API server answers: look at the cluster with kubectl --kubeconfig "+e.Kubeconfig+" get pods -A (kforge kubeconfig prints it)")
}

// repointKubelet points a joined worker's kubelet.conf (written by its kubelet at TLS
// bootstrap, with the bootstrap kubeconfig's server) at server when it names another API
// server, as after a restore onto new masters or a changed controlPlaneEndpoint, and restarts
// kubelet. The client certificate stays: it is the kubelet's own, signed by the same CA. It
// returns the server kubelet.conf named before, or "" when it was right (or absent: the worker
// has not joined yet).
func repointKubelet(ctx context.Context, h remote.Host, server string) (string, error) {
	out, err := remote.Output(ctx, h, scripts.Command("repoint-kubelet", "server", server, "kubeconfig", hostpath.KubeletKubeconfig))
	if err != nil {
		return "", fmt.Errorf("point kubelet.conf at %s: %w", server, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// forgetTokenScript removes the bootstrap kubeconfig (it holds the bootstrap token) once the
// kubelet has its own kubeconfig, and says so.
const forgetTokenScript = `[ -s ` + hostpath.KubeletKubeconfig + ` ] && [ -e ` + hostpath.BootstrapKubeletConfig + ` ] && rm -f ` + hostpath.BootstrapKubeletConfig + ` && echo removed; true`

// forgetBootstrapToken removes bootstrap-kubelet.conf from the workers that have joined; a
// worker whose kubelet has not written kubelet.conf yet keeps it, and the next apply looks again.
func (rc *runContext) forgetBootstrapToken(ctx context.Context, r progress.Reporter) error {
	return rc.fleet.Each(ctx, inventory.RoleWorker, func(ctx context.Context, n inventory.Node, h remote.Host) error {
		out, err := remote.Output(ctx, h, forgetTokenScript)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(out)) == "removed" {
			r(progress.Event{Kind: progress.HostDone, Host: n.Name, Message: "bootstrap-kubelet.conf removed (the kubelet has its own credentials)"})
		}
		return nil
	})
}

// kubeletSaysScript prints whether kubelet runs and the last error line the kubelet itself
// logged (_SYSTEMD_UNIT: not systemd's own lines about the unit, such as "Failed with result"):
// the last one about any of pods ("namespace/name", as kubelet logs pod="..."), when there is one.
func kubeletSaysScript(pods []string) string {
	var quoted []string
	for _, p := range pods {
		quoted = append(quoted, regexp.QuoteMeta(`pod="`+p+`"`))
	}
	return scripts.Command("kubelet-says", "pods", strings.Join(quoted, "|"))
}

// kubeletsSay wraps a step that waits on nodes: when it fails with nodes at fault
// (*kube.NodesError), the error carries what each of those nodes' kubelets says, read over SSH.
func (rc *runContext) kubeletsSay(step func(context.Context, progress.Reporter) error) func(context.Context, progress.Reporter) error {
	return func(ctx context.Context, r progress.Reporter) error {
		err := step(ctx, r)
		var ne *kube.NodesError
		if !errors.As(err, &ne) {
			return err
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		var nodes []inventory.Node
		for _, name := range ne.Nodes {
			if n, ok := rc.fleet.Node(name); ok && rc.fleet.Host(name) != nil {
				nodes = append(nodes, n)
			}
		}
		script := kubeletSaysScript(ne.Pods)
		var mu sync.Mutex
		said := map[string]string{}
		_ = fleet.EachOf(ctx, rc.fleet, nodes, func(ctx context.Context, n inventory.Node, h remote.Host) error {
			out, _ := remote.Output(ctx, h, script)
			mu.Lock()
			said[n.Name] = strings.Join(strings.Fields(string(out)), " ")
			mu.Unlock()
			return nil
		})
		return &KubeletsError{Err: err, Nodes: ne.Nodes, Said: said}
	}
}

// KubeletsError is a wait that failed on some nodes, with what each node's kubelet says: whether
// it runs, and the last error of its journal.
type KubeletsError struct {
	Err   error
	Nodes []string
	Said  map[string]string // node -> "kubelet active|activating|failed <last error line>"
}

func (e *KubeletsError) Error() string {
	msg := e.Err.Error()
	for _, n := range e.Nodes {
		if s := e.Said[n]; s != "" {
			msg += "; " + n + ": " + s
		}
	}
	return msg
}

func (e *KubeletsError) Unwrap() error { return e.Err }

// Details are the wait's own details, then each node's kubelet.
func (e *KubeletsError) Details() []string {
	var d []string
	var inner interface{ Details() []string }
	if errors.As(e.Err, &inner) {
		d = inner.Details()
	} else {
		d = []string{e.Err.Error()}
	}
	for _, n := range e.Nodes {
		if s := e.Said[n]; s != "" {
			d = append(d, fmt.Sprintf("  %s: %s", n, s))
		} else {
			d = append(d, fmt.Sprintf("  %s: its kubelet could not be asked (ssh to it: journalctl -u kubelet)", n))
		}
	}
	return d
}
