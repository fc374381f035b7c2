package lab

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/release"
)

// machineSysctls are the machine-wide settings kubelet wants to write (and a few more the lab
// must not touch): a lab host must never change them.
var machineSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward",
	"fs/inotify/max_user_watches", "kernel/pid_max",
}

func readSysctls(t *testing.T) map[string]string {
	out := map[string]string{}
	for _, k := range machineSysctls {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			t.Fatal(err)
		}
		out[k] = strings.TrimSpace(string(b))
	}
	return out
}

// TestKubeletStaticPodInLabHost runs the bundle's kubelet as a systemd unit inside a lab host,
// with containerd configured as kforge configures it, and checks that it starts a static pod
// (seen through containerd) without changing any machine-wide sysctl.
func TestKubeletStaticPodInLabHost(t *testing.T) {
	testenv.Require(t, Prerequisites())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	bins, err := bundle.KubernetesBinaries(ctx, bundle.BuildOptions{Version: release.Default()})
	if err != nil {
		t.Fatalf("kubelet from the bundle: %v", err)
	}
	t.Logf("Kubernetes binaries (bundle, built or cached) in %s", time.Since(start).Round(time.Millisecond))
	l := upLab(t, Options{Name: "labkubelet", Hosts: 1})
	before := readSysctls(t)
	h := l.Hosts[0].Name

	write := func(path string, data []byte, mode string) {
		t.Helper()
		cmd, err := l.Command(ctx, h, "sh", "-c", `mkdir -p "$(dirname "$1")" && cat > "$1.tmp" && chmod "$2" "$1.tmp" && mv "$1.tmp" "$1"`, "sh", path, mode)
		must(t, err)
		cmd.Stdin = strings.NewReader(string(data))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("writing %s on %s: %v: %s", path, h, err, out)
		}
	}
	exec := func(argv ...string) string {
		t.Helper()
		out, err := l.Exec(ctx, h, argv...)
		if err != nil {
			t.Fatalf("%v", err)
		}
		return string(out)
	}

	kubelet, err := os.ReadFile(filepath.Join(bins, "kubelet"))
	must(t, err)
	write("/usr/local/bin/kubelet", kubelet, "755")
	write("/etc/containerd/config.toml", []byte(`version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "kforge.dev/lab-pause:test"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true
`), "644")
	exec("systemctl", "restart", "containerd")
	waitFor(t, 30*time.Second, "containerd answering", func() bool {
		_, err := l.Exec(ctx, h, "ctr", "version")
		return err == nil
	})
	// The sandbox ("pause") and the pod's container: static programs that wait for a signal,
	// built here and imported offline. They print different words so that their images differ
	// (containerd names a container's image by the first name of its digest).
	for _, name := range []string{"kforge.dev/lab-pause:test", "kforge.dev/lab-sleeper:test"} {
		cmd, err := l.Command(ctx, h, "ctr", "-n", "k8s.io", "images", "import", "-")
		must(t, err)
		cmd.Stdin = strings.NewReader(string(goImage(t, name, strings.Replace(waitForSignalSrc, `"up"`, strconv.Quote(name), 1))))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("importing %s: %v: %s", name, err, out)
		}
	}
	write("/var/lib/kubelet/config.yaml", []byte(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: systemd
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
staticPodPath: /etc/kubernetes/manifests
address: 127.0.0.1
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
`), "644")
	write("/etc/kubernetes/manifests/sleeper.yaml", []byte(`apiVersion: v1
kind: Pod
metadata: {name: sleeper, namespace: default}
spec:
  hostNetwork: true
  containers:
  - name: sleeper
    image: kforge.dev/lab-sleeper:test
    imagePullPolicy: Never
`), "644")
	write("/etc/systemd/system/kubelet.service", []byte(`[Unit]
Description=kubelet (kforge lab test)
After=containerd.service
Requires=containerd.service
[Service]
ExecStart=/usr/local/bin/kubelet --config=/var/lib/kubelet/config.yaml
Restart=always
RestartSec=1
[Install]
WantedBy=multi-user.target
`), "644")
	exec("systemctl", "daemon-reload")
	kubeletStart := time.Now()
	exec("systemctl", "start", "kubelet")

	var id string
	waitFor(t, 2*time.Minute, "the static pod's container running in containerd", func() bool {
		out, _ := l.Exec(ctx, h, "ctr", "-n", "k8s.io", "containers", "ls")
		id = ""
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[1] == "kforge.dev/lab-sleeper:test" {
				id = f[0]
			}
		}
		if id == "" {
			return false
		}
		tasks, _ := l.Exec(ctx, h, "ctr", "-n", "k8s.io", "tasks", "ls")
		for _, line := range strings.Split(string(tasks), "\n") {
			if f := strings.Fields(line); len(f) >= 3 && f[0] == id && f[2] == "RUNNING" {
				return true
			}
		}
		return false
	}, func() string {
		out, _ := l.Exec(ctx, h, "sh", "-c", "journalctl -u kubelet --no-pager | grep -E '^.{40}.*(E[0-9]{4}|W[0-9]{4}|rror)' | tail -20; journalctl -u containerd --no-pager | tail -20; ctr -n k8s.io c ls; ctr -n k8s.io t ls")
		return string(out)
	})
	if out := exec("systemctl", "is-active", "kubelet"); out != "active\n" {
		t.Fatalf("kubelet is %q", out)
	}
	t.Logf("static pod container %s running on %s, %s after kubelet started", id, h, time.Since(kubeletStart).Round(time.Millisecond))

	// kubelet saw the values it wants for the machine-wide sysctls, and the machine kept its own.
	if out := exec("cat", "/proc/sys/vm/overcommit_memory", "/proc/sys/kernel/panic"); out != "1\n10\n" {
		t.Errorf("inside the host vm.overcommit_memory, kernel.panic = %q, want 1, 10", out)
	}
	after := readSysctls(t)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("machine-wide %s changed from %s to %s while kubelet ran in a lab host", strings.ReplaceAll(k, "/", "."), v, after[k])
		}
	}
}

const waitForSignalSrc = `package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	fmt.Println("up")
	<-c
}
`

// waitFor polls cond every 500ms until it holds or timeout passes; then fails the test with
// what the optional diag funcs return.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool, diag ...func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			msg := ""
			for _, d := range diag {
				msg += "\n" + d()
			}
			t.Fatalf("no %s within %s%s", what, timeout, msg)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
