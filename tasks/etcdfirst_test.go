package tasks

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/state"
	"github.com/kforge/kforge/templates"
)

// TestEtcdFirstAddrs: from the manifests render makes, kforge watches etcd's start time on its
// plain-HTTP metrics listener (loopback, beside its readiness check) and kube-apiserver's
// listener on the node's address.
func TestEtcdFirstAddrs(t *testing.T) {
	c := cluster(t, "")
	a := NewApply(c, Options{State: state.At(t.TempDir())})
	runSteps(t, a.Steps(), "pki", "render")
	var etcdPod, apiPod corev1.Pod
	for _, f := range a.target.files.get("m1", func(p string) bool { return p == etcdManifest || p == apiserverManifest }) {
		p := &etcdPod
		if f.Path == apiserverManifest {
			p = &apiPod
		}
		if err := yaml.Unmarshal(f.Data, p); err != nil {
			t.Fatal(err)
		}
	}
	n := c.Nodes()[0]
	metrics, api, err := etcdFirstAddrs(&etcdPod, &apiPod, n.NodeIP())
	if err != nil || metrics != "http://127.0.0.1:2381/metrics" || api != net.JoinHostPort(n.NodeIP(), "6443") {
		t.Errorf("etcdFirstAddrs = %q, %q, %v; want etcd's metrics on 127.0.0.1:2381 and kube-apiserver on %s:6443", metrics, api, err, n.NodeIP())
	}
	if _, _, err := etcdFirstAddrs(&corev1.Pod{}, &apiPod, n.NodeIP()); err == nil {
		t.Error("a manifest without a container: want an error")
	}
}

// dialTo dials addr whatever it is asked for: a host's SSH tunnel in a fast test.
type dialTo string

func (d dialTo) DialContext(ctx context.Context, network, _ string) (net.Conn, error) {
	return (&net.Dialer{}).DialContext(ctx, network, string(d))
}

// TestEtcdStartTime: process_start_time_seconds is read from etcd's metrics; an etcd that does
// not answer, or metrics without it, give "".
func TestEtcdStartTime(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n" +
			"# TYPE process_start_time_seconds gauge\n" + "process_resident_memory_bytes 1.2e+07\n" +
			"process_start_time_seconds 1.79e+09\n" + "process_virtual_memory_bytes 2e+09\n"))
	}))
	defer srv.Close()
	d := dialTo(strings.TrimPrefix(srv.URL, "http://"))
	if got := etcdStartTime(context.Background(), d, "http://127.0.0.1:2381/metrics"); got != "1.79e+09" {
		t.Errorf("etcdStartTime = %q; want 1.79e+09", got)
	}
	if got := etcdStartTime(context.Background(), d, "http://127.0.0.1:2381/other"); got != "" {
		t.Errorf("etcdStartTime of metrics without it = %q; want \"\"", got)
	}
	srv.Close()
	if got := etcdStartTime(context.Background(), d, "http://127.0.0.1:2381/metrics"); got != "" {
		t.Errorf("etcdStartTime of an etcd that does not answer = %q; want \"\"", got)
	}
}

// TestStartOrder: a new cluster's masters start together; two or more running masters roll one
// at a time; one running master with new ones joining starts alone, then they join in turn.
func TestStartOrder(t *testing.T) {
	m := func(names ...string) []inventory.Node {
		var out []inventory.Node
		for _, n := range names {
			out = append(out, inventory.Node{Host: inventory.Host{Name: n}, Role: inventory.RoleMaster})
		}
		return out
	}
	names := func(ns []inventory.Node) string {
		var out []string
		for _, n := range ns {
			out = append(out, n.Name)
		}
		return strings.Join(out, ",")
	}
	running := &templates.EtcdBootstrap{}
	for _, c := range []struct {
		name                   string
		plan                   etcdPlan
		fresh, rolling, joined string
	}{
		{"new cluster", etcdPlan{}, "m1,m2,m3", "", ""},
		{"one running, two joining", etcdPlan{boot: map[string]*templates.EtcdBootstrap{"m1": running}, join: map[string]bool{"m2": true, "m3": true}}, "m1", "", "m2,m3"},
		{"three running", etcdPlan{boot: map[string]*templates.EtcdBootstrap{"m1": running, "m2": running, "m3": running}}, "", "m1,m2,m3", ""},
		{"two running, one joining", etcdPlan{boot: map[string]*templates.EtcdBootstrap{"m1": running, "m2": running}, join: map[string]bool{"m3": true}}, "", "m1,m2", "m3"},
	} {
		fresh, rolling, joining := c.plan.startOrder(m("m1", "m2", "m3"))
		if names(fresh) != c.fresh || names(rolling) != c.rolling || names(joining) != c.joined {
			t.Errorf("%s: together %q, one at a time %q, joining %q; want %q, %q, %q", c.name, names(fresh), names(rolling), names(joining), c.fresh, c.rolling, c.joined)
		}
	}
}

