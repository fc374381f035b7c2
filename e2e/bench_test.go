package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/release"
)

// BenchmarkApplyVsKubeadm is the benchmark of issue 7: on the same machine, one run each, a
// fresh lab of 3 hosts (1 master, 2 workers) with nothing staged, timed from "hosts up" to "all
// 3 nodes Ready":
//
//	script: the scripted kubeadm flow (testdata/baseline) on hosts that already have containerd:
//	        stage binaries, images and configs over OpenSSH ssh/scp, kubeadm init, parallel
//	        kubeadm join, bridge CNI + routes
//	kforge: `kforge apply` with the bundle on bare hosts (no containerd, no runc): the runtime
//	        install from the bundle is part of its time
//
// It reports both times, their ratio (target: kforge/script ≤ 0.6) and each side's steps.
func BenchmarkApplyVsKubeadm(b *testing.B) {
	testenv.Require(b, lab.Prerequisites())
	for _, tool := range []string{"ssh", "scp", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Fatalf("%s not on PATH (apt-get install openssh-client tar): %v", tool, err)
		}
	}
	ctx, dir, kforge, bundleDir := labBench(b, 25*time.Minute)
	id := os.Getpid() % 100000

	b.ResetTimer()
	script := runBaseline(ctx, b, bundleDir, filepath.Join(dir, "script-side"), fmt.Sprintf("bks%d", id))
	kf := runKforge(ctx, b, kforge, bundleDir, filepath.Join(dir, "kforge-side"), fmt.Sprintf("bkf%d", id), kforgeSide{hosts: 3})
	b.StopTimer()

	ratio := kf.total.Seconds() / script.total.Seconds()
	b.Logf("hosts up -> all 3 nodes Ready: script %s, kforge %s (apply returned after %s), kforge/script %.2f (target <= 0.60); load average at start: script %s, kforge %s",
		secs(script.total), secs(kf.total), secs(kf.apply), ratio, script.load, kf.load)
	// go test keeps 10 lines of a benchmark's log: one line per side's steps and per kforge task.
	b.Logf("script steps: %s", stepLine(script.steps))
	var staging []string
	for _, h := range script.hosts {
		staging = append(staging, h.name+": "+stepLine(h.steps))
	}
	b.Logf("script staging per host: %s", strings.Join(staging, " | "))
	b.Logf("kforge phases: %s", stepLine(kf.steps))
	for _, task := range kf.hostTasks {
		b.Logf("kforge %s per host: %s", task, strings.Join(kf.hostLines[task], " | "))
	}
	b.ReportMetric(script.total.Seconds(), "script-s")
	b.ReportMetric(kf.total.Seconds(), "kforge-s")
	b.ReportMetric(ratio, "kforge/script")
	for _, s := range script.steps {
		b.ReportMetric(s.d.Seconds(), "script-"+s.name+"-s")
	}
	for _, s := range kf.steps {
		b.ReportMetric(s.d.Seconds(), "kforge-"+s.name+"-s")
	}
}

// step is one timed step of a side.
type step struct {
	name string
	d    time.Duration
}

// loadAvg is the machine's 1, 5 and 15 minute load averages: the machine is shared, and a
// side that ran under more load ran slower.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

func stepLine(ss []step) string {
	var parts []string
	for _, s := range ss {
		parts = append(parts, s.name+" "+secs(s.d))
	}
	return strings.Join(parts, ", ")
}

// benchLab brings up a fresh lab of hosts hosts, torn down at the benchmark's end or by the
// returned function, whichever comes first.
func benchLab(ctx context.Context, b *testing.B, name string, bare bool, hosts int) (*lab.Lab, func()) {
	b.Helper()
	if old, err := lab.Open(name); err == nil { // a leftover of a killed run: never reuse it
		if err := old.Down(ctx); err != nil {
			b.Fatalf("lab %s left over, down: %v", name, err)
		}
	}
	l, err := lab.Up(ctx, lab.Options{Name: name, Hosts: hosts, Bare: bare})
	if err != nil {
		b.Fatalf("lab up %s: %v", name, err)
	}
	var once sync.Once
	down := func() {
		once.Do(func() {
			keepJournals(b, l)
			if err := l.Down(context.Background()); err != nil {
				b.Errorf("lab down %s: %v", name, err)
			}
		})
	}
	b.Cleanup(down)
	return l, down
}

