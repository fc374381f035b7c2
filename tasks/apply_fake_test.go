package tasks

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	restfake "k8s.io/client-go/rest/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"github.com/kforge/kforge/facts"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/remote/remotetest"
	"github.com/kforge/kforge/state"
	"github.com/kforge/kforge/templates"
)

// TestApplyOnFakeHostsThenNothingToDo runs the whole of apply against in-memory hosts (one
// master, two workers) and a fake API, then runs it again. The first run must leave each host
// with its role's files, started services and a joined node; the second must change nothing:
// no upload, no restart, no API write.
func TestApplyOnFakeHostsThenNothingToDo(t *testing.T) {
	c := cluster(t, "workers:\n  - {name: w1, address: 10.0.0.2}\n  - {name: w2, address: 10.0.0.3}\n")
	sim := newSimCluster(t, c)
	dir := state.At(t.TempDir())
	var identities []string
	o := Options{
		State:   dir,
		Timeout: 5 * time.Second, // every wait on the simulated cluster ends within milliseconds
		Settle:  time.Millisecond,
		Connect: func(_ context.Context, n inventory.Node) (remote.Host, error) { return sim.hosts[n.Name], nil },
		API: func(identity string) (kube.Clients, error) {
			identities = append(identities, identity)
			return sim.clients(), nil
		},
	}

	// Run 1: a new cluster.
	start := time.Now()
	a := NewApply(c, o)
	ev1 := runApply(t, a)
	t.Logf("first apply: %s", time.Since(start).Round(time.Millisecond))
	if !slices.Equal(identities, []string{"admin.conf", "super-admin.conf"}) {
		t.Errorf("API identities asked for: %v", identities)
	}
	token := strings.TrimSpace(readFile(t, dir.BootstrapToken()))
	tokenID, _, _ := strings.Cut(token, ".")
	caPEM := readFile(t, filepath.Join(dir.PKI(), "ca.crt"))
	ca, err := pki.ParseCert([]byte(caPEM))
	if err != nil {
		t.Fatal(err)
	}

	for _, name := range []string{"m1", "w1", "w2"} {
		h := sim.hosts[name]
		master := name == "m1"
		files := h.Files()
		want := []string{hostpath.ContainerdConfigPath, hostpath.SysctlFile, hostpath.KubeletConfigPath,
			hostpath.KubeletFlagsEnvPath, hostpath.KubeletDropInPath, hostpath.CACert, hostpath.CNIConfFile}
		if master {
			want = append(want, "/etc/kubernetes/manifests/etcd.yaml", "/etc/kubernetes/manifests/kube-apiserver.yaml",
				"/etc/kubernetes/manifests/kube-controller-manager.yaml", "/etc/kubernetes/manifests/kube-scheduler.yaml",
				hostpath.ManifestsMarkerPath, hostpath.PKIDir+"/ca.key", hostpath.PKIDir+"/sa.key", hostpath.PKIDir+"/etcd/ca.key",
				hostpath.KubeletKubeconfig, "/etc/kubernetes/admin.conf", "/etc/kubernetes/super-admin.conf")
		} else {
			want = append(want, hostpath.KubeletKubeconfig)
		}
		for _, p := range want {
			if !slices.Contains(files, p) {
				t.Errorf("%s lacks %s", name, p)
			}
		}
		if !master {
			for _, p := range files {
				// A worker's one key is its kubelet's serving key.
				if strings.HasSuffix(p, ".key") && p != hostpath.KubeletServerKey || strings.HasPrefix(p, hostpath.ManifestsDir+"/") || p == "/etc/kubernetes/admin.conf" {
					t.Errorf("worker %s has %s", name, p)
				}
			}
			// It was uploaded with the state dir's bootstrap token, and removed once the
			// kubelet had its own credentials (forget-token), as kubeadm does.
			if f, _ := h.File(hostpath.BootstrapKubeletConfig); f.Data != nil || !slices.Contains(h.Uploads(), hostpath.BootstrapKubeletConfig) {
				t.Errorf("%s: %s left after joining, or never uploaded", name, hostpath.BootstrapKubeletConfig)
			}
			if !bytes.Contains(h.bootstrapConf, []byte("token: "+token)) {
				t.Errorf("%s: %s did not carry the state dir's bootstrap token", name, hostpath.BootstrapKubeletConfig)
			}
		}
		// Every file on the host was uploaded (no simulated component writes into what apply
		// manages), each exactly once, and secrets are readable by root only.
		uploads, secrets := h.Uploads(), 0
		for _, p := range files {
			if strings.HasPrefix(p, hostpath.EtcdDataDir+"/") || (!master && p == hostpath.KubeletKubeconfig) {
				continue // written by the simulated etcd, or by a worker's kubelet
			}
			if n := occurrences(uploads, p); n != 1 {
				t.Errorf("%s: %s uploaded %d times", name, p, n)
			}
			f, _ := h.File(p)
			secret := strings.HasSuffix(p, ".key") || bytes.Contains(f.Data, []byte("PRIVATE KEY")) ||
				bytes.Contains(f.Data, []byte("client-key-data: ")) || bytes.Contains(f.Data, []byte("token: "))
			if secret {
				secrets++
			}
			if secret && f.Mode != 0o600 {
				t.Errorf("%s: %s holds a secret but has mode %o", name, p, f.Mode)
			}
			if !secret && strings.HasSuffix(p, ".crt") && f.Mode != 0o644 {
				t.Errorf("%s: certificate %s has mode %o", name, p, f.Mode)
			}
		}
		// A master has 11 keys and 5 kubeconfigs with a client key; a joined worker none from
		// kforge (its bootstrap kubeconfig is gone; its kubelet's key is its own).
		if wantSecrets := map[bool]int{true: 16, false: 0}[master]; secrets < wantSecrets {
			t.Errorf("%s: %d files hold a key or credentials, want at least %d", name, secrets, wantSecrets)
		}
		if f, _ := h.File(hostpath.CACert); string(f.Data) != caPEM {
			t.Errorf("%s: %s is not the state dir's CA", name, hostpath.CACert)
		}
		// etcd runs as the etcd user apply made, and its serving and peer keys are its own.
		if master {
			if f, _ := h.File(hostpath.PKIDir + "/etcd/server.key"); f.UID != 998 || f.GID != 997 || f.Mode != 0o600 {
				t.Errorf("%s: etcd's server key %d:%d %o, want 998:997 600", name, f.UID, f.GID, f.Mode)
			}
			if f, _ := h.File(hostpath.PKIDir + "/etcd/ca.key"); f.UID != 0 {
				t.Errorf("%s: the etcd CA's key is owned by %d", name, f.UID)
			}
			if f, _ := h.File(hostpath.ManifestsDir + "/etcd.yaml"); !strings.Contains(string(f.Data), "runAsUser: 998") || !strings.Contains(string(f.Data), "runAsGroup: 997") {
				t.Errorf("%s: etcd's static pod does not run as the etcd user:\n%s", name, f.Data)
			}
		}
		// Services: containerd restarted for its new config, the kernel settings applied,
		// kubelet enabled and running.
		ran := h.executed()
		for _, cmd := range []string{"systemctl restart containerd", "systemctl daemon-reload", "systemctl enable -q kubelet", "systemctl restart kubelet"} {
			if !slices.Contains(ran, cmd) {
				t.Errorf("%s: %q did not run; ran %q", name, cmd, ran)
			}
		}
		// Only the kernel settings that differed were written (forwarding was off; the
		// bridge's were on).
		if i := slices.IndexFunc(ran, func(c string) bool { return strings.HasPrefix(c, "sysctl -q -w ") }); i < 0 ||
			!strings.Contains(ran[i], " net.ipv4.ip_forward=1") || strings.Contains(ran[i], "bridge-nf-call-iptables") {
			t.Errorf("%s: the kernel settings written: %q", name, ran)
		}
		if !h.running("kubelet") || !h.enabled("kubelet") || !h.running("containerd") {
			t.Errorf("%s: kubelet running %v enabled %v, containerd running %v", name, h.running("kubelet"), h.enabled("kubelet"), h.running("containerd"))
		}
		for _, s := range templates.Sysctls {
			if v := h.sysctl(s.Key); v != s.Value {
				t.Errorf("%s: %s is %q after apply, want %s", name, s.Key, v, s.Value)
			}
		}
	}

	// What the first run said it did on each host, for contrast with the second.
	for _, e := range ev1 {
		if e.Kind != progress.HostDone || (e.Task != "stage" && e.Task != "join-workers") {
			continue
		}
		restarted := strings.HasPrefix(e.Message, "containerd restarted; ") && strings.HasSuffix(e.Message, map[bool]string{true: "; kubelet restarted", false: "; staged"}[e.Host == "m1"])
		if e.Task == "stage" && !restarted || e.Task == "join-workers" && e.Message != "kubelet restarted" {
			t.Errorf("first run, %s on %s: %q", e.Task, e.Host, e.Message)
		}
	}

	ctx := context.Background()
	// Both workers joined by TLS bootstrap: their kubelet's request, made with the bootstrap
	// token, was approved and signed by the cluster CA.
	csrs, err := sim.api.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var signed []string
	for _, csr := range csrs.Items {
		if csr.Spec.Username != "system:bootstrap:"+tokenID || !isApproved(&csr) {
			t.Errorf("CSR %s by %s, conditions %v", csr.Name, csr.Spec.Username, csr.Status.Conditions)
			continue
		}
		b, _ := pem.Decode(csr.Status.Certificate)
		if b == nil {
			t.Errorf("CSR %s carries no certificate", csr.Name)
			continue
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil || cert.CheckSignatureFrom(ca) != nil {
			t.Errorf("CSR %s: certificate not signed by the cluster CA (%v)", csr.Name, err)
			continue
		}
		signed = append(signed, cert.Subject.CommonName)
	}
	slices.Sort(signed)
	if !slices.Equal(signed, []string{"system:node:w1", "system:node:w2"}) {
		t.Errorf("signed kubelet client certificates: %v", signed)
	}
	// Every node registered, got a pod CIDR, and its host's CNI config names it.
	nodes, err := sim.api.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cidrs := map[string]bool{}
	for _, n := range nodes.Items {
		cidr := n.Spec.PodCIDR
		if cidr == "" || cidrs[cidr] || !strings.HasPrefix(cidr, "10.244.") {
			t.Errorf("node %s: pod CIDR %q", n.Name, cidr)
		}
		cidrs[cidr] = true
		if f, _ := sim.hosts[n.Name].File(hostpath.CNIConfFile); !bytes.Contains(f.Data, []byte(cidr)) {
			t.Errorf("node %s: CNI config does not name its pod CIDR %s:\n%s", n.Name, cidr, f.Data)
		}
	}
	if len(nodes.Items) != 3 {
		t.Errorf("%d nodes registered, want 3", len(nodes.Items))
	}
	if m1, err := sim.api.CoreV1().Nodes().Get(ctx, "m1", metav1.GetOptions{}); err != nil || len(m1.Spec.Taints) == 0 {
		t.Errorf("master not tainted: %v", err)
	}
	// The state dir has the admin kubeconfig and the hosts record.
	if fi, err := os.Stat(dir.AdminKubeconfig()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("admin kubeconfig: %v", err)
	} else if cfg, err := clientcmd.LoadFromFile(dir.AdminKubeconfig()); err != nil || len(cfg.AuthInfos) != 1 {
		t.Errorf("admin kubeconfig does not load: %v", err)
	}
	if rec, err := dir.ReadHosts(); err != nil || len(rec.Hosts) != 3 {
		t.Errorf("hosts record: %+v, %v", rec, err)
	}

	// Run 2: the same inventory, state dir and hosts; nothing to do.
	sim.settle()
	uploads, skipped, ran := map[string][]string{}, map[string]int{}, map[string]int{}
	for name, h := range sim.hosts {
		uploads[name], skipped[name], ran[name] = h.Uploads(), len(h.Skipped()), len(h.executed())
	}
	actions := len(sim.api.Actions())
	start = time.Now()
	a2 := NewApply(c, o)
	ev2 := runApply(t, a2)
	t.Logf("second apply: %s", time.Since(start).Round(time.Millisecond))
	sim.settle()
	for name, h := range sim.hosts {
		if got := h.Uploads(); !slices.Equal(got, uploads[name]) {
			t.Errorf("%s: second run uploaded %v", name, got[len(uploads[name]):])
		}
		if got := h.Skipped(); len(got) != skipped[name] {
			t.Errorf("%s: second run sent files the host already had: %v", name, got[skipped[name]:])
		}
		for _, cmd := range h.executed()[ran[name]:] {
			readOnly := strings.HasPrefix(cmd, "systemctl is-") || strings.HasPrefix(cmd, "grep -q") || strings.HasPrefix(cmd, "[ -e ") || strings.HasPrefix(cmd, "[ ! -f ")
			if !readOnly {
				t.Errorf("%s: second run ran %q", name, cmd)
			}
		}
	}
	for _, a := range sim.api.Actions()[actions:] {
		switch a.GetVerb() {
		case "get", "list", "watch":
		default:
			t.Errorf("second run wrote to the API: %s %s %s", a.GetVerb(), a.GetResource().Resource, a.GetSubresource())
		}
	}
	wantHost := map[string]string{
		"stage/m1": "containerd unchanged; 0 files written; kubelet unchanged",
		"stage/w1": "containerd unchanged; 0 files written; staged", "stage/w2": "containerd unchanged; 0 files written; staged",
		"join-workers/w1": "kubelet unchanged", "join-workers/w2": "kubelet unchanged",
	}
	for _, n := range []string{"m1", "w1", "w2"} {
		node, err := sim.api.CoreV1().Nodes().Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wantHost["pod-network/"+n] = "pod CIDR " + node.Spec.PodCIDR + "; CNI config unchanged"
	}
	for _, e := range ev2 {
		if want, ok := wantHost[e.Task+"/"+e.Host]; ok && e.Kind == progress.HostDone {
			if e.Message != want {
				t.Errorf("second run, %s on %s: %q, want %q", e.Task, e.Host, e.Message, want)
			}
			delete(wantHost, e.Task+"/"+e.Host)
		}
		if e.Kind == progress.Info {
			for _, change := range []string{"created", "updated", "renewed", "removed", "wrote", "signed", "gave", "restart"} {
				if strings.Contains(e.Message, change) {
					t.Errorf("second run, %s: %q", e.Task, e.Message)
				}
			}
		}
	}
	if len(wantHost) > 0 {
		t.Errorf("second run reported nothing for %v", wantHost)
	}
	// The second run found the cluster the first left running (and its preflight passed it as
	// kforge's own): the API server listening, etcd's data, kforge's kubelet drop-in.
	if f := a2.rc.fleet.Facts("m1"); len(f.ListenersOn(6443)) != 1 || len(f.EtcdDataDir) == 0 || !f.KubeletDropIn || f.Manifests.Marker == nil {
		t.Errorf("second run's facts of m1: listeners %v, etcd %v, drop-in %v, marker %v", f.Listeners, f.EtcdDataDir, f.KubeletDropIn, f.Manifests.Marker)
	}
}

// runApply runs a's steps, fails the test unless every one ran and succeeded, and returns the
// events reported.
func runApply(t *testing.T, a *Apply) []progress.Event {
	t.Helper()
	var mu sync.Mutex
	var events []progress.Event
	steps := a.Steps()
	timings, err := Run(context.Background(), steps, func(e progress.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	}, time.Now)
	a.Close()
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if len(timings) != len(steps) {
		t.Fatalf("%d of %d steps ran", len(timings), len(steps))
	}
	var done []string
	for _, e := range events {
		if e.Kind == progress.Done {
			done = append(done, e.Task)
		}
	}
	if !slices.Equal(done, taskNames(Tasks(steps))) {
		t.Fatalf("steps done %v, want %v", done, taskNames(Tasks(steps)))
	}
	return events
}

func occurrences(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

func isApproved(csr *certv1.CertificateSigningRequest) bool {
	return slices.ContainsFunc(csr.Status.Conditions, func(c certv1.CertificateSigningRequestCondition) bool {
		return c.Type == certv1.CertificateApproved && c.Status == corev1.ConditionTrue
	})
}

// simCluster is a small simulated cluster: hosts that answer apply's commands like a systemd
// host with containerd and a kubelet package, an API server that is a fake clientset, kubelets
// that register their nodes (workers by TLS bootstrap), and a controller that runs the pods of
// Deployments and DaemonSets. It simulates no more than apply's steps look at.
type simCluster struct {
	t      *testing.T
	ctx    context.Context
	wg     sync.WaitGroup
	hosts  map[string]*simHost
	api    *fakeAPI
	dyn    *dynamicfake.FakeDynamicClient // what the typed clientset does not serve (APIServices)
	canned []string                       // the static lines of a real host's facts (facts/testdata/ubuntu-v2-rerun.txt)
	poke   chan struct{}
	flush  chan chan struct{}
}

// clients are the simulated cluster's API clients (no mapper: no test here applies manifests).
func (s *simCluster) clients() kube.Clients { return kube.Clients{Typed: s.api, Dynamic: s.dyn} }

func newSimCluster(t *testing.T, c *inventory.Cluster) *simCluster {
	ctx, cancel := context.WithCancel(context.Background())
	s := &simCluster{t: t, ctx: ctx, hosts: map[string]*simHost{}, poke: make(chan struct{}, 1), flush: make(chan chan struct{})}
	t.Cleanup(func() { cancel(); s.wg.Wait() })
	// From a real Ubuntu 24.04 host (cgroup v2, containerd 2.1 running, kubelet v1.36.3
	// installed): what does not change with the host's name or with what apply does. Swap, the
	// listeners, the static pods and the etcd data of that host are left out; simHost.facts
	// adds them as they are on the simulated host. Every preflight check passes on these facts
	// honestly, so the test ignores none (Options.Ignore is empty).
	for _, l := range strings.Split(readFile(t, "../facts/testdata/ubuntu-v2-rerun.txt"), "\n") {
		for _, p := range []string{"uid=", "arch=", "kernel=", "systemd=", "os ", "cpus=", "meminfo MemTotal:", "capeff=", "mount ", "cgroup2 ", "bin ", "ver ", "dir "} {
			if strings.HasPrefix(l, p) {
				s.canned = append(s.canned, l)
			}
		}
	}
	cs := fake.NewClientset()
	s.dyn = dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	s.api = &fakeAPI{Clientset: cs, ready: func() bool { return s.hosts[c.Masters[0].Name].apiServerUp() }}
	// The controller looks again whenever a node, Deployment or DaemonSet is written. The
	// reactor only pokes: the write itself is the fake's, done under the fake's lock before
	// the controller's next read can start.
	cs.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		switch a.GetResource().Resource {
		case "nodes", "deployments", "daemonsets":
			if a.GetSubresource() == "" && (a.GetVerb() == "create" || a.GetVerb() == "update" || a.GetVerb() == "patch") {
				select {
				case s.poke <- struct{}{}:
				default:
				}
			}
		}
		return false, nil, nil
	})
	// The API server's authorizer: the fake keeps no RBAC, so every review is allowed (the
	// fake's object tracker cannot store a SelfSubjectAccessReview).
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		r.Status.Allowed = true
		return true, r, nil
	})
	s.wg.Add(1)
	go s.controller()
	for _, n := range c.Nodes() {
		s.hosts[n.Name] = newSimHost(s, n)
	}
	return s
}

