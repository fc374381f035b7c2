package tasks

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/templates"
)

var (
	apiserverManifest = path.Join(hostpath.ManifestsDir, "kube-apiserver.yaml")
	etcdManifest      = path.Join(hostpath.ManifestsDir, "etcd.yaml")
	kcmManifest       = path.Join(hostpath.ManifestsDir, "kube-controller-manager.yaml")
)

// pushEtcdFirst pushes master n's files in scope (push). When both its etcd and its
// kube-apiserver manifests change (a new etcd or cluster CA, which neither reads again while
// it runs), the API server is stopped first, etcd restarts alone, and the new API server
// manifest lands only once the new etcd member answers its readiness check:
//   - with several masters, a stopped API server fails its /readyz and stops listening, so the
//     load balancer and the node-local proxies send every request to the others; a live API
//     server over a restarting etcd member would take requests and hang on them;
//   - with one master, the API is away once, for etcd's restart and the API server's start,
//     and the API server never starts before its etcd to crash into kubelet's back-off.
//
// kube-controller-manager stops with the API server and starts once the new one is ready: a
// controller-manager that ran through the outage would find every node's lease as old as the
// outage when the API answers again, mark the nodes Unknown and their pods not ready, and
// empty the Services for a few seconds (docs/upgrades.md); one that starts afresh counts each
// node's grace period from its own start. With several masters nothing is lost: a
// controller-manager whose own API server stops loses its leadership anyway.
//
// The master's kforge-vip, when it runs, stops first: it gives the virtual IP to another master
// at once instead of 3 s after its API server stopped answering, and starts again with the new
// manifest. A run interrupted in between leaves the master without its API server manifest
// (and kforge-vip): the next run (or apply) pushes it, as it pushes any file the host lacks,
// and starts kforge-vip.
//
// In between, the other files land under a restarted kubelet (pushUnderRestartedKubelet): a
// kubelet that stopped a static pod starts the same manifest again only once it has cleaned the
// old pod up (1m45s for kube-controller-manager on this lab), and one that just started never
// knew it. With newKubelet (an upgrade's kubelet, shipped already) every file lands so: a
// kubelet of a new minor hashes each static pod anew and replaces every one an older kubelet
// started, so restarted after the manifests it would restart the whole control plane a second
// time, etcd and API server at once.
func pushEtcdFirst(ctx context.Context, rc *runContext, files *hostFiles, n inventory.Node, h remote.Host, scope func(string) bool, newKubelet bool, r progress.Reporter) error {
	restarted := func(ctx context.Context, files *hostFiles, h remote.Host, scope func(string) bool) error {
		return pushUnderRestartedKubelet(ctx, rc, files, n, h, scope)
	}
	land := push
	if newKubelet {
		land = restarted
	}
	want := files.get(n.Name, func(p string) bool { return p == apiserverManifest || p == etcdManifest })
	have, err := hashes(ctx, h, []string{apiserverManifest, etcdManifest})
	if err != nil {
		return err
	}
	hasKCM := len(files.get(n.Name, func(p string) bool { return p == kcmManifest })) == 1
	if len(want) != 2 || len(toWrite(want, have)) != 2 || !hasKCM {
		if err := land(ctx, files, h, scope); err != nil {
			return err
		}
		return resumeVIP(ctx, rc, h) // stopped by an interrupted run
	}
	var etcdPod, apiPod corev1.Pod
	for _, f := range want {
		p := &etcdPod
		if f.Path == apiserverManifest {
			p = &apiPod
		}
		if err := yaml.Unmarshal(f.Data, p); err != nil {
			return fmt.Errorf("%s: %s: %w", n.Name, f.Path, err)
		}
	}
	d, err := rc.fleet.Dialer(n.Name)
	if err != nil {
		return err
	}
	metrics, apiAddr, err := etcdFirstAddrs(&etcdPod, &apiPod, n.NodeIP())
	if err != nil {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, rc.o.Timeout)
	defer cancel()
	before := etcdStartTime(ctx, d, metrics)

	start := rc.o.Now()
	if err := h.Run(ctx, remote.Cmd{Command: stopVIPScript + "; rm -f " + apiserverManifest + " " + kcmManifest}); err != nil {
		return err
	}
	if why := until(ctx, func() string { return listening(ctx, d, []string{apiAddr}) }); why != "" {
		return fmt.Errorf("%s: kube-apiserver did not stop within %s after kforge removed its manifest (%s); run the command again, which puts the manifest back", n.Name, rc.o.Timeout, why)
	}
	stopped := rc.o.Now()

	if err := restarted(ctx, files, h, func(p string) bool { return (scope == nil || scope(p)) && p != apiserverManifest && p != kcmManifest }); err != nil {
		return err
	}
	if why := until(ctx, func() string {
		if now := etcdStartTime(ctx, d, metrics); now == "" || now == before {
			return "it has not started again (" + metrics + ")"
		}
		return probeNow(ctx, d, n.NodeIP(), &etcdPod)
	}); why != "" {
		return fmt.Errorf("%s: etcd did not start again with its new manifest and answer its readiness check within %s (%s), and kube-apiserver is stopped there: look at etcd's log on the host (/var/log/pods/kube-system_etcd-*), then run the command again", n.Name, rc.o.Timeout, why)
	}
	etcdBack := rc.o.Now()

	if err := pushStarted(ctx, files, h, apiserverManifest); err != nil {
		return err
	}
	if why := until(ctx, func() string { return probeNow(ctx, d, n.NodeIP(), &apiPod) }); why != "" {
		return fmt.Errorf("%s: kube-apiserver did not answer its readiness check within %s of its new manifest (%s), and kube-controller-manager is stopped there: look at kube-apiserver's log on the host (/var/log/pods/kube-system_kube-apiserver-*), then run the command again", n.Name, rc.o.Timeout, why)
	}
	apiBack := rc.o.Now()
	if err := pushStarted(ctx, files, h, kcmManifest); err != nil {
		return err
	}
	if err := resumeVIP(ctx, rc, h); err != nil {
		return err
	}
	r(progress.Event{Kind: progress.Info, Host: n.Name, Message: fmt.Sprintf("kube-apiserver and kube-controller-manager stopped (after %s); etcd started again alone (ready after %s), then kube-apiserver (ready after %s), then kube-controller-manager",
		stopped.Sub(start).Round(100*time.Millisecond), etcdBack.Sub(stopped).Round(100*time.Millisecond), apiBack.Sub(etcdBack).Round(100*time.Millisecond))})
	return nil
}

