package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/release"
)

func TestBundleVerifyListsProblems(t *testing.T) {
	empty := t.TempDir()
	code, out, errs := kforge(t, "bundle", "verify", empty)
	if code != exitFailed || out != "" || !strings.Contains(errs, "no manifest.json") || !strings.Contains(errs, "kforge bundle build") {
		t.Errorf("verify of an empty dir: code %d, stdout %q, stderr %q", code, out, errs)
	}

	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	os.WriteFile(filepath.Join(dir, "bin", "kubelet"), []byte("not kubelet"), 0o755)
	manifest := `{"schemaVersion": 1, "platform": "linux/amd64", "source": "built",
  "versions": {"kubernetes": "v1.36.3"},
  "files": [
    {"name": "kubelet", "path": "bin/kubelet", "sha256": "` + strings.Repeat("a", 64) + `", "size": 11, "install": "/usr/bin/kubelet", "mode": "0755"},
    {"name": "kubectl", "path": "bin/kubectl", "sha256": "` + strings.Repeat("b", 64) + `", "size": 5, "install": "/usr/bin/kubectl", "mode": "0755"}
  ],
  "images": []}`
	os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(manifest), 0o644)
	code, out, errs = kforge(t, "bundle", "verify", dir)
	if code != exitFailed || out != "" {
		t.Errorf("verify of a damaged bundle: code %d, stdout %q", code, out)
	}
	for _, want := range []string{"2 problem(s)", "file kubelet: bin/kubelet has sha256", "file kubectl:", "no such file"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
}

func TestBundleBuildNeedsAnOutputDirectory(t *testing.T) {
	code, _, errs := kforge(t, "bundle", "build")
	if code != exitInvalid || !strings.Contains(errs, "--out") {
		t.Errorf("bundle build without -o: code %d, stderr %q", code, errs)
	}
}

// TestUnsupportedKubernetesVersionExits2: a version this kforge does not install, named by
// the inventory or by bundle build (alone or among supported ones), exits 2 before anything is
// built or touched, and the error lists the supported versions.
func TestUnsupportedKubernetesVersionExits2(t *testing.T) {
	const supported = "use v1.35.x, v1.36.x or v1.37.x (default v1.36.3)"
	for _, versions := range []string{"v1.30.0", "v1.36.3,v1.38.0", "1.36.3"} {
		out := filepath.Join(t.TempDir(), "bundle")
		code, stdout, errs := kforge(t, "bundle", "build", "--kubernetes", versions, "-o", out)
		if code != exitInvalid || stdout != "" {
			t.Errorf("bundle build --kubernetes %s: code %d, stdout %q, stderr %q; want code %d", versions, code, stdout, errs, exitInvalid)
		}
		if versions != "1.36.3" && !strings.Contains(errs, supported) {
			t.Errorf("bundle build --kubernetes %s: stderr %q lacks %q", versions, errs, supported)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("bundle build --kubernetes %s wrote %s", versions, out)
		}
	}

	inv := filepath.Join(t.TempDir(), "kforge.yaml")
	writeFile(t, inv, "apiVersion: kforge.dev/v1alpha1\nkind: Cluster\nname: t\nkubernetesVersion: v1.34.2\nmasters:\n  - {name: m1, address: 10.0.0.1}\n")
	for _, args := range [][]string{{"inventory", "validate"}, {"plan"}, {"render", "-o", filepath.Join(t.TempDir(), "r")}, {"apply"}} {
		code, stdout, errs := kforge(t, append([]string{"-i", inv, "--state-dir", t.TempDir()}, args...)...)
		want := inv + ":4:20: kubernetesVersion: Kubernetes v1.34.2 is not supported by this kforge; " + supported
		if code != exitInvalid || stdout != "" || !strings.Contains(errs, want) {
			t.Errorf("%v with kubernetesVersion v1.34.2: code %d, stdout %q, stderr %q; want code %d and %q", args, code, stdout, errs, exitInvalid, want)
		}
	}
}