// settle waits until the controller has handled every write so far.
func (s *simCluster) settle() {
	done := make(chan struct{})
	s.flush <- done
	<-done
}

func (s *simCluster) errorf(format string, args ...any) {
	if s.ctx.Err() == nil {
		s.t.Errorf(format, args...)
	}
}

// controller gives every DaemonSet a running, ready pod on each node and every Deployment its
// replicas, and sets their status as the workload controllers would.
func (s *simCluster) controller() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.poke:
			s.reconcile()
		case done := <-s.flush:
			select {
			case <-s.poke:
				s.reconcile()
			default:
			}
			close(done)
		}
	}
}

func (s *simCluster) reconcile() {
	ctx := s.ctx
	nodes, err := s.api.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		s.errorf("controller: %v", err)
		return
	}
	for _, ns := range []string{"kube-system", "kube-flannel"} {
		dss, err := s.api.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			s.errorf("controller: %v", err)
			return
		}
		for _, ds := range dss.Items {
			for _, n := range nodes.Items {
				s.runPod(&ds, ds.Name+"-"+n.Name, n.Name)
			}
			n := int32(len(nodes.Items))
			if st := ds.Status; st.ObservedGeneration != ds.Generation || st.DesiredNumberScheduled != n || st.NumberReady != n || st.UpdatedNumberScheduled != n {
				ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, DesiredNumberScheduled: n, CurrentNumberScheduled: n, NumberReady: n, UpdatedNumberScheduled: n, NumberAvailable: n}
				if _, err := s.api.AppsV1().DaemonSets(ns).UpdateStatus(ctx, &ds, metav1.UpdateOptions{}); err != nil {
					s.errorf("controller: %v", err)
				}
			}
		}
		deps, err := s.api.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			s.errorf("controller: %v", err)
			return
		}
		for _, d := range deps.Items {
			replicas := int32(1)
			if d.Spec.Replicas != nil {
				replicas = *d.Spec.Replicas
			}
			for i := range replicas {
				node := ""
				if len(nodes.Items) > 0 {
					node = nodes.Items[int(i)%len(nodes.Items)].Name
				}
				s.runPod(&d, fmt.Sprintf("%s-%d", d.Name, i), node)
			}
			if st := d.Status; st.Replicas != replicas || st.ReadyReplicas != replicas || st.UpdatedReplicas != replicas {
				d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: replicas, UpdatedReplicas: replicas, ReadyReplicas: replicas, AvailableReplicas: replicas}
				if _, err := s.api.AppsV1().Deployments(ns).UpdateStatus(ctx, &d, metav1.UpdateOptions{}); err != nil {
					s.errorf("controller: %v", err)
				}
			}
		}
	}
}