// pushUnderRestartedKubelet pushes master (or etcd host) n's files in scope under a restarted
// kubelet: the static pods whose manifests change are stopped by the running kubelet first
// (their manifests removed, until nothing listens on their probes' ports), then kubelet is
// stopped, the files land, and kubelet starts on them (a new binary and configuration among
// them, in an upgrade), which starts each of those pods afresh, once. A new kubelet does not
// stop the pods an old one started until it has heard from the API server (its sources ready),
// and with the only API server stopped it never would: the new etcd would crash on the old
// one's ports. With no static pod to replace, the files land and kubelet restarts only when
// its own inputs changed (startKubelet). A run interrupted in between leaves manifests missing or
// kubelet stopped: the next one pushes them and starts it here.
func pushUnderRestartedKubelet(ctx context.Context, rc *runContext, files *hostFiles, n inventory.Node, h remote.Host, scope func(string) bool) error {
	want, have, err := wantAndHave(ctx, files, h, scope)
	if err != nil {
		return err
	}
	write := toWrite(want, have)
	replaced := slices.DeleteFunc(slices.Clone(write), func(f templates.File) bool {
		return have[f.Path] == "" || path.Dir(f.Path) != hostpath.ManifestsDir || strings.HasPrefix(path.Base(f.Path), ".")
	})
	if len(replaced) > 0 {
		d, err := rc.fleet.Dialer(n.Name)
		if err != nil {
			return err
		}
		var manifests, addrs []string
		for _, f := range replaced {
			var pod corev1.Pod
			if err := yaml.Unmarshal(f.Data, &pod); err != nil {
				return fmt.Errorf("%s: %s: %w", n.Name, f.Path, err)
			}
			manifests = append(manifests, f.Path)
			for _, c := range pod.Spec.Containers {
				if u, err := url.Parse(probeURL(c, n.NodeIP())); err == nil && u.Host != "" {
					addrs = append(addrs, u.Host)
				}
			}
		}
		why, err := stopStaticPods(ctx, rc, h, d, manifests, addrs)
		if err != nil {
			return err
		}
		if why != "" {
			return fmt.Errorf("%s: the static pods to replace did not stop within %s after kforge removed their manifests (%s); run the command again, which puts the manifests back", n.Name, rc.o.Timeout, why)
		}
		if err := h.Run(ctx, remote.Cmd{Command: "systemctl stop kubelet"}); err != nil {
			return err
		}
	}
	// have is from before the removals: the manifests removed are noted as replaced, and the
	// waits after wait for their pods.
	if err := upload(ctx, files, h, write, have); err != nil {
		return err
	}
	_, err = startKubelet(ctx, files, h)
	return err
}

