package tasks

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kforge/kforge/facts"
	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/state"
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

func findTask(t *testing.T, ts []Task, name string) Task {
	t.Helper()
	for _, x := range ts {
		if x.Name == name {
			return x
		}
	}
	t.Fatalf("no task %s in %v", name, taskNames(ts))
	return Task{}
}

func taskNames(ts []Task) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

func TestApplyListFollowsTheInventory(t *testing.T) {
	single := taskNames(ApplyTasks(cluster(t, "networking: {plugin: none}\n"), Options{}))
	want := []string{"connect", "preflight", "etcd-user", "pki", "etcd-members", "render", "stage", "wait-apiserver", "kubeconfig", "cluster-config", "bootstrap", "core-addons", "network-policy", "metrics-server", "local-volumes", "mark-nodes", "retire", "record-hosts"}
	if !slices.Equal(single, want) {
		t.Errorf("single master, no pod network:\n got %v\nwant %v", single, want)
	}
	// Local volumes are off unless the inventory turns them on: the step removes what an earlier
	// run installed.
	if d := findTask(t, ApplyTasks(cluster(t, ""), Options{}), "local-volumes").Description; !strings.HasPrefix(d, "remove ") {
		t.Errorf("local volumes by default: %q; want their removal", d)
	}
	// Two masters without an endpoint: the nodes keep their API proxy; with a VIP too, nothing
	// is retired, and the masters start kforge-vip once its RBAC exists.
	two := cluster(t, "  - {name: m2, address: 10.0.0.5}\n")
	if tasks := ApplyTasks(two, Options{}); !strings.Contains(findTask(t, tasks, "retire").Description, "kforge-vip") || strings.Contains(findTask(t, tasks, "retire").Description, "API proxy") {
		t.Errorf("two masters without an endpoint: retire %q; want kforge-vip only", findTask(t, tasks, "retire").Description)
	}
	two.ControlPlaneVIP = "10.0.0.50"
	withVIP := ApplyTasks(two, Options{})
	if names, retire := taskNames(withVIP), findTask(t, withVIP, "retire").Description; slices.Index(names, "vip") != slices.Index(names, "bootstrap")+1 ||
		strings.Contains(retire, "kforge-vip") || !strings.Contains(retire, "etcd snapshots") {
		t.Errorf("two masters with a VIP: %v, retire %q; want vip after bootstrap and only the scheduled snapshots' timer retired (no bundle)", names, retire)
	}

	full := ApplyTasks(cluster(t, "workers:\n  - {name: w1, address: 10.0.0.2}\nbundle: "+fakeBundleDir(t)+"\naddons: [{path: /a.yaml}]\nlocalVolumes: {enabled: true, path: /data/volumes}\n"), Options{})
	names := taskNames(full)
	for _, n := range []string{"stage", "pod-network", "join-workers", "etcd-snapshots", "addons", "wait-ready"} {
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
		case "local-volumes":
			if !strings.Contains(task.Description, "default StorageClass local-path") || !strings.Contains(task.Description, "/data/volumes") {
				t.Errorf("local-volumes: %+v", task)
			}
		case "wait-ready": // the provisioner's pod too
			if !strings.Contains(task.Description, "kube-system, kube-flannel and local-path-storage") {
				t.Errorf("wait-ready: %+v", task)
			}
		case "etcd-snapshots": // with a bundle, on by default, on the masters
			if !slices.Equal(task.Hosts, []string{"m1"}) || !strings.Contains(task.Description, "every 12h") {
				t.Errorf("etcd-snapshots: %+v", task)
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

// TestApplyListWithAnExternalEtcd: with an etcd group, apply connects to and checks every host,
// makes etcd's user, plans its members and takes the scheduled snapshots on the etcd hosts,
// stages them first (said in stage's description), and leaves them out of what only nodes do
// (the pod network); the other commands that do not cover them yet refuse before connecting.
func TestApplyListWithAnExternalEtcd(t *testing.T) {
	c := cluster(t, "  - {name: m2, address: 10.0.0.5}\nworkers:\n  - {name: w1, address: 10.0.0.2}\nbundle: "+fakeBundleDir(t)+
		"\netcd:\n  - {name: e1, address: 10.0.0.11}\n  - {name: e2, address: 10.0.0.12}\n  - {name: e3, address: 10.0.0.13}\n")
	etcd := []string{"e1", "e2", "e3"}
	for _, task := range ApplyTasks(c, Options{}) {
		var want []string
		switch task.Name {
		case "connect", "preflight", "stage":
			want = []string{"m1", "m2", "w1", "e1", "e2", "e3"}
		case "etcd-user", "etcd-members", "etcd-snapshots":
			want = etcd
		case "pod-network":
			want = []string{"m1", "m2", "w1"}
		default:
			continue
		}
		if !slices.Equal(task.Hosts, want) {
			t.Errorf("%s hosts %v, want %v", task.Name, task.Hosts, want)
		}
		if task.Name == "stage" && !strings.Contains(task.Description, "first the etcd hosts (e1, e2, e3)") {
			t.Errorf("stage: %q; want the etcd hosts first", task.Description)
		}
	}
	// rotate-ca's phases cover the etcd hosts, before the masters (rotate.go).
	for _, task := range Tasks(NewRotateCA(c, Options{}, []string{"ca"}).Steps()) {
		if task.Name == "trust" && (!slices.Equal(task.Hosts, []string{"m1", "m2", "w1", "e1", "e2", "e3"}) || !strings.Contains(task.Description, "an external etcd's hosts one at a time, then the masters")) {
			t.Errorf("rotate-ca: trust on %v: %q; want every host, the etcd hosts first", task.Hosts, task.Description)
		}
	}
	// restore puts the snapshot on the etcd hosts and stops the masters as well.
	for _, task := range Tasks(NewRestore(c, Options{}, RestoreOptions{}).Steps()) {
		var want []string
		switch task.Name {
		case "connect":
			want = []string{"m1", "m2", "w1", "e1", "e2", "e3"}
		case "quorum", "etcd-user":
			want = etcd
		case "restore-etcd":
			want = append(slices.Clone(etcd), "m1", "m2")
		default:
			continue
		}
		if !slices.Equal(task.Hosts, want) {
			t.Errorf("restore: %s hosts %v, want %v", task.Name, task.Hosts, want)
		}
	}
}

// TestRemovedRefusesANewEtcd: an inventory that keeps none of an external etcd's hosts, or
// none of the masters etcd runs on, would start a new, empty etcd cluster: Removed refuses it
// (NoMasterLeftError); all-new masters over a kept external etcd are fine, and so is a move of
// etcd between the masters and an etcd group, which EtcdMove reports (back onto the masters
// only with --prune).
func TestRemovedRefusesANewEtcd(t *testing.T) {
	const group = "etcd:\n  - {name: e1, address: 10.0.0.11}\n  - {name: e2, address: 10.0.0.12}\n  - {name: e3, address: 10.0.0.13}\n"
	external := cluster(t, group)
	stacked := cluster(t, "")
	for _, tc := range []struct {
		name      string
		recorded  *inventory.Cluster
		inventory string
		role      inventory.Role // of the refusal; "" for none
		from      inventory.Role // EtcdMove's answer
		prune     bool           // EtcdMove refuses without
	}{
		{name: "new etcd hosts", recorded: external, inventory: "masters:\n  - {name: m1, address: 10.0.0.1}\netcd:\n  - {name: e7, address: 10.0.0.17}\n  - {name: e8, address: 10.0.0.18}\n  - {name: e9, address: 10.0.0.19}\n", role: inventory.RoleEtcd, from: inventory.RoleEtcd},
		{name: "one etcd host kept", recorded: external, inventory: "masters:\n  - {name: m1, address: 10.0.0.1}\netcd:\n  - {name: e1, address: 10.0.0.11}\n  - {name: e8, address: 10.0.0.18}\n  - {name: e9, address: 10.0.0.19}\n", from: inventory.RoleEtcd},
		{name: "new masters, the etcd hosts kept", recorded: external, inventory: "masters:\n  - {name: m9, address: 10.0.0.9}\n" + group, from: inventory.RoleEtcd},
		{name: "stacked to external", recorded: stacked, inventory: "masters:\n  - {name: m1, address: 10.0.0.1}\n" + group, from: inventory.RoleMaster},
		{name: "stacked to external with new masters", recorded: stacked, inventory: "masters:\n  - {name: m9, address: 10.0.0.9}\n" + group, role: inventory.RoleMaster, from: inventory.RoleMaster},
		{name: "external to stacked", recorded: external, inventory: "masters:\n  - {name: m1, address: 10.0.0.1}\n", from: inventory.RoleEtcd, prune: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := state.At(t.TempDir())
			if err := recordHosts(NewApply(tc.recorded, Options{State: dir}).rc, nil); err != nil {
				t.Fatal(err)
			}
			c, err := inventory.Parse("t.yaml", []byte("apiVersion: kforge.dev/v1alpha1\nkind: Cluster\nname: t\n"+tc.inventory), func(string) (string, bool) { return "", false })
			if err != nil {
				t.Fatal(err)
			}
			_, err = Removed(c, dir)
			var nml *NoMasterLeftError
			switch {
			case tc.role == "" && err != nil:
				t.Fatalf("Removed: %v; want no refusal", err)
			case tc.role != "" && (!errors.As(err, &nml) || nml.Role != tc.role):
				t.Fatalf("Removed: %v; want a NoMasterLeftError of the %s", err, tc.role)
			case tc.role != "" && (!strings.Contains(err.Error(), "new, empty") || !strings.Contains(err.Error(), "kforge restore") && tc.role == inventory.RoleEtcd):
				t.Errorf("the refusal does not say what would happen or what to do: %v", err)
			}
			from, err := EtcdMove(c, dir, true)
			if err != nil || from != tc.from {
				t.Errorf("EtcdMove with --prune: %q, %v; want %q", from, err, tc.from)
			}
			_, err = EtcdMove(c, dir, false)
			if tc.prune != (err != nil) {
				t.Errorf("EtcdMove without --prune: %v; want a refusal: %v", err, tc.prune)
			}
			if err != nil && !strings.Contains(err.Error(), "--prune") {
				t.Errorf("the refusal does not say what to do: %v", err)
			}
		})
	}
}

// TestRemovedHostsComeFromTheRecord: apply records its hosts; a later inventory without some of
// them finds them (reachable as before), reports them or, with --prune, prunes the workers;
// masters are refused; hosts not pruned stay in the record.
func TestRemovedHostsComeFromTheRecord(t *testing.T) {
	dir := state.At(t.TempDir())
	if r, err := Removed(cluster(t, ""), dir); err != nil || len(r) != 0 {
		t.Fatalf("no record yet: %v, %v", r, err)
	}
	big := cluster(t, "  - {name: m2, address: 10.0.0.5}\ncontrolPlaneEndpoint: \"10.0.0.9:6443\"\nssh: {user: ops, port: 2222}\nworkers:\n  - {name: w1, address: 10.0.0.2}\n  - {name: w2, address: 10.0.0.3, ssh: {user: w2user}}\n")
	if err := recordHosts(NewApply(big, Options{State: dir}).rc, nil); err != nil {
		t.Fatal(err)
	}
	// w2 and m2 leave; the inventory's SSH defaults change too.
	small := cluster(t, "ssh: {user: other}\nworkers:\n  - {name: w1, address: 10.0.0.2}\n")
	removed, err := Removed(small, dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := fleet.Names(removed); !slices.Equal(got, []string{"m2", "w2"}) {
		t.Fatalf("removed %v, want m2, w2", got)
	}
	for _, n := range removed {
		if want := map[string]string{"m2": "ops", "w2": "w2user"}[n.Name]; n.SSH.User != want || n.SSH.Port != 2222 {
			t.Errorf("%s reached as %s port %d, want %s port 2222 (as the last apply did)", n.Name, n.SSH.User, n.SSH.Port, want)
		}
	}
	// An inventory keeping none of the recorded masters would start a new etcd cluster.
	var nml *NoMasterLeftError
	other, err := inventory.Parse("t.yaml", []byte("apiVersion: kforge.dev/v1alpha1\nkind: Cluster\nname: t\nmasters:\n  - {name: m9, address: 10.0.0.9}\n"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Removed(other, dir); !errors.As(err, &nml) || !slices.Equal(nml.Recorded, []string{"m1", "m2"}) {
		t.Errorf("no recorded master kept: %v", err)
	}
	workersOnly := removed[1:]
	report := ApplyTasks(small, Options{Removed: workersOnly})
	if n := taskNames(report); !slices.Contains(n, "removed-hosts") || slices.Contains(n, "prune") {
		t.Errorf("without --prune: %v", n)
	}
	for _, task := range ApplyTasks(small, Options{Removed: workersOnly, Prune: true}) {
		if task.Name == "prune" && !slices.Equal(task.Hosts, []string{"w2"}) {
			t.Errorf("prune hosts %v", task.Hosts)
		}
	}
	// Not pruned: still in the record, so the next apply still knows it.
	if err := recordHosts(NewApply(small, Options{State: dir}).rc, removed); err != nil {
		t.Fatal(err)
	}
	if again, err := Removed(small, dir); err != nil || !slices.Equal(fleet.Names(again), []string{"m2", "w2"}) {
		t.Errorf("after an apply without --prune: %v, %v", fleet.Names(again), err)
	}
	// Back in the inventory: not removed.
	if back, err := Removed(big, dir); err != nil || len(back) != 0 {
		t.Errorf("all back: %v, %v", back, err)
	}
	if data, _ := os.ReadFile(dir.HostsRecord()); !strings.HasPrefix(string(data), "# The hosts kforge apply") {
		t.Errorf("record:\n%s", data)
	}
}

// TestResetIncludesRemovedHosts: reset undoes apply on hosts that left the inventory but were
// never pruned, too.
func TestResetIncludesRemovedHosts(t *testing.T) {
	c := cluster(t, "workers:\n  - {name: w1, address: 10.0.0.2}\n")
	gone := inventory.Node{Host: inventory.Host{Name: "w9", Address: "10.0.0.9"}, Role: inventory.RoleWorker}
	for _, s := range NewReset(c, Options{Removed: []inventory.Node{gone}}).Steps() {
		if s.Task.Scope == OnHosts && !slices.Equal(s.Task.Hosts, []string{"m1", "w1", "w9"}) {
			t.Errorf("%s runs on %v, want m1, w1, w9", s.Task.Name, s.Task.Hosts)
		}
	}
}

// fakeBundleDir is a directory that passes the inventory's bundle check (it holds a manifest).
func fakeBundleDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestUpstreamResolv: CoreDNS's pod template follows the contents of the resolv.conf files the
// nodes' kubelets give pods: a node added with the same file changes nothing, a changed file
// changes it; each host's file is the one its kubelet uses (the inventory's, systemd-resolved's
// upstream, or /etc/resolv.conf).
func TestUpstreamResolv(t *testing.T) {
	c := cluster(t, "")
	host := func(files map[string]string, resolved bool) *facts.Facts {
		return &facts.Facts{Files: files, Resolver: facts.Resolver{Resolved: resolved}}
	}
	etc := map[string]string{hostpath.ResolvConf: "aa"}
	one := upstreamResolv(c, map[string]*facts.Facts{"m1": host(etc, false)})
	if one == "" {
		t.Fatal("no upstream for a host's /etc/resolv.conf")
	}
	if two := upstreamResolv(c, map[string]*facts.Facts{"m1": host(etc, false), "w1": host(etc, false), "gone": nil}); two != one {
		t.Errorf("a node with the same file changed it: %s, then %s", one, two)
	}
	if changed := upstreamResolv(c, map[string]*facts.Facts{"m1": host(map[string]string{hostpath.ResolvConf: "bb"}, false)}); changed == one {
		t.Error("a changed file did not change it")
	}
	// systemd-resolved's upstream file, not its stub in /etc/resolv.conf.
	stub := map[string]string{hostpath.ResolvConf: "aa", facts.ResolvedUpstream: "cc"}
	if got, want := upstreamResolv(c, map[string]*facts.Facts{"m1": host(stub, true)}), upstreamResolv(c, map[string]*facts.Facts{"m1": host(map[string]string{hostpath.ResolvConf: "cc"}, false)}); got != want {
		t.Errorf("systemd-resolved's upstream: %s, want %s (its file's sum)", got, want)
	}
	c.Kubelet.ResolvConf = "/etc/kforge/resolv.conf"
	if got := upstreamResolv(c, map[string]*facts.Facts{"m1": host(stub, true)}); got != "" {
		t.Errorf("the inventory's file, not reported: %q, want none", got)
	}
}

// TestApplyListMovesEtcd: an inventory whose etcd role differs from where the last apply ran
// etcd lists the move's steps in their order around stage; one that does not, none of them.
func TestApplyListMovesEtcd(t *testing.T) {
	const group = "etcd:\n  - {name: e1, address: 10.0.0.11}\n  - {name: e2, address: 10.0.0.12}\n  - {name: e3, address: 10.0.0.13}\n"
	between := func(names []string, want ...string) []string {
		var out []string
		for _, n := range names {
			if slices.Contains(want, n) {
				out = append(out, n)
			}
		}
		return out
	}
	steps := []string{"etcd-members", "etcd-move-snapshot", "render", "join-etcd", "stage", "leave-etcd", "cluster-config"}
	for _, tc := range []struct {
		name      string
		inventory string
		from      inventory.Role
		want      []string
	}{
		{"onto an etcd group", group, inventory.RoleMaster, []string{"etcd-members", "etcd-move-snapshot", "render", "stage", "leave-etcd", "cluster-config"}},
		{"back onto the masters", "", inventory.RoleEtcd, []string{"etcd-members", "etcd-move-snapshot", "render", "join-etcd", "stage", "leave-etcd", "cluster-config"}},
		{"stays on the etcd hosts", group, inventory.RoleEtcd, []string{"etcd-members", "render", "stage", "cluster-config"}},
		{"a new cluster", "", "", []string{"etcd-members", "render", "stage", "cluster-config"}},
	} {
		got := between(taskNames(ApplyTasks(cluster(t, tc.inventory), Options{EtcdFrom: tc.from})), steps...)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