// openSSH runs OpenSSH's ssh and scp against lab hosts the way a user's script would: the lab's
// key, strict host-key checking against the lab's known_hosts, a new connection per command.
type openSSH struct{ opts []string }

func newOpenSSH(l *lab.Lab) openSSH {
	return openSSH{opts: []string{"-q", "-i", l.IdentityFile, "-o", "StrictHostKeyChecking=yes",
		"-o", "UserKnownHostsFile=" + l.KnownHostsFile, "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"}}
}

// run runs a shell script on addr and returns its combined output.
func (s openSSH) run(ctx context.Context, addr, script string) (string, error) {
	out, err := exec.CommandContext(ctx, "ssh", append(slices.Clone(s.opts), "root@"+addr, script)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ssh root@%s %q: %w\n%s", addr, firstLine(script), err, tailLines(string(out), 15))
	}
	return string(out), nil
}

// copy runs scp: the last argument is the target.
func (s openSSH) copy(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "scp", append(slices.Clone(s.opts), args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("scp %s: %w\n%s", strings.Join(args, " "), err, tailLines(string(out), 15))
	}
	return nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

func tailLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

//go:embed testdata/baseline
var baselineFiles embed.FS

// render writes testdata/baseline/name rendered with data to dir/out.
func render(dir, name, out string, data any) (string, error) {
	t, err := template.New(name).Option("missingkey=error").ParseFS(baselineFiles, "testdata/baseline/"+name)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		return "", err
	}
	p := filepath.Join(dir, out)
	return p, os.WriteFile(p, buf.Bytes(), 0o600)
}

// side is one side's result.
type side struct {
	total     time.Duration // hosts up -> all nodes Ready
	apply     time.Duration // kforge only: until apply returned
	steps     []step
	hosts     []hostSteps         // script only: staging per host
	load      string              // the machine's load average when the side started
	hostTasks []string            // kforge only: tasks with per-host events, in order
	hostLines map[string][]string // kforge only: per-host events by task
	cpu       time.Duration       // kforge only: CPU time the hosts' own processes used meanwhile
	sent      int64               // kforge only: bytes apply's SSH connections sent
	received  int64               // kforge only: and received
	memMaster int64               // kforge only: the first master's working set once applied
	memWorker int64               // kforge only: the workers' mean working set once applied
	memLeft   int64               // kforge only: this machine's MemAvailable once applied
}

// memAvailable is this machine's MemAvailable (/proc/meminfo).
func memAvailable(b *testing.B) int64 {
	b.Helper()
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no MemAvailable in /proc/meminfo")
	return 0
}

// labBench prepares a lab benchmark: a context that ends after timeout or with the benchmark, a
// temporary directory, kforge built from this tree and the bundle of kforge's default release.
func labBench(b *testing.B, timeout time.Duration) (ctx context.Context, dir, kforge, bundleDir string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	b.Cleanup(cancel)
	dir = b.TempDir()
	kforge = buildKforge(b, dir)
	return ctx, dir, kforge, buildBundle(ctx, b, dir, release.Default())
}

// labMemory is the working set of l's first host (the master) and the mean of the others'.
func labMemory(b *testing.B, l *lab.Lab) (master, worker int64) {
	b.Helper()
	for i, h := range l.Hosts {
		m, err := l.Memory(h.Name)
		if err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			master = m
		} else {
			worker += m / int64(len(l.Hosts)-1)
		}
	}
	return master, worker
}

// labCPU is the CPU time every host of l has used so far.
func labCPU(b *testing.B, l *lab.Lab) time.Duration {
	b.Helper()
	var sum time.Duration
	for _, h := range l.Hosts {
		d, err := l.CPUTime(h.Name)
		if err != nil {
			b.Fatal(err)
		}
		sum += d
	}
	return sum
}

// sshTraffic reads what apply's debug log says its SSH connections sent and received.
func sshTraffic(b *testing.B, log []byte) (sent, received int64) {
	b.Helper()
	for _, l := range bytes.Split(log, []byte("\n")) {
		var e struct {
			Msg      string `json:"msg"`
			Sent     int64  `json:"sent"`
			Received int64  `json:"received"`
		}
		if json.Unmarshal(l, &e) == nil && e.Msg == "ssh traffic" {
			return e.Sent, e.Received
		}
	}
	b.Fatalf("apply's debug log has no \"ssh traffic\" line")
	return 0, 0
}