// TestPushUnderRestartedKubelet, on a simulated master after apply: with nothing to replace the
// files land and kubelet is left running, untouched; with a changed static-pod manifest, the
// old manifest is removed (the running kubelet stops that pod) before kubelet stops, the new one
// lands, kubelet starts on it, and the manifest is noted as replaced (the waits after wait for
// its pod).
func TestPushUnderRestartedKubelet(t *testing.T) {
	c := cluster(t, "")
	sim := newSimCluster(t, c)
	o := Options{
		State: state.At(t.TempDir()), Timeout: 5 * time.Second, Settle: time.Millisecond,
		Connect: func(_ context.Context, n inventory.Node) (remote.Host, error) { return sim.hosts[n.Name], nil },
		API:     func(string) (kube.Clients, error) { return sim.clients(), nil },
	}
	runApply(t, NewApply(c, o))
	a := NewApply(c, o) // the next run, connected, its files rendered
	defer a.Close()
	runSteps(t, a.Steps(), "connect", "pki", "etcd-members", "render")
	h, n := sim.hosts["m1"], c.Nodes()[0]
	scheduler := path.Join(hostpath.ManifestsDir, "kube-scheduler.yaml")

	files := a.target.files.unwritten()
	before := len(h.executed())
	if err := pushUnderRestartedKubelet(t.Context(), a.rc, files, n, h, nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range h.executed()[before:] {
		if strings.HasPrefix(c, "rm ") || strings.Contains(c, "stop") || strings.Contains(c, "restart") {
			t.Errorf("nothing to replace, yet %q ran", c)
		}
	}
	if !h.running("kubelet") || len(files.replacedManifests("m1")) != 0 {
		t.Errorf("nothing to replace: kubelet running %v, replaced %v", h.running("kubelet"), files.replacedManifests("m1"))
	}

	files = a.target.files.unwritten()
	var changed []templates.File
	for _, f := range files.get("m1", nil) {
		if f.Path == scheduler {
			f.Data = append(slices.Clone(f.Data), "# changed\n"...)
		}
		changed = append(changed, f)
	}
	files.set("m1", changed)
	before = len(h.executed())
	if err := pushUnderRestartedKubelet(t.Context(), a.rc, files, n, h, nil); err != nil {
		t.Fatal(err)
	}
	ran := h.executed()[before:]
	rm, stop := slices.Index(ran, "rm -f "+scheduler), slices.Index(ran, "systemctl stop kubelet")
	start := slices.IndexFunc(ran, func(c string) bool { return c == "systemctl restart kubelet" || c == "systemctl start kubelet" })
	if rm < 0 || stop < rm || start < stop {
		t.Errorf("commands %q; want the old manifest removed, then kubelet stopped, then started", ran)
	}
	if f, ok := h.File(scheduler); !ok || !strings.HasSuffix(string(f.Data), "# changed\n") || !h.running("kubelet") {
		t.Errorf("after the push: the new manifest there %v, kubelet running %v", ok, h.running("kubelet"))
	}
	if r := files.replacedManifests("m1"); len(r) != 1 || r[0].Path != scheduler {
		t.Errorf("replaced %v; want the scheduler's manifest", r)
	}
}