// runPod creates owner's pod name on node, running and ready, unless it exists.
func (s *simCluster) runPod(owner metav1.Object, name, node string) {
	kind := "DaemonSet"
	if _, ok := owner.(*appsv1.Deployment); ok {
		kind = "Deployment"
	}
	yes := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: owner.GetNamespace(),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: owner.GetName(), Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	_, err := s.api.CoreV1().Pods(pod.Namespace).Create(s.ctx, pod, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		s.errorf("controller: %v", err)
	}
}

// fakeAPI is the fake clientset with an API server's health endpoint: /readyz answers 200
// once the first master runs kube-apiserver and etcd, 500 before.
type fakeAPI struct {
	*fake.Clientset
	ready func() bool
}

func (c *fakeAPI) Discovery() discovery.DiscoveryInterface {
	rc := &restfake.RESTClient{
		NegotiatedSerializer: scheme.Codecs.WithoutConversion(),
		Client: restfake.CreateHTTPClient(func(r *http.Request) (*http.Response, error) {
			code, body := http.StatusInternalServerError, "[+]ping ok\n[-]etcd failed: reason withheld\nreadyz check failed\n"
			if r.URL.Path != "/readyz" {
				code, body = http.StatusNotFound, "not found"
			} else if c.ready() {
				code, body = http.StatusOK, "[+]ping ok\n[+]etcd ok\nreadyz check passed\n"
			}
			return &http.Response{StatusCode: code, Header: http.Header{"Content-Type": {"text/plain"}}, Body: io.NopCloser(strings.NewReader(body))}, nil
		}),
	}
	return healthDiscovery{c.Clientset.Discovery().(*fakediscovery.FakeDiscovery), rc}
}