// stopStaticPods removes the static-pod manifests at paths on h, so that its kubelet stops
// their pods, and waits until nothing listens on addrs (through d). It returns "" once they
// stopped, or what it last saw when the run's timeout ended.
func stopStaticPods(ctx context.Context, rc *runContext, h remote.Host, d remote.Dialer, paths, addrs []string) (string, error) {
	rm := make([]string, len(paths))
	for i, p := range paths {
		rm[i] = remote.Quote(p)
	}
	if err := h.Run(ctx, remote.Cmd{Command: "rm -f " + strings.Join(rm, " ")}); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, rc.o.Timeout)
	defer cancel()
	return until(ctx, func() string { return listening(ctx, d, addrs) }), nil
}

// listening says which of addrs still accepts a connection ("" when none does).
func listening(ctx context.Context, d remote.Dialer, addrs []string) string {
	for _, a := range addrs {
		if c, err := d.DialContext(ctx, "tcp", a); err == nil {
			c.Close()
			return "something still listens on " + a
		}
	}
	return ""
}

// pushStarted pushes the static-pod manifest p that pushEtcdFirst removed, noted as replaced:
// waitMasters then waits for the pod kubelet starts from it.
func pushStarted(ctx context.Context, files *hostFiles, h remote.Host, p string) error {
	if err := push(ctx, files, h, func(q string) bool { return q == p }); err != nil {
		return err
	}
	for _, f := range files.get(h.Name(), func(q string) bool { return q == p }) {
		files.noteWritten(h.Name(), f, true)
	}
	return nil
}

// stopVIPScript stops kforge-vip where it runs, which hands the virtual IP to another master
// (docs/hosts.md); startVIPScript starts it where apply's vip step enabled it (a unit file
// written by this run waits for that step, which first grants its Lease).
var (
	stopVIPScript  = "systemctl is-active -q " + hostpath.VIPUnit + " && systemctl stop " + hostpath.VIPUnit + "; true"
	startVIPScript = "if systemctl is-enabled -q " + hostpath.VIPUnit + " 2>/dev/null; then systemctl start " + hostpath.VIPUnit + "; fi"
)

// resumeVIP starts kforge-vip where apply's vip step enabled it (startVIPScript); a cluster
// without a controlPlaneVIP costs no round trip.
func resumeVIP(ctx context.Context, rc *runContext, h remote.Host) error {
	if rc.inv.ControlPlaneVIP == "" {
		return nil
	}
	return h.Run(ctx, remote.Cmd{Command: startVIPScript})
}

// etcdFirstAddrs are, from the manifests to push, etcd's metrics URL (beside its readiness
// check, on its plain-HTTP metrics listener) and the address kube-apiserver listens on.
func etcdFirstAddrs(etcdPod, apiPod *corev1.Pod, nodeIP string) (metrics, apiAddr string, err error) {
	if len(etcdPod.Spec.Containers) == 0 || len(apiPod.Spec.Containers) == 0 {
		return "", "", fmt.Errorf("a static-pod manifest without a container")
	}
	ready := probeURL(etcdPod.Spec.Containers[0], nodeIP)
	api := probeURL(apiPod.Spec.Containers[0], nodeIP)
	eu, err1 := url.Parse(ready)
	au, err2 := url.Parse(api)
	if ready == "" || api == "" || err1 != nil || err2 != nil {
		return "", "", fmt.Errorf("etcd's or kube-apiserver's manifest has no HTTP readiness check (%q, %q)", ready, api)
	}
	eu.Path = "/metrics"
	return eu.String(), au.Host, nil
}

// etcdStartTime is etcd's process_start_time_seconds from its metrics, "" when it does not
// answer.
func etcdStartTime(ctx context.Context, d remote.Dialer, metrics string) string {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metrics, nil)
	if err != nil {
		return ""
	}
	res, err := client.Do(req)
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	return startTime(res.Body)
}

// startTime finds process_start_time_seconds in a Prometheus text exposition.
func startTime(r io.Reader) string {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "process_start_time_seconds "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// until asks check every 250 ms until it says nothing (""), or returns its last answer when
// ctx ends.
func until(ctx context.Context, check func() string) string {
	for {
		why := check()
		if why == "" {
			return ""
		}
		select {
		case <-ctx.Done():
			return why
		case <-time.After(250 * time.Millisecond):
		}
	}
}