type hostSteps struct {
	name  string
	steps []step
}

// timer records consecutive steps.
type timer struct {
	mu    sync.Mutex
	last  time.Time
	steps []step
}

func (t *timer) lap(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	t.steps = append(t.steps, step{name, now.Sub(t.last)})
	t.last = now
}

// workerImages are the bundle's images a worker needs; the master gets them all.
var workerImages = []string{"pause", "kube-proxy", "coredns"}

// runBaseline is the scripted kubeadm flow on a fresh lab.
func runBaseline(ctx context.Context, b *testing.B, bundleDir, dir, name string) side {
	b.Helper()
	l, down := benchLab(ctx, b, name, false, 3)
	defer down()
	res, _ := kubeadmCluster(ctx, b, l, bundleDir, dir, release.Default())
	return res
}

// kubeadmCluster is the scripted kubeadm flow on lab l, at version (which bundleDir holds):
// all of l's hosts staged, the first one's kubeadm init, the others' kubeadm join, a bridge CNI,
// until all nodes are Ready. It returns the timings and a copy of the admin kubeconfig.
func kubeadmCluster(ctx context.Context, b *testing.B, l *lab.Lab, bundleDir, dir, version string) (side, string) {
	b.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	// Once, like the reference's cni-plugins.tar: the bundle's CNI plugins in one archive.
	cniTar := filepath.Join(dir, "cni-plugins.tar")
	if out, err := exec.Command("tar", "-C", filepath.Join(bundleDir, "cni"), "-cf", cniTar, ".").CombinedOutput(); err != nil {
		b.Fatalf("tar cni plugins: %v\n%s", err, out)
	}
	s := newOpenSSH(l)
	master := l.Hosts[0]
	fail := func(step string, err error) {
		b.Helper()
		b.Fatalf("script, %s: %v", step, err)
	}

	load := loadAvg()
	t := &timer{last: time.Now()}
	start := t.last

	// 1. Stage every host in parallel.
	var hosts strings.Builder
	for _, h := range l.Hosts {
		fmt.Fprintf(&hosts, "%s %s\n", h.Address, h.Name)
	}
	hostsAdd := filepath.Join(dir, "hosts.add")
	if err := os.WriteFile(hostsAdd, []byte(hosts.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	static := []string{cniTar, hostsAdd}
	for _, f := range []string{"config.toml", "kubelet.service", "10-kubeadm.conf", "k8s-sysctl.conf"} {
		p, err := render(dir, f, f, nil)
		if err != nil {
			b.Fatal(err)
		}
		static = append(static, p)
	}
	staged := make([]hostSteps, len(l.Hosts))
	errs := make([]error, len(l.Hosts))
	var wg sync.WaitGroup
	for i, h := range l.Hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			staged[i], errs[i] = stageHost(ctx, s, h, i == 0, bundleDir, static)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		fail("stage", err)
	}
	t.lap("stage")

	// 2. kubeadm init on the master.
	tokenID, tokenSecret := make([]byte, 3), make([]byte, 8)
	rand.Read(tokenID)
	rand.Read(tokenSecret)
	token := hex.EncodeToString(tokenID) + "." + hex.EncodeToString(tokenSecret)
	initYAML, err := render(dir, "init.yaml.tmpl", "init.yaml", map[string]string{
		"Token": token, "Address": master.Address, "Name": master.Name, "Version": version})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.copy(ctx, initYAML, "root@"+master.Address+":/root/init.yaml"); err != nil {
		fail("kubeadm init", err)
	}
	out, err := s.run(ctx, master.Address, "kubeadm init --config /root/init.yaml --ignore-preflight-errors=SystemVerification")
	if err != nil {
		fail("kubeadm init", errors.New(strings.ReplaceAll(err.Error(), token, "<token>")))
	}
	hash := regexp.MustCompile(`sha256:[0-9a-f]{64}`).FindString(out)
	if hash == "" {
		b.Fatalf("script, kubeadm init: no CA certificate hash in its output:\n%s", strings.ReplaceAll(tailLines(out, 20), token, "<token>"))
	}
	t.lap("kubeadm-init")

	// 3. Both workers join in parallel.
	errs = make([]error, len(l.Hosts))
	for i, h := range l.Hosts[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			join, err := render(dir, "join.yaml.tmpl", "join-"+h.Name+".yaml", map[string]string{
				"Master": master.Address, "Token": token, "CACertHash": hash, "Name": h.Name, "Address": h.Address})
			if err == nil {
				err = s.copy(ctx, join, "root@"+h.Address+":/root/join.yaml")
			}
			if err == nil {
				_, err = s.run(ctx, h.Address, "kubeadm join --config /root/join.yaml --ignore-preflight-errors=SystemVerification")
			}
			if err != nil {
				errs[i] = fmt.Errorf("%s: %s", h.Name, strings.ReplaceAll(err.Error(), token, "<token>"))
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		fail("kubeadm join", err)
	}
	t.lap("kubeadm-join")

	// 4. A bridge CNI config per node over its podCIDR, routes to the others' podCIDRs.
	admin := filepath.Join(dir, "admin.conf")
	if err := s.copy(ctx, "root@"+master.Address+":/etc/kubernetes/admin.conf", admin); err != nil {
		fail("CNI", err)
	}
	k := clientFor(b, admin)
	cidrs := map[string]string{}
	for len(cidrs) < len(l.Hosts) {
		nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, n := range nodes.Items {
				if n.Spec.PodCIDR != "" {
					cidrs[n.Name] = n.Spec.PodCIDR
				}
			}
		}
		if len(cidrs) < len(l.Hosts) {
			sleep(ctx, b, 200*time.Millisecond, "podCIDRs of all nodes")
		}
	}
	errs = make([]error, len(l.Hosts))
	for i, h := range l.Hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conf, err := render(dir, "bridge.conflist.tmpl", "cni-"+h.Name+".conflist", map[string]string{"Subnet": cidrs[h.Name]})
			if err == nil {
				err = s.copy(ctx, conf, "root@"+h.Address+":/etc/cni/net.d/10-bridge.conflist")
			}
			if err == nil {
				var routes []string
				for _, o := range l.Hosts {
					if o.Name != h.Name {
						routes = append(routes, "ip route replace "+cidrs[o.Name]+" via "+o.Address)
					}
				}
				_, err = s.run(ctx, h.Address, strings.Join(routes, " && "))
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		fail("CNI", err)
	}
	t.lap("cni-routes")

	// 5. Until all nodes are Ready.
	waitNodesReady(ctx, b, k, len(l.Hosts), 200*time.Millisecond)
	t.lap("wait-ready")
	return side{total: time.Since(start), steps: t.steps, hosts: staged, load: load}, admin
}

// stageHost is the reference's stage-host.sh: directories, binaries, CNI plugins and configs,
// images, then one script that installs them, restarts containerd and imports the images.
func stageHost(ctx context.Context, s openSSH, h lab.Host, master bool, bundleDir string, static []string) (hostSteps, error) {
	hs := hostSteps{name: h.Name}
	t := &timer{last: time.Now()}
	target := "root@" + h.Address
	if _, err := s.run(ctx, h.Address, "mkdir -p /opt/cni/bin /etc/cni/net.d /etc/containerd /etc/systemd/system/kubelet.service.d /root/images"); err != nil {
		return hs, err
	}
	t.lap("mkdir")
	var bins []string
	for _, f := range []string{"kubelet", "kubeadm", "kubectl"} {
		bins = append(bins, filepath.Join(bundleDir, "bin", f))
	}
	if err := s.copy(ctx, append(bins, target+":/usr/local/bin/")...); err != nil {
		return hs, err
	}
	t.lap("scp-binaries")
	if err := s.copy(ctx, append(slices.Clone(static), target+":/root/")...); err != nil {
		return hs, err
	}
	t.lap("scp-configs")
	var images []string
	ents, err := os.ReadDir(filepath.Join(bundleDir, "images"))
	if err != nil {
		return hs, err
	}
	for _, e := range ents {
		if master || slices.Contains(workerImages, strings.TrimSuffix(e.Name(), ".tar")) {
			images = append(images, filepath.Join(bundleDir, "images", e.Name()))
		}
	}
	if err := s.copy(ctx, append(images, target+":/root/images/")...); err != nil {
		return hs, err
	}
	t.lap(fmt.Sprintf("scp-%d-images", len(images)))
	// One script, as in the reference; it prints when containerd is back, to split its time.
	out, err := s.run(ctx, h.Address, `set -e; tar -C /opt/cni/bin -xf /root/cni-plugins.tar
cp /root/config.toml /etc/containerd/config.toml
cp /root/kubelet.service /etc/systemd/system/kubelet.service
cp /root/10-kubeadm.conf /etc/systemd/system/kubelet.service.d/10-kubeadm.conf
cp /root/k8s-sysctl.conf /etc/sysctl.d/99-k8s.conf; sysctl -q -p /etc/sysctl.d/99-k8s.conf
grep -q " `+h.Name+`$" /etc/hosts || cat /root/hosts.add >> /etc/hosts
systemctl daemon-reload; systemctl restart containerd
echo "installed-at $(date +%s%N)"
for t in /root/images/*.tar; do ctr -n k8s.io images import $t >/dev/null; done
systemctl enable kubelet 2>&1 | tail -1`)
	if err != nil {
		return hs, err
	}
	// The lab's hosts share this machine's clock.
	if m := regexp.MustCompile(`installed-at (\d+)`).FindStringSubmatch(out); m != nil {
		var ns int64
		fmt.Sscan(m[1], &ns)
		installed := time.Unix(0, ns)
		t.steps = append(t.steps, step{"install+restart-containerd", installed.Sub(t.last)})
		t.last = installed
	}
	t.lap("import")
	hs.steps = t.steps
	return hs, nil
}

func clientFor(b *testing.B, kubeconfig string) kubernetes.Interface {
	b.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	cfg.Timeout = 5 * time.Second
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return k
}

func sleep(ctx context.Context, b *testing.B, d time.Duration, what string) {
	select {
	case <-ctx.Done():
		b.Fatalf("waiting for %s: %v", what, ctx.Err())
	case <-time.After(d):
	}
}

// allReady says whether want nodes exist and all are Ready.
func allReady(ctx context.Context, k kubernetes.Interface, want int) bool {
	nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != want {
		return false
	}
	for i := range nodes.Items {
		if !nodeReady(&nodes.Items[i]) {
			return false
		}
	}
	return true
}

func waitNodesReady(ctx context.Context, b *testing.B, k kubernetes.Interface, want int, every time.Duration) {
	b.Helper()
	for !allReady(ctx, k, want) {
		sleep(ctx, b, every, "all nodes Ready")
	}
}

// runKforge is `kforge apply` with the bundle on a fresh lab of hosts bare hosts (the first a
// master), with a watcher that notes when all nodes are Ready (apply's own wait-ready step also
// waits for kube-system pods). With shape (tc's rate, such as 100mbit) the machine's link to
// the lab is shaped to it during the apply. It also measures the CPU time the hosts' own
// processes used and the bytes apply's SSH connections sent and received.
// kforgeSide says what runKforge brings up: hosts lab hosts (1 master, the rest workers), the
// lab's link shaped to shape ("": not), networking.networkPolicy ("": the default), and then,
// when set, what runs on the cluster before its lab goes.
type kforgeSide struct {
	hosts         int
	shape         string
	networkPolicy string
	then          func(c *cluster)
}

func runKforge(ctx context.Context, b *testing.B, kforge, bundleDir, dir, name string, o kforgeSide) side {
	b.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	l, down := benchLab(ctx, b, name, true, o.hosts)
	defer down()
	c := &cluster{t: b, lab: l, kforge: kforge, bundle: bundleDir, version: release.Default(), state: filepath.Join(dir, "state"), inventory: filepath.Join(dir, "kforge.yaml"), networkPolicy: o.networkPolicy}
	c.writeInventory(l.Hosts[:1], l.Hosts[1:])
	if shape := o.shape; shape != "" {
		undo, err := l.ShapeUplink(ctx, shape)
		if err != nil {
			b.Fatal(err)
		}
		defer func() {
			if err := undo(); err != nil {
				b.Errorf("unshape the lab's link: %v", err)
			}
		}()
	}
	cpu0 := labCPU(b, l)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	readyAt := make(chan time.Time, 1)

	load := loadAvg()
	start := time.Now()
	go func() { readyAt <- watchReady(watchCtx, l, len(l.Hosts)) }()
	out, err := c.run("apply", "--timeout", "20m", "--output", "json")
	applied := time.Now()
	if err != nil {
		b.Fatalf("kforge apply: %v\n%s\n(log: %s)", err, tailLines(out, 40), filepath.Join(c.state, "e2e.log"))
	}
	stopWatch()
	keep(b, "kforge-apply.json", []byte(out))
	log, err := os.ReadFile(filepath.Join(c.state, "e2e.log"))
	if err != nil {
		b.Fatal(err)
	}
	keep(b, "kforge-apply.log", log)
	end := applied
	if t := <-readyAt; !t.IsZero() && t.Before(end) {
		end = t
	}
	cpu := labCPU(b, l) - cpu0
	sent, received := sshTraffic(b, log)
	res := side{total: end.Sub(start), apply: applied.Sub(start), load: load, cpu: cpu, sent: sent, received: received}
	res.memMaster, res.memWorker = labMemory(b, l)
	res.memLeft = memAvailable(b)
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	var summary bool
	for sc.Scan() {
		var e struct {
			Event    string        `json:"event"`
			Task     string        `json:"task"`
			Host     string        `json:"host"`
			Message  string        `json:"message"`
			Time     time.Time     `json:"time"`
			Duration time.Duration `json:"duration"`
			Timings  []struct {
				Task     string        `json:"task"`
				Duration time.Duration `json:"duration"`
			} `json:"timings"`
		}
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		switch e.Event {
		case "summary":
			summary = true
			for _, t := range e.Timings {
				res.steps = append(res.steps, step{t.Task, t.Duration})
			}
		case "host-done":
			line := fmt.Sprintf("%s done at %s", e.Host, secs(e.Time.Sub(start)))
			if e.Duration > 0 {
				line += " took " + secs(e.Duration)
			}
			if res.hostLines == nil {
				res.hostLines = map[string][]string{}
			}
			if res.hostLines[e.Task] == nil {
				res.hostTasks = append(res.hostTasks, e.Task)
			}
			res.hostLines[e.Task] = append(res.hostLines[e.Task], line+" ("+e.Message+")")
		}
	}
	if !summary {
		b.Fatalf("kforge apply --output json printed no summary event:\n%s", tailLines(out, 40))
	}
	if o.then != nil {
		o.then(c)
	}
	return res
}

// keep copies a side's output into $KFORGE_BENCH_KEEP, when set, to study after the run.
func keep(b *testing.B, name string, data []byte) {
	if d := os.Getenv("KFORGE_BENCH_KEEP"); d != "" {
		if err := os.WriteFile(filepath.Join(d, name), data, 0o600); err != nil {
			b.Errorf("keep %s: %v", name, err)
		}
	}
}

// keepJournals saves each host's kubelet and containerd journal into $KFORGE_BENCH_KEEP, when
// set, before its lab goes down.
func keepJournals(b *testing.B, l *lab.Lab) {
	if os.Getenv("KFORGE_BENCH_KEEP") == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, h := range l.Hosts {
		out, err := l.Exec(ctx, h.Name, "sh", "-c", "journalctl -u kubelet -u containerd -o short-precise --no-pager; "+
			"for f in /var/log/pods/kube-system_kube-*/*/*.log /var/log/pods/kube-system_etcd-*/*/*.log; do [ -f $f ] && { echo \"== $f\"; cat $f; }; done; true")
		if err != nil {
			b.Logf("journal of %s: %v", h.Name, err)
		}
		keep(b, h.Name+".journal", out)
	}
}

// watchReady returns when all want nodes of the lab's cluster are Ready, or the zero time when
// ctx ends first. It reads the master's /etc/kubernetes/admin.conf once apply has written it
// and polls the API server from the workstation every 200 ms.
func watchReady(ctx context.Context, l *lab.Lab, want int) time.Time {
	master := l.Hosts[0].Name
	var k kubernetes.Interface
	for ctx.Err() == nil {
		if k == nil {
			if conf, err := l.Exec(ctx, master, "cat", "/etc/kubernetes/admin.conf"); err == nil {
				if cfg, err := clientcmd.RESTConfigFromKubeConfig(conf); err == nil {
					cfg.Timeout = 5 * time.Second
					k, _ = kubernetes.NewForConfig(cfg)
				}
			}
		} else if allReady(ctx, k, want) {
			return time.Now()
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return time.Time{}
}