type healthDiscovery struct {
	*fakediscovery.FakeDiscovery
	rc rest.Interface
}

func (d healthDiscovery) RESTClient() rest.Interface { return d.rc }

var _ kubernetes.Interface = (*fakeAPI)(nil)

// simHost is one simulated machine: remotetest's files, uploads and command log, with systemd
// units, kernel settings and a kubelet that does what apply waits for.
type simHost struct {
	*remotetest.Host
	sim  *simCluster
	node inventory.Node

	mu      sync.Mutex
	ran     []string        // simple commands executed (not those "&&" or "||" skipped)
	active  map[string]bool // systemd units running
	enable  map[string]bool // systemd units enabled
	sysctls map[string]string
	joined  bool // kubelet has registered its node
	// bootstrapConf is the last bootstrap-kubelet.conf uploaded (forget-token removes the file).
	bootstrapConf []byte
	// etcdUser: etcd-user.sh made the etcd user (simEtcdUser).
	etcdUser bool
	// firewalld, when set, runs in its public zone letting in these ports ("22/tcp") and, from
	// its trusted zone, these sources; firewall-open.sh adds to them.
	firewalld *simFirewalld
}

type simFirewalld struct{ ports, sources []string }

// simEtcdUser is the etcd user's passwd line on simulated masters.
const simEtcdUser = "etcd:x:998:997:etcd, made by kforge:/var/lib/etcd:/usr/sbin/nologin"

