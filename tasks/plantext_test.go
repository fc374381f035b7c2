package tasks

import (
	"strings"
	"testing"

	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/pki"
)

// TestDiffText: every part of a diff is printed in its place, in the words plan has always
// used (scripts and people read them): preflight, rotation, upgrade, the state dir, each host
// with its uploads, files and restarts, unreachable hosts in name order, the API objects,
// removed hosts, and one counting line.
func TestDiffText(t *testing.T) {
	d := Diff{
		Unreachable:    map[string]string{"w2": "dial tcp: refused", "w1": "host key mismatch"},
		Preflight:      []string{"[ERROR Swap] m1: swap is on\nturn it off"},
		Certificates:   []pki.Change{{Key: "apiserver@m1", Action: "renewed", Reason: "expires in 10 days"}, {Key: "sa", Action: "created", Reason: "missing"}},
		BootstrapToken: "renewed",
		Upgrade:        "1.33.4 -> 1.34.1\nmasters one at a time",
		Hosts: []HostDiff{
			{Host: "m1", Role: inventory.RoleMaster, Node: []string{"kubelet upgraded"},
				Files:    []FileDiff{{Path: "/etc/kubernetes/manifests/kube-apiserver.yaml", Action: "change", Diff: "--- a\n+++ b\n-x\n+y\n"}, {Path: "/etc/kubernetes/pki/apiserver.crt", Action: "create", Note: "a new certificate"}},
				Upload:   &Upload{Files: []string{"kubelet", "kubeadm", "kubectl", "crictl", "containerd"}, Images: []string{"pause:3.10"}, Bytes: 300 << 20, Pin: []string{"pause:3.10"}},
				Restarts: []string{"kubelet", "kube-apiserver"}},
			{Host: "w3", Role: inventory.RoleWorker, Upload: &Upload{Files: []string{"kubelet"}, Bytes: 5 << 20, FromMasters: true}},
		},
		Removed:  []RemovedHost{{Host: "w9", Action: "would be drained and reset (--prune)", Changes: true}},
		Objects:  []kube.Change{{Kind: "ConfigMap", Namespace: "kube-system", Name: "kubeadm-config", Action: "update"}, {Kind: "ClusterRoleBinding", Name: "kforge:x", Action: "create"}},
		Rollouts: []string{"restart daemonset kube-system/kube-proxy"},
		Rotation: "phase 2 of 3",
	}
	want := `apply would stop at preflight:
    [ERROR Swap] m1: swap is on
    turn it off

CA rotation in progress
    phase 2 of 3

upgrade
    1.33.4 -> 1.34.1
    masters one at a time

state dir
    renewed  apiserver@m1: expires in 10 days
    created  sa: missing
    renewed  bootstrap token

m1 (master)
    node: kubelet upgraded
    upload from the bundle: 5 files, 1 image, 300 MiB (kubelet, kubeadm, kubectl, crictl +2 more)
    pin 1 image against kubelet's image garbage collection: pause:3.10
    change /etc/kubernetes/manifests/kube-apiserver.yaml
        --- a
        +++ b
        -x
        +y
    create /etc/kubernetes/pki/apiserver.crt (a new certificate)
    then: kubelet, kube-apiserver

w3 (worker)
    from the masters' registries (uploaded only what they lack): 1 file, 0 images, 5 MiB (kubelet)

w1: unknown, it did not answer: host key mismatch

w2: unknown, it did not answer: dial tcp: refused

API objects (server-side dry run)
    update   ConfigMap kube-system/kubeadm-config
    create   ClusterRoleBinding kforge:x
    restart daemonset kube-system/kube-proxy

w9 (no longer in the inventory): would be drained and reset (--prune)

Apply would stop at preflight (1 error above) and change nothing; fix them first.
`
	if got := d.Text(); got != want {
		t.Errorf("diff text:\n%s\nwant:\n%s", got, want)
	}
	for _, c := range []struct {
		d    Diff
		want string
	}{
		{Diff{NewCluster: true, Certificates: make([]pki.Change, 2), BootstrapToken: "created"},
			"state dir\n    created  the cluster's CAs, certificates and keys (2)\n    created  bootstrap token\n\nAPI objects: a new cluster, every object is created\n\nPlan: 0 hosts, 2 certificates, 0 API objects to change.\n"},
		{Diff{APIUnknown: "the API server did not answer"},
			"API objects: unknown, the API server did not answer\n\nNo changes in what could be seen; the parts marked unknown were not.\n"},
		{Diff{}, "No changes: apply would change nothing.\n"},
	} {
		if got := c.d.Text(); got != c.want {
			t.Errorf("diff text:\n%s\nwant:\n%s", got, c.want)
		}
	}
}

// TestDiffTextThatPreflightWouldStop: a plan whose preflight finds errors does not end with
// "No changes" (a CI gate passed a cluster that apply would refuse to touch).
func TestDiffTextThatPreflightWouldStop(t *testing.T) {
	d := Diff{Preflight: []string{"[ERROR FileContent--proc-sys-net-ipv4-ip_forward] w1: /proc/sys/net/ipv4/ip_forward is 0"}}
	if txt := d.Text(); !strings.Contains(txt, "Apply would stop at preflight (1 error above)") || strings.Contains(txt, "No changes") {
		t.Errorf("diff text:\n%s", txt)
	}
}

// TestStepTableFits: plan's steps fit the width they are given (descriptions wrap under their
// step, hosts stay on one line); they used to run to about 250 columns.
func TestStepTableFits(t *testing.T) {
	steps := []Task{
		{Name: "connect", Scope: OnHosts, Hosts: []string{"m1", "w1"}, Description: strings.Repeat("connect to the hosts over SSH and gather facts ", 5)},
		{Name: "kubeconfig", Scope: OnWorkstation, Description: "write the admin kubeconfig"},
	}
	for _, width := range []int{60, 100} {
		out := StepTable(steps, width)
		for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			if len(l) > width {
				t.Errorf("width %d: line of %d columns: %q", width, len(l), l)
			}
		}
		if !strings.Contains(out, "  1. connect     connect to") || !strings.Contains(out, "[m1, w1]") || !strings.Contains(out, "  2. kubeconfig  write the admin kubeconfig [workstation]\n") {
			t.Errorf("width %d:\n%s", width, out)
		}
	}
	many := StepTable([]Task{{Name: "connect", Scope: OnHosts, Hosts: []string{"m1", "w1", "w2", "w3", "w4", "w5"}, Description: "connect"}}, 100)
	if many != "  1. connect  connect [m1, w1, w2, w3 +2 more]\n" {
		t.Errorf("six hosts: %q", many)
	}
}
