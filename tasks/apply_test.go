package tasks

import (
	"slices"
	"strings"
	"testing"

	"github.com/kforge/kforge/inventory"
)

func cluster(t *testing.T, extra string) *inventory.Cluster {
	t.Helper()
	doc := "apiVersion: kforge.dev/v1alpha1\nkind: Cluster\nname: t\nmasters:\n  - {name: m1, address: 10.0.0.1}\n" + extra
	c, err := inventory.Parse("t.yaml", []byte(doc), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func taskNames(ts []Task) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

func TestApplyListFollowsTheInventory(t *testing.T) {
	single := taskNames(Apply(cluster(t, "networking: {plugin: none}\n")))
	want := []string{"connect", "preflight", "pki", "etcd-members", "render", "stage", "wait-apiserver", "cluster-config", "bootstrap", "core-addons", "mark-nodes", "kubeconfig"}
	if !slices.Equal(single, want) {
		t.Errorf("single master, no pod network:\n got %v\nwant %v", single, want)
	}

	full := Apply(cluster(t, "workers:\n  - {name: w1, address: 10.0.0.2}\nbundle: /b\naddons: [{path: /a.yaml}]\n"))
	names := taskNames(full)
	for _, n := range []string{"stage", "pod-network", "join-workers", "addons", "wait-ready"} {
		if !slices.Contains(names, n) {
			t.Errorf("%s missing from %v", n, names)
		}
	}
	if slices.Index(names, "stage") > slices.Index(names, "wait-apiserver") || slices.Index(names, "join-workers") < slices.Index(names, "bootstrap") {
		t.Errorf("order: %v", names)
	}
	for _, task := range full {
		switch task.Name {
		case "stage":
			if !slices.Equal(task.Hosts, []string{"m1", "w1"}) || !strings.Contains(task.Description, "bundle") {
				t.Errorf("stage: %+v", task)
			}
		case "join-workers":
			if !slices.Equal(task.Hosts, []string{"w1"}) {
				t.Errorf("join-workers hosts %v", task.Hosts)
			}
		case "connect", "preflight":
			if len(task.Hosts) != 2 {
				t.Errorf("%s hosts %v", task.Name, task.Hosts)
			}
		}
		if task.Scope == OnHosts && len(task.Hosts) == 0 {
			t.Errorf("%s runs on hosts but lists none", task.Name)
		}
	}
}