func newSimHost(s *simCluster, n inventory.Node) *simHost {
	h := &simHost{Host: remotetest.New(n.Name), sim: s, node: n,
		// Fresh from the packages: containerd running, kubelet installed but not enabled;
		// br_netfilter loaded, forwarding off.
		active: map[string]bool{"containerd": true}, enable: map[string]bool{"containerd": true},
		sysctls: map[string]string{"net.ipv4.ip_forward": "0", "net.bridge.bridge-nf-call-iptables": "1", "net.bridge.bridge-nf-call-ip6tables": "1"},
	}
	first := func(c string) string { w, _, _ := strings.Cut(c, " "); return w }
	h.Handle(func(c string) bool { return slices.Contains([]string{"{", "systemctl", "sysctl", "rm"}, first(c)) }, func(ctx context.Context, c remote.Cmd) error {
		status, err := h.sh(c.Command, c.Stdout)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", h.Name(), c.Command, err)
		}
		if status != 0 {
			return h.Exit(c.Command, status, "")
		}
		return nil
	})
	h.Handle(func(c string) bool { return strings.HasPrefix(c, "sh -c ") }, func(_ context.Context, c remote.Cmd) error {
		_, err := io.WriteString(c.Stdout, h.facts())
		return err
	})
	h.Handle(func(c string) bool { return strings.HasPrefix(c, "for f in ") }, h.hashes)
	h.Handle(func(c string) bool { return strings.HasPrefix(c, "kind=") }, h.openFirewall)
	h.Handle(func(c string) bool { return strings.HasPrefix(c, "user=etcd\n") }, func(_ context.Context, c remote.Cmd) error {
		h.mu.Lock()
		h.etcdUser = true
		h.mu.Unlock()
		_, err := io.WriteString(c.Stdout, simEtcdUser+"\n")
		return err
	})
	h.Handle(func(c string) bool { return strings.HasPrefix(c, "server=") }, h.repointKubelet)
	h.Handle(func(c string) bool { return c == forgetTokenScript }, func(_ context.Context, c remote.Cmd) error {
		if h.has(hostpath.KubeletKubeconfig) && h.has(hostpath.BootstrapKubeletConfig) {
			h.RemoveFile(hostpath.BootstrapKubeletConfig)
			_, err := io.WriteString(c.Stdout, "removed\n")
			return err
		}
		return nil
	})
	return h
}

// DialContext reaches the host's own ports, as its SSH connection does: while the API server's
// static pods run (apiServerUp), kube-apiserver on 6443 and etcd on 2379 and 2380 serve the
// certificate and key their files hold at the moment of the handshake, as the real ones reload
// them (templates.Reloaded). Every other port refuses.
func (h *simHost) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	_, port, _ := net.SplitHostPort(addr)
	files := map[string]string{"6443": "apiserver", "2379": "etcd/server", "2380": "etcd/peer"}
	name, ok := files[port]
	if !ok || !h.apiServerUp() {
		return nil, fmt.Errorf("%s: dial %s %s: connection refused", h.Name(), network, addr)
	}
	crt, okc := h.File(hostpath.PKIDir + "/" + name + ".crt")
	key, okk := h.File(hostpath.PKIDir + "/" + name + ".key")
	if !okc || !okk {
		return nil, fmt.Errorf("%s: dial %s %s: connection refused", h.Name(), network, addr)
	}
	cert, err := tls.X509KeyPair(crt.Data, key.Data)
	if err != nil {
		return nil, err
	}
	client, server := net.Pipe()
	go func() {
		defer server.Close()
		c := tls.Server(server, &tls.Config{Certificates: []tls.Certificate{cert}})
		if c.HandshakeContext(ctx) == nil {
			_, _ = io.Copy(io.Discard, c)
		}
	}()
	return client, nil
}

// repointKubelet does what scripts/repoint-kubelet.sh does, on the host's files.
func (h *simHost) repointKubelet(_ context.Context, c remote.Cmd) error {
	line, _, _ := strings.Cut(strings.TrimPrefix(c.Command, "server="), "\n")
	server := strings.Trim(line, "'")
	f, ok := h.File(hostpath.KubeletKubeconfig)
	if !ok {
		return nil
	}
	var cur string
	lines := strings.Split(string(f.Data), "\n")
	for i, l := range lines {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "server: "); ok {
			if cur = v; cur == server {
				return nil
			}
			lines[i] = strings.Repeat(" ", len(l)-len(strings.TrimLeft(l, " "))) + "server: " + server
			break
		}
	}
	h.SetFile(hostpath.KubeletKubeconfig, []byte(strings.Join(lines, "\n")), f.Mode)
	_, err := io.WriteString(c.Stdout, cur+"\n")
	return err
}

func (h *simHost) executed() []string       { h.mu.Lock(); defer h.mu.Unlock(); return slices.Clone(h.ran) }
func (h *simHost) running(unit string) bool { h.mu.Lock(); defer h.mu.Unlock(); return h.active[unit] }
func (h *simHost) enabled(unit string) bool { h.mu.Lock(); defer h.mu.Unlock(); return h.enable[unit] }
func (h *simHost) sysctl(key string) string { h.mu.Lock(); defer h.mu.Unlock(); return h.sysctls[key] }

func (h *simHost) has(p string) bool { _, ok := h.File(p); return ok }

// apiServerUp: kubelet runs and has the API server's and etcd's static pods.
func (h *simHost) apiServerUp() bool {
	return h.running("kubelet") && h.has(hostpath.ManifestsDir+"/kube-apiserver.yaml") && h.has(hostpath.ManifestsDir+"/etcd.yaml")
}

// hashes answers push's one-round-trip hash command (stage.go hashes) from the host's files.
func (h *simHost) hashes(_ context.Context, c remote.Cmd) error {
	list, _, ok := strings.Cut(strings.TrimPrefix(c.Command, "for f in "), "; do ")
	if !ok {
		return fmt.Errorf("hash command: %q", c.Command)
	}
	for _, q := range strings.Fields(list) {
		p := strings.Trim(q, "'")
		if f, ok := h.File(p); ok {
			fmt.Fprintf(c.Stdout, "%x  %s\n", sha256.Sum256(f.Data), p)
		}
	}
	for _, q := range strings.Fields(list) {
		p := strings.Trim(q, "'")
		if f, ok := h.File(p); ok {
			fmt.Fprintf(c.Stdout, "meta %o %d:%d %s\n", f.Mode.Perm(), f.UID, f.GID, p)
		}
	}
	return nil
}