// TestBundleWithoutTheVersionExits2: apply's refusal of a bundle that lacks the inventory's
// version (tasks: readBundle) is bad input, like an unsupported version.
func TestBundleWithoutTheVersionExits2(t *testing.T) {
	err := fmt.Errorf("bundle: %w", &bundle.MissingReleaseError{Dir: "/b", Version: "v1.37.2", Holds: []string{"v1.36.3"}})
	if got := exitCode(err); got != exitInvalid {
		t.Errorf("exitCode(%v) = %d, want %d", err, got, exitInvalid)
	}
	if got := exitCode(errors.New("ssh: connection refused")); got != exitFailed {
		t.Errorf("exitCode of a plain failure = %d, want %d", got, exitFailed)
	}
}

// TestBundleBuildJSONEvents: with --output json, stdout is one JSON event per line: a started
// and a done event per component and image, then the result; nothing else. (Builds the default
// bundle with the real go command into the shared cache when it is cold.)
func TestBundleBuildJSONEvents(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		testenv.Require(t, errors.New("the go command is not on PATH (it builds the bundle)"))
	}
	testenv.Require(t, nil)
	code, out, errs := kforge(t, "--output", "json", "bundle", "build", "-o", filepath.Join(t.TempDir(), "b"))
	if code != 0 {
		t.Fatalf("code %d: %s", code, errs)
	}
	checkBundleEvents(t, out)
}

// bundleTasks are the tasks of a bundle build: one per component, one per image, the bundle
// directory.
func bundleTasks() []string {
	tasks := []string{"kubernetes", "etcd", "coredns", "cni-plugins", "flannel", "kube-network-policies", "metrics-server", "local-path-provisioner", "local-path-helper", "pause", "containerd", "runc"}
	for _, c := range bundle.ImageComponents {
		tasks = append(tasks, "image "+c)
	}
	return append(tasks, "bundle")
}

// checkBundleEvents checks that out is one JSON object per line: a started and a done event for
// every task of a bundle build, then the built bundle. It returns the events.
func checkBundleEvents(t *testing.T, out string) []map[string]any {
	t.Helper()
	started, done := map[string]bool{}, map[string]bool{}
	var evs []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev["event"] == nil {
			t.Fatalf("stdout line is not a JSON event: %q (%v)", line, err)
		}
		task, _ := ev["task"].(string)
		switch ev["event"] {
		case "task-started":
			started[task] = true
		case "task-done":
			if !started[task] {
				t.Errorf("task %s done before it started", task)
			}
			done[task] = true
		}
		evs = append(evs, ev)
	}
	for _, c := range bundleTasks() {
		if !done[c] {
			t.Errorf("no task-done event for %s", c)
		}
	}
	if last := evs[len(evs)-1]; last["event"] != "built" || last["manifest"] == nil {
		t.Errorf("last event %v, want the built bundle", last)
	}
	return evs
}

