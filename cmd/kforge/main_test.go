package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/kforge/kforge/preflight"
	"github.com/kforge/kforge/tasks"
)

func kforge(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	if os.Getenv("XDG_STATE_HOME") == "" || !strings.HasPrefix(os.Getenv("XDG_STATE_HOME"), os.TempDir()) {
		t.Setenv("XDG_STATE_HOME", t.TempDir()) // logs and state stay out of the real home
	}
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestVersion(t *testing.T) {
	code, out, errs := kforge(t, "version")
	if code != 0 || !strings.Contains(out, "default Kubernetes v1.36.3; supported v1.35.x, v1.36.x or v1.37.x; catalogued releases v1.35.4, v1.36.1, v1.36.3, v1.37.2\n") || errs != "" {
		t.Fatalf("version: code %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, _ = kforge(t, "--output", "json", "version")
	if code != 0 || !strings.Contains(out, `"kubernetes":"v1.36.3"`) || !strings.Contains(out, `"supportedKubernetes":["v1.35","v1.36","v1.37"]`) || !strings.Contains(out, `"releases":["v1.35.4","v1.36.1","v1.36.3","v1.37.2"]`) {
		t.Fatalf("version json: code %d, stdout %q", code, out)
	}
}

func TestUnknownCommandIsUsageError(t *testing.T) {
	code, out, errs := kforge(t, "frobnicate")
	if code != exitInvalid || out != "" || !strings.Contains(errs, "frobnicate") {
		t.Fatalf("code %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestInventoryValidate(t *testing.T) {
	code, out, errs := kforge(t, "inventory", "validate", "../../examples/single-master.yaml", "../../examples/ha.yaml")
	if code != 0 || errs != "" || strings.Count(out, "valid") != 2 {
		t.Fatalf("examples: code %d, stdout %q, stderr %q", code, out, errs)
	}

	bad := t.TempDir() + "/bad.yaml"
	writeFile(t, bad, "apiVersion: kforge.dev/v1alpha1\nkind: Cluster\nname: t\nmasters:\n  - name: m1\n    address: 10.0.0.300\n")
	code, out, errs = kforge(t, "-i", bad, "inventory", "validate")
	if code != exitInvalid || out != "" {
		t.Fatalf("broken file: code %d, stdout %q", code, out)
	}
	if want := bad + ":6:14: masters[0].address:"; !strings.HasPrefix(errs, want) {
		t.Fatalf("stderr %q does not start with %q", errs, want)
	}

	code, out, errs = kforge(t, "--output", "json", "inventory", "validate", bad)
	if code != exitInvalid || out != "" || !strings.Contains(errs, `"event":"error"`) || !strings.Contains(errs, "bad.yaml:6:14") {
		t.Fatalf("json: code %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestInventorySchemaIsJSON(t *testing.T) {
	code, out, _ := kforge(t, "inventory", "schema")
	var v map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v["title"] == nil {
		t.Fatalf("code %d, stdout %.200q", code, out)
	}
}

func TestPlan(t *testing.T) {
	code, out, errs := kforge(t, "-i", "../../examples/ha.yaml", "plan", "--offline")
	if code != 0 || errs != "" {
		t.Fatalf("code %d, stderr %q", code, errs)
	}
	flat := strings.Join(strings.Fields(out), " ") // descriptions wrap to the terminal's width
	for _, want := range []string{"Cluster prod-eu1", "k8s-api.prod.example.com:6443", "1. connect", "static-pod control plane", "(cp1, cp2, cp3)", "[worker1, worker2, gpu1]", "join-workers", "kubeconfig"} {
		if !strings.Contains(flat, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = kforge(t, "-i", "../../examples/single-master.yaml", "--output", "json", "plan", "--offline")
	var p struct {
		Cluster string
		Tasks   []struct{ Name string }
	}
	if code != 0 || json.Unmarshal([]byte(out), &p) != nil || p.Cluster != "demo" || len(p.Tasks) < 10 {
		t.Fatalf("json plan: code %d, %q", code, out)
	}
	// plan --restore shows restore's steps: the snapshot is verified first, etcd restored before
	// the control plane is rendered to start on it.
	code, out, errs = kforge(t, "-i", "../../examples/single-master.yaml", "--state-dir", t.TempDir(), "plan", "--restore", "snap.db")
	iSnap, iConnect, iRestore, iMembers := strings.Index(out, "1. snapshot"), strings.Index(out, ". connect"), strings.Index(out, ". restore-etcd"), strings.Index(out, ". render")
	if code != 0 || !strings.Contains(out, "kforge restore will run:") || iSnap < 0 || iSnap > iConnect || iConnect > iRestore || iRestore > iMembers {
		t.Errorf("plan --restore: code %d, stderr %q:\n%s", code, errs, out)
	}
	// plan connects by default: hosts that cannot be reached are named as unknown, the rest is
	// shown (a new cluster here), and --detailed-exitcode says "not proven unchanged" with 3.
	code, out, errs = kforge(t, "-i", "../../examples/ha.yaml", "--state-dir", t.TempDir(), "plan", "--detailed-exitcode")
	if code != exitChanges || !strings.Contains(out, "cp1: unknown, it did not answer: ") || !strings.Contains(out, "API objects: a new cluster") || !strings.Contains(out, "created  the cluster's CAs, certificates and keys") {
		t.Errorf("connected plan with unreachable hosts: code %d, stderr %q:\n%s", code, errs, out)
	}
	code, out, errs = kforge(t, "-i", "does-not-exist.yaml", "plan")
	if code == 0 || out != "" || !strings.Contains(errs, "does-not-exist.yaml not found") {
		t.Fatalf("missing inventory: code %d, stdout %q, stderr %q", code, out, errs)
	}
}

// TestPlanThatPreflightWouldStop: a plan whose preflight finds errors does not end with "No
// changes", and --detailed-exitcode gives apply's preflight code (it gave 0: a CI gate passed a
// cluster that apply would refuse to touch).
func TestPlanThatPreflightWouldStop(t *testing.T) {
	// Its text is tested beside it: tasks.TestDiffTextThatPreflightWouldStop.
	d := &tasks.Diff{Preflight: []string{"[ERROR FileContent--proc-sys-net-ipv4-ip_forward] w1: /proc/sys/net/ipv4/ip_forward is 0"}}
	err := PlanCmd{DetailedExitcode: true}.exit(d)
	if exitCode(err) != preflight.ExitCode || !strings.Contains(fmt.Sprint(err), "apply would stop at preflight: 1 error") {
		t.Errorf("--detailed-exitcode: %v (code %d), want preflight's code %d", err, exitCode(err), preflight.ExitCode)
	}
	if err := (PlanCmd{}).exit(d); err != nil {
		t.Errorf("without --detailed-exitcode: %v, want plan to succeed", err)
	}
	if err := (PlanCmd{DetailedExitcode: true}).exit(&tasks.Diff{}); err != nil {
		t.Errorf("no changes: %v", err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestDebugLogIsWrittenAndNamedOnFailure(t *testing.T) {
	logFile := t.TempDir() + "/debug.log"
	code, _, errs := kforge(t, "--log-file", logFile, "-i", "nope.yaml", "plan")
	if code == 0 || !strings.Contains(errs, "debug log: "+logFile) {
		t.Fatalf("code %d, stderr %q", code, errs)
	}
	b, err := os.ReadFile(logFile)
	if err != nil || !strings.Contains(string(b), `"msg":"command failed"`) || !strings.Contains(string(b), "nope.yaml") {
		t.Fatalf("log %q, %v", b, err)
	}
	if fi, _ := os.Stat(logFile); fi.Mode().Perm() != 0o600 {
		t.Errorf("log mode %v", fi.Mode())
	}
}

func TestKubeconfigPrintsAndMerges(t *testing.T) {
	dir := t.TempDir()
	inv := dir + "/k.yaml"
	writeFile(t, inv, "apiVersion: kforge.dev/v1alpha1\nkind: Cluster\nname: c1\nmasters:\n  - {name: m1, address: 10.0.0.1}\n")
	state := dir + "/state"
	code, out, errs := kforge(t, "-i", inv, "--state-dir", state, "kubeconfig")
	if code == 0 || out != "" || !strings.Contains(errs, "run kforge apply first") {
		t.Fatalf("before apply: code %d, stdout %q, stderr %q", code, out, errs)
	}
	admin := "apiVersion: v1\nkind: Config\nclusters:\n- name: c1\n  cluster: {server: 'https://10.0.0.1:6443'}\nusers:\n- name: c1-admin\n  user: {token: x}\ncontexts:\n- name: c1-admin@c1\n  context: {cluster: c1, user: c1-admin}\ncurrent-context: c1-admin@c1\n"
	os.MkdirAll(state, 0o700)
	writeFile(t, state+"/admin.conf", admin)
	code, out, _ = kforge(t, "-i", inv, "--state-dir", state, "kubeconfig")
	if code != 0 || out != admin {
		t.Fatalf("print: code %d, stdout %q", code, out)
	}
	home := dir + "/kube/config"
	os.MkdirAll(dir+"/kube", 0o700)
	writeFile(t, home, "apiVersion: v1\nkind: Config\nclusters:\n- name: other\n  cluster: {server: 'https://192.0.2.9:6443'}\ncontexts:\n- name: other\n  context: {cluster: other}\ncurrent-context: other\n")
	t.Setenv("KUBECONFIG", home)
	code, _, errs = kforge(t, "-i", inv, "--state-dir", state, "kubeconfig", "--merge")
	b, _ := os.ReadFile(home)
	if code != 0 || !strings.Contains(string(b), "name: other") || !strings.Contains(string(b), "current-context: c1-admin@c1") {
		t.Fatalf("merge: code %d, stderr %q, file:\n%s", code, errs, b)
	}
}

// TestSettingsThatShapeTheClusterAreNotFlags: the former --conntrack-max-per-core and
// --resolv-conf are refused with where the setting lives now, before anything is read.
func TestSettingsThatShapeTheClusterAreNotFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-i", "nope.yaml", "apply", "--conntrack-max-per-core", "0"},
		{"-i", "nope.yaml", "apply", "--resolv-conf", "/etc/kforge/resolv.conf"},
		{"-i", "nope.yaml", "render", "-o", t.TempDir(), "--resolv-conf", "/x"},
	} {
		code, out, errs := kforge(t, args...)
		if code != exitInvalid || out != "" || !strings.Contains(errs, "moved to the inventory") {
			t.Errorf("%v: code %d, stderr %q", args, code, errs)
		}
	}
}