// openFirewall is firewall-open.sh on this host's firewalld: the ports and sources its inputs
// name are let in, each said as the script says it.
func (h *simHost) openFirewall(_ context.Context, c remote.Cmd) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.firewalld == nil || !strings.HasPrefix(c.Command, "kind=firewalld\n") {
		return h.Exit(c.Command, 1, "no firewall kforge knows")
	}
	input := func(name string) []string {
		_, rest, _ := strings.Cut(c.Command, "\n"+name+"=")
		if v, ok := strings.CutPrefix(rest, "'"); ok {
			rest, _, _ = strings.Cut(v, "'")
		} else {
			rest, _, _ = strings.Cut(rest, "\n")
		}
		return strings.Fields(rest)
	}
	for _, p := range input("ports") {
		h.firewalld.ports = append(h.firewalld.ports, p)
		fmt.Fprintf(c.Stdout, "opened %s\n", p)
	}
	for _, s := range input("sources") {
		h.firewalld.sources = append(h.firewalld.sources, s)
		fmt.Fprintf(c.Stdout, "trusted %s\n", s)
	}
	return nil
}

// facts is the output of the facts script on this host as it is now.
func (h *simHost) facts() string {
	var b strings.Builder
	id := sha256.Sum256([]byte(h.Name()))
	fmt.Fprintf(&b, "kforge-facts 1\nclock=%d\nhostname=%s\nmachineid=%s\nmeminfo SwapTotal: 0\n", time.Now().UnixNano(), h.Name(), hex.EncodeToString(id[:16]))
	for _, l := range h.sim.canned {
		b.WriteString(l + "\n")
	}
	h.mu.Lock()
	if h.etcdUser {
		fmt.Fprintf(&b, "etcduser=%s\n", simEtcdUser)
	}
	for _, k := range facts.SysctlKeys {
		if v, ok := h.sysctls[k]; ok {
			fmt.Fprintf(&b, "sysctl %s %s\n", strings.ReplaceAll(k, ".", "/"), v)
		}
	}
	containerd, kubelet := h.active["containerd"], h.active["kubelet"]
	h.mu.Unlock()
	// Listening sockets: sshd, and what kubelet runs (its own port; on a master the static
	// pods whose manifests it has), as /proc/net/tcp and the owners' comm show them.
	type listener struct {
		port     int
		comm     string
		manifest string
	}
	ls := []listener{{22, "sshd", ""}}
	if kubelet {
		ls = append(ls, listener{10250, "kubelet", ""}, listener{6443, "kube-apiserver", "kube-apiserver.yaml"},
			listener{10259, "kube-scheduler", "kube-scheduler.yaml"}, listener{10257, "kube-controller", "kube-controller-manager.yaml"},
			listener{2379, "etcd", "etcd.yaml"}, listener{2380, "etcd", "etcd.yaml"})
	}
	for i, l := range ls {
		if l.manifest != "" && !h.has(path.Join(hostpath.ManifestsDir, l.manifest)) {
			continue
		}
		fmt.Fprintf(&b, "tcp    %d: 00000000:%04X 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 %d 1 0000000000000000 100 0 0 10 0\n", i, l.port, 50000+i)
		fmt.Fprintf(&b, "sock %d %d %s\n", 50000+i, 1000+i, l.comm)
	}
	if fw := h.firewalld; fw != nil {
		b.WriteString("firewall=firewalld\nfwzone public\n")
		for _, p := range fw.ports {
			fmt.Fprintf(&b, "fwopen %s\n", p)
		}
		for _, s := range fw.sources {
			fmt.Fprintf(&b, "fwsource %s\n", s)
		}
	} else {
		b.WriteString("firewall=none\n")
	}
	b.WriteString("runtime socket /run/containerd/containerd.sock\n")
	if containerd {
		b.WriteString("runtime exists\nruntime answering\nctr Server:\nctr   Version:  v2.1.4\n")
	}
	if h.IsDir(hostpath.ManifestsDir) {
		b.WriteString("manifests exists\n")
	}
	etcd := map[string]bool{}
	for _, p := range h.Files() {
		if path.Dir(p) == hostpath.ManifestsDir {
			fmt.Fprintf(&b, "manifest %s\n", path.Base(p))
		}
		if rest, ok := strings.CutPrefix(p, hostpath.EtcdDataDir+"/"); ok {
			first, _, _ := strings.Cut(rest, "/")
			if !etcd[first] {
				etcd[first] = true
				fmt.Fprintf(&b, "etcd %s\n", first)
			}
		}
	}
	if f, ok := h.File(hostpath.ManifestsMarkerPath); ok {
		for _, l := range strings.Split(strings.TrimSuffix(string(f.Data), "\n"), "\n") {
			fmt.Fprintf(&b, "marker %s\n", l)
		}
	}
	if h.has(hostpath.KubeletDropInPath) {
		b.WriteString("kubeletdropin=1\n")
	}
	if f, ok := h.File(hostpath.KubeletKubeconfig); ok { // the one path apply asks facts to hash
		fmt.Fprintf(&b, "sum %x %s\n", sha256.Sum256(f.Data), hostpath.KubeletKubeconfig)
	}
	b.WriteString("kforge-facts end\n")
	return b.String()
}

// sh runs a command line of the shell subset apply's service commands use: simple commands
// joined by "&&", "||" and ";", and "{ ...; }" groups. It returns the exit status.
func (h *simHost) sh(line string, out io.Writer) (int, error) {
	var toks []string
	for _, f := range strings.Fields(line) {
		if w, ok := strings.CutSuffix(f, ";"); ok {
			if w != "" {
				toks = append(toks, w)
			}
			toks = append(toks, ";")
		} else {
			toks = append(toks, f)
		}
	}
	p := &shParser{toks: toks, run: func(args []string) (int, error) { return h.command(args, out) }}
	status, err := p.list(true)
	if err == nil && p.i != len(toks) {
		err = fmt.Errorf("unexpected %q", toks[p.i])
	}
	return status, err
}

type shParser struct {
	toks []string
	i    int
	run  func(args []string) (int, error)
}

// list parses commands until "}" or the end, running them when exec (and as "&&" and "||"
// say).
func (p *shParser) list(exec bool) (int, error) {
	status, err := p.item(exec)
	for err == nil && p.i < len(p.toks) && p.toks[p.i] != "}" {
		op := p.toks[p.i]
		p.i++
		if op == ";" && (p.i == len(p.toks) || p.toks[p.i] == "}") {
			break
		}
		run := exec
		switch op {
		case "&&":
			run = exec && status == 0
		case "||":
			run = exec && status != 0
		case ";":
		default:
			return 0, fmt.Errorf("unexpected %q", op)
		}
		var st int
		st, err = p.item(run)
		if run {
			status = st
		}
	}
	return status, err
}