// fakeGo puts on PATH a go command that answers what a bundle build asks (module downloads,
// tidy, the godebug settings of Kubernetes' go.mod, the Kubernetes release time) and "compiles" each binary into a small shell script; its
// kubeadm lists the images of the default release. It returns the file each call is logged to.
func fakeGo(t *testing.T) (calls string) {
	t.Helper()
	d := t.TempDir()
	v, err := release.For(release.Default())
	if err != nil {
		t.Fatal(err)
	}
	names := v.Images("").ByComponent()
	var images []string
	for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "etcd", "coredns", "pause"} {
		images = append(images, names[c])
	}
	files := map[string]string{
		"images":         strings.Join(images, "\n") + "\n",
		"kubernetes.mod": "module k8s.io/kubernetes\n\nreplace k8s.io/api => ./staging/src/k8s.io/api\n",
		"main.go": "package main\n\nimport (\n\t_ \"github.com/flannel-io/flannel/pkg/backend/tencentvpc\"\n" +
			"\t_ \"github.com/flannel-io/flannel/pkg/backend/udp\"\n)\n\nfunc main() {}\n",
		"go": `#!/bin/sh
D=` + d + `
echo "$*" >>$D/calls
binary() {
	case "${1##*/}" in
	kubeadm) printf '#!/bin/sh\ncat %s/images\n' $D >"$1" ;;
	*) printf '#!/bin/sh\n' >"$1" ;;
	esac
	chmod 755 "$1"
}
case "$1 $2" in
"mod download")
	case "$4" in
	k8s.io/kubernetes@*) echo "{\"Path\":\"k8s.io/kubernetes\",\"GoMod\":\"$D/kubernetes.mod\",\"Dir\":\"$D\"}" ;;
	sigs.k8s.io/kube-network-policies@*) echo "{\"Path\":\"${4%@*}\",\"Dir\":\"$D/knp\"}" ;;
	*) echo "{\"Path\":\"${4%@*}\",\"Dir\":\"$D\"}" ;;
	esac ;;
"mod tidy") ;;
"mod edit") case "$3" in -json) echo '{}' ;; esac ;;
"list -m") echo '{"Path":"k8s.io/kubernetes","Time":"2026-01-01T00:00:00Z"}' ;;
build\ *)
	while [ "$1" != -o ]; do shift; done
	out=$2
	shift 2
	case "$out" in
	*/) for p in "$@"; do binary "$out${p##*/}"; done ;;
	*) binary "$out" ;;
	esac ;;
*) echo "fake go: unexpected go $*" >&2; exit 2 ;;
esac
`,
	}
	// kube-network-policies' controller.go and main.go as far as kforge's patches read them: its
	// queue rule, twice, and the signals it stops on.
	const queueRule = "\tqueue := &expr.Queue{Num: uint16(c.config.QueueID)}\n\tif c.config.FailOpen {\n\t\tqueue.Flag = expr.QueueFlagBypass\n\t}\n"
	files["knp/pkg/networkpolicy/controller.go"] = "package networkpolicy\n\nfunc a() {\n" + queueRule + "}\n\nfunc b() {\n" + queueRule + "}\n"
	files["knp/pkg/networkpolicy/dnsagent.go"] = "package networkpolicy\n\nvar _ = []any{\n\t\t\t&expr.Queue{Num: uint16(n.nfQueueID), Flag: expr.QueueFlagBypass},\n}\n"
	files["knp/cmd/main.go"] = "package main\n\nfunc run() {\n\tctx, cancel := signal.NotifyContext(\n\t\tcontext.Background(), os.Interrupt, unix.SIGINT)\n}\n"
	for name, data := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(d, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, name), []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", d+string(os.PathListSeparator)+os.Getenv("PATH"))
	return filepath.Join(d, "calls")
}

// TestBundleBuildOutput: a whole bundle build (a fake go command, real images) says what it does
// on one path: with --output json, stdout is only JSON events, one per line, a task per
// component and image, then the built bundle, and stderr is empty; as text, the tasks are lines
// on stderr, a component taken from the cache says so, and stdout is the one line about the
// bundle.
func TestBundleBuildOutput(t *testing.T) {
	calls := fakeGo(t)
	cache, dir := t.TempDir(), filepath.Join(t.TempDir(), "b")
	code, out, errs := kforge(t, "--output", "json", "bundle", "build", "--cache-dir", cache, "-o", dir)
	if strings.Contains(errs, "/usr/sbin/") {
		testenv.Need(t, errors.New(errs)) // the kube-proxy and flannel images need this machine's iptables and nft
	}
	if code != 0 || errs != "" {
		t.Fatalf("json build: code %d, stderr %q", code, errs)
	}
	for _, ev := range checkBundleEvents(t, out) {
		if ev["event"] == "task-started" && ev["task"] == "kubernetes" && !strings.Contains(ev["message"].(string), "not in the cache") {
			t.Errorf("first build of kubernetes: %v", ev)
		}
	}
	before, err := os.ReadFile(calls)
	if err != nil || !strings.Contains(string(before), "build ") {
		t.Fatalf("the fake go command was not used (%v): %q", err, before)
	}

	code, out, errs = kforge(t, "bundle", "build", "--cache-dir", cache, "-o", dir)
	if code != 0 {
		t.Fatalf("text build: code %d, stderr %q", code, errs)
	}
	if lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); len(lines) != 1 || !strings.HasPrefix(out, "bundle "+dir+" built: Kubernetes ") {
		t.Errorf("stdout %q, want one line about the bundle", out)
	}
	for _, want := range []string{"• kubernetes      " + release.Default() + " from the cache\n", "✓ kubernetes      ", "• image pause     registry.k8s.io/pause:", "✓ bundle          "} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	if strings.Contains(errs, "{") || strings.Contains(errs, "not in the cache") {
		t.Errorf("stderr of a cached text build:\n%s", errs)
	}
	if after, _ := os.ReadFile(calls); string(after) != string(before) {
		t.Errorf("a cached build ran go: %q", strings.TrimPrefix(string(after), string(before)))
	}
}