func (p *shParser) item(exec bool) (int, error) {
	if p.i < len(p.toks) && p.toks[p.i] == "{" {
		p.i++
		status, err := p.list(exec)
		if err == nil && (p.i == len(p.toks) || p.toks[p.i] != "}") {
			err = errors.New("missing }")
		}
		p.i++
		return status, err
	}
	start := p.i
	for p.i < len(p.toks) && !slices.Contains([]string{"&&", "||", ";", "{", "}"}, p.toks[p.i]) {
		p.i++
	}
	if p.i == start {
		return 0, errors.New("missing command")
	}
	if !exec {
		return 0, nil
	}
	return p.run(p.toks[start:p.i])
}

// command runs one simple command: echo, sysctl -w, systemctl on containerd, kubelet and the
// service-route unit, the
// kernel module checks (a kernel with overlay and br_netfilter).
func (h *simHost) command(args []string, out io.Writer) (int, error) {
	h.mu.Lock()
	h.ran = append(h.ran, strings.Join(args, " "))
	h.mu.Unlock()
	switch {
	case args[0] == "echo":
		_, err := fmt.Fprintln(out, strings.Join(args[1:], " "))
		return 0, err
	case len(args) > 3 && strings.Join(args[:3], " ") == "sysctl -q -w":
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, a := range args[3:] {
			k, v, ok := strings.Cut(a, "=")
			if !ok {
				return 255, nil
			}
			h.sysctls[k] = v
		}
		return 0, nil
	case len(args) == 3 && args[0] == "cat" && args[1] == "--":
		f, ok := h.File(args[2])
		if !ok {
			return 1, nil
		}
		_, err := out.Write(f.Data)
		return 0, err
	case len(args) == 2 && args[0] == "systemctl" && args[1] == "daemon-reload":
		return 0, nil
	case strings.Join(args, " ") == "grep -qw overlay /proc/filesystems",
		strings.Join(args, " ") == "[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]":
		return 0, nil // the simulated kernel has both (built in)
	case strings.Join(args, " ") == "[ ! -f "+hostpath.ServiceRouteMarker+" ]",
		strings.Join(args, " ") == "[ ! -f "+hostpath.ServiceRouteMarkerIPv6+" ]":
		return 0, nil // the simulated hosts have a default route: the unit adds none
	case len(args) > 2 && args[0] == "rm" && args[1] == "-f":
		for _, p := range args[2:] {
			h.RemoveFile(strings.Trim(p, "'"))
		}
		return 0, nil
	case args[0] != "systemctl" || len(args) < 3:
		return 127, fmt.Errorf("no such command in the simulation: %q", args)
	}
	verb, unit := args[1], args[len(args)-1]
	if unit != "kubelet" && unit != "containerd" && unit != hostpath.ServiceRouteUnit {
		return 5, fmt.Errorf("unit %s not found", unit)
	}
	h.mu.Lock()
	was, enabled := h.active[unit], h.enable[unit]
	switch verb {
	case "enable":
		h.enable[unit] = true
	case "start", "restart":
		h.active[unit] = true
	case "stop":
		h.active[unit] = false
	}
	h.mu.Unlock()
	switch verb {
	case "is-enabled":
		return map[bool]int{true: 0, false: 1}[enabled], nil
	case "is-active":
		return map[bool]int{true: 0, false: 3}[was], nil
	case "enable", "stop":
		return 0, nil
	case "start", "restart":
		if unit == "kubelet" && (verb == "restart" || !was) {
			return 0, h.kubeletStarted()
		}
		return 0, nil
	}
	return 1, fmt.Errorf("systemctl %s: not simulated", verb)
}

// kubeletStarted is what a starting kubelet does that apply waits for. On a master it starts
// the static pods (etcd then has data) and registers the node with its own credentials
// (kubelet.conf); on a worker it asks for a client certificate with the bootstrap token it was
// given and registers the node once the certificate is issued. The node is Ready once the
// host has a CNI config.
func (h *simHost) kubeletStarted() error {
	flags, err := kubeletFlags(h)
	if err != nil {
		return err
	}
	name, ip := flags["hostname-override"], flags["node-ip"]
	if name == "" {
		name = h.Name() // the simulated hosts' hostnames are their node names
	}
	if ip == "" {
		return fmt.Errorf("kubelet: no --node-ip in %s", hostpath.KubeletFlagsEnvPath)
	}
	if h.node.Role == inventory.RoleMaster {
		if !h.has(hostpath.KubeletKubeconfig) {
			return fmt.Errorf("kubelet: no %s on a master", hostpath.KubeletKubeconfig)
		}
		if h.has(path.Join(hostpath.ManifestsDir, "etcd.yaml")) {
			h.SetFile(hostpath.EtcdDataDir+"/member/snap/db", []byte("etcd data"), 0o600)
		}
		return h.register(name, ip)
	}
	h.mu.Lock()
	joined := h.joined
	h.mu.Unlock()
	if joined {
		return nil // it has its client certificate
	}
	csr, key, err := h.requestCertificate(name)
	if err != nil {
		return err
	}
	h.sim.wg.Add(1)
	go func() {
		defer h.sim.wg.Done()
		for h.sim.ctx.Err() == nil {
			got, err := h.sim.api.CertificatesV1().CertificateSigningRequests().Get(h.sim.ctx, csr, metav1.GetOptions{})
			if err == nil && len(got.Status.Certificate) > 0 {
				b, _ := pem.Decode(got.Status.Certificate)
				cert, err := x509.ParseCertificate(b.Bytes)
				if err != nil || !key.PublicKey.Equal(cert.PublicKey) || cert.Subject.CommonName != "system:node:"+name {
					h.sim.errorf("%s: kubelet got a certificate that is not for its key and node: %v", h.Name(), err)
					return
				}
				// The kubelet writes its own kubeconfig with the certificate (kubelet.conf):
				// from then on it no longer needs the bootstrap token.
				h.SetFile(hostpath.KubeletKubeconfig, append([]byte("# kubelet's own credentials\n"), got.Status.Certificate...), 0o600)
				if err := h.register(name, ip); err != nil {
					h.sim.errorf("%v", err)
				}
				return
			}
			select {
			case <-h.sim.ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return nil
}

// requestCertificate posts the kubelet's client certificate request, authenticated with the
// token of bootstrap-kubelet.conf as the API server would: the token must be a bootstrap token
// Secret's.
func (h *simHost) requestCertificate(node string) (string, *ecdsa.PrivateKey, error) {
	f, ok := h.File(hostpath.BootstrapKubeletConfig)
	if !ok {
		return "", nil, fmt.Errorf("kubelet: no %s on a worker", hostpath.BootstrapKubeletConfig)
	}
	cfg, err := clientcmd.Load(f.Data)
	if err != nil {
		return "", nil, err
	}
	auth := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
	id, secret, _ := strings.Cut(auth.Token, ".")
	ctx := h.sim.ctx
	tok, err := h.sim.api.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+id, metav1.GetOptions{})
	if err != nil || string(tok.Data["token-secret"]) != secret || string(tok.Data["usage-bootstrap-authentication"]) != "true" {
		return "", nil, fmt.Errorf("kubelet on %s: the API server refuses its bootstrap token %s (%v)", h.Name(), id, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}}}, key)
	if err != nil {
		return "", nil, err
	}
	csr := &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "node-csr-" + node},
		Spec: certv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth},
			Username:   "system:bootstrap:" + id,
			Groups:     []string{"system:bootstrappers", "system:bootstrappers:kubeadm:default-node-token", "system:authenticated"},
		},
	}
	if _, err := h.sim.api.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{}); err != nil {
		return "", nil, err
	}
	return csr.Name, key, nil
}

// register creates the node, Ready if the host has a CNI config.
func (h *simHost) register(name, ip string) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
		Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}},
		Conditions: []corev1.NodeCondition{h.readyCondition()},
	}}
	_, err := h.sim.api.CoreV1().Nodes().Create(h.sim.ctx, n, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubelet on %s: register node: %w", h.Name(), err)
	}
	h.mu.Lock()
	h.joined = true
	h.mu.Unlock()
	return nil
}

func (h *simHost) readyCondition() corev1.NodeCondition {
	if h.has(hostpath.CNIConfFile) {
		return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}
	}
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady",
		Message: "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"}
}

// Upload is remotetest's; a running kubelet notices a new CNI config and reports its node
// Ready.
func (h *simHost) Upload(ctx context.Context, f remote.File) error {
	if err := h.Host.Upload(ctx, f); err != nil {
		return err
	}
	h.mu.Lock()
	joined := h.joined
	if f.Path == hostpath.BootstrapKubeletConfig {
		bf, _ := h.Host.File(f.Path)
		h.bootstrapConf = bf.Data
	}
	h.mu.Unlock()
	if f.Path != hostpath.CNIConfFile || !joined {
		return nil
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := h.sim.api.CoreV1().Nodes().Get(ctx, h.Name(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Conditions = []corev1.NodeCondition{h.readyCondition()}
		_, err = h.sim.api.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// kubeletFlags reads KUBELET_KUBEADM_ARGS from the host's kubeadm-flags.env.
func kubeletFlags(h *simHost) (map[string]string, error) {
	f, ok := h.File(hostpath.KubeletFlagsEnvPath)
	if !ok {
		return nil, fmt.Errorf("kubelet: no %s", hostpath.KubeletFlagsEnvPath)
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(string(f.Data)), "KUBELET_KUBEADM_ARGS=")
	if !ok {
		return nil, fmt.Errorf("kubelet: %s: %q", hostpath.KubeletFlagsEnvPath, f.Data)
	}
	flags := map[string]string{}
	for _, a := range strings.Fields(strings.Trim(v, `"`)) {
		k, val, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		flags[k] = val
	}
	return flags, nil
}

// TestApplyOpensFirewalls: a worker behind firewalld's public zone with only SSH let in. With
// firewall: check (the default) apply stops at preflight, naming the ports and subnets, before
// any host changes. With firewall: open its firewall step opens exactly the worker's ports and
// trusts the pod and Service subnets; the master, without a firewall, is left alone; the next
// apply opens nothing.
func TestApplyOpensFirewalls(t *testing.T) {
	c := cluster(t, "workers:\n  - {name: w1, address: 10.0.0.2}\n")
	sim := newSimCluster(t, c)
	sim.hosts["w1"].firewalld = &simFirewalld{ports: []string{"22/tcp"}}
	o := Options{
		State:   state.At(t.TempDir()),
		Timeout: 5 * time.Second,
		Settle:  time.Millisecond,
		Connect: func(_ context.Context, n inventory.Node) (remote.Host, error) { return sim.hosts[n.Name], nil },
		API:     func(string) (kube.Clients, error) { return sim.clients(), nil },
	}
	a := NewApply(c, o)
	_, err := Run(context.Background(), a.Steps(), func(progress.Event) {}, time.Now)
	a.Close()
	if err == nil || !strings.Contains(err.Error(), "preflight") {
		t.Fatalf("apply with a closed firewall and firewall: check: %v; want a preflight error", err)
	}
	var details []string
	var d interface{ Details() []string }
	if errors.As(err, &d) {
		details = d.Details()
	}
	if all := strings.Join(details, "\n"); !strings.Contains(all, "[ERROR Firewall] w1: firewalld (zone public) does not let in 10250/tcp (kubelet)") || !strings.Contains(all, "set firewall: open in the inventory") {
		t.Errorf("the preflight error does not name w1's blocked ports and the setting:\n%v\n%s", err, all)
	}
	if len(sim.hosts["w1"].Uploads()) > 0 {
		t.Errorf("w1 changed although preflight failed: %v", sim.hosts["w1"].Uploads())
	}

	c.Firewall = inventory.FirewallOpen
	events := runApply(t, NewApply(c, o))
	fw := sim.hosts["w1"].firewalld
	if want := []string{"22/tcp", "10250/tcp", "10256/tcp", "30000-32767/tcp", "30000-32767/udp", "8472/udp"}; !slices.Equal(fw.ports, want) {
		t.Errorf("w1's firewalld lets in %v; want %v", fw.ports, want)
	}
	if want := []string{"10.244.0.0/16", "10.96.0.0/12"}; !slices.Equal(fw.sources, want) {
		t.Errorf("w1's trusted zone: %v; want %v", fw.sources, want)
	}
	said := false
	for _, e := range events {
		if e.Task == "firewall" && e.Host == "w1" && strings.HasPrefix(e.Message, "firewalld: opened 10250/tcp, opened 10256/tcp") {
			said = true
		}
		if e.Task == "firewall" && e.Host == "m1" {
			t.Errorf("the firewall step said something of m1, which has no firewall: %+v", e)
		}
	}
	if !said {
		t.Errorf("the firewall step did not say what it opened on w1:\n%v", events)
	}
	runApply(t, NewApply(c, o))
	if len(fw.ports) != 6 || len(fw.sources) != 2 {
		t.Errorf("the second apply opened more: %v, %v", fw.ports, fw.sources)
	}
}
