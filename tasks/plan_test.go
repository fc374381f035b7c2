package tasks

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/state"
	"github.com/kforge/kforge/templates"
)

// TestPlanAgreesWithApply: on in-memory hosts and a fake API, plan after an apply finds no
// changes and touches nothing; after an inventory edit it shows exactly what the next apply
// then does (the kubelet flags file on every host, kubelet restarts), without key material; an
// unreachable host is shown as unknown and the rest is still shown.
func TestPlanAgreesWithApply(t *testing.T) {
	c := cluster(t, "workers:\n  - {name: w1, address: 10.0.0.2}\n")
	sim := newSimCluster(t, c)
	dir := state.At(t.TempDir())
	down := map[string]bool{}
	o := Options{
		State:   dir,
		Timeout: 5 * time.Second,
		Settle:  time.Millisecond,
		Connect: func(_ context.Context, n inventory.Node) (remote.Host, error) {
			if down[n.Name] {
				return nil, errors.New("dial tcp: connection refused")
			}
			return sim.hosts[n.Name], nil
		},
		API: func(string) (kube.Clients, error) { return sim.clients(), nil },
	}
	runApply(t, NewApply(c, o))
	sim.settle()

	// writes are the resources plan may write to here: the fake API has no server-side dry run,
	// so plan's dry-run update of an object reaches it.
	plan := func(c *inventory.Cluster, writes ...string) Diff {
		t.Helper()
		p := NewPlan(c, o)
		defer p.Close()
		uploads, ran := map[string]int{}, map[string]int{}
		for name, h := range sim.hosts {
			uploads[name], ran[name] = len(h.Uploads()), len(h.executed())
		}
		actions := len(sim.api.Actions())
		if _, err := Run(context.Background(), p.Steps(), func(progress.Event) {}, time.Now); err != nil {
			t.Fatalf("plan: %v", err)
		}
		for name, h := range sim.hosts {
			if len(h.Uploads()) != uploads[name] {
				t.Errorf("plan uploaded to %s: %v", name, h.Uploads()[uploads[name]:])
			}
			for _, cmd := range h.executed()[ran[name]:] {
				if !strings.HasPrefix(cmd, "cat ") && !strings.HasPrefix(cmd, "systemctl is-") {
					t.Errorf("plan ran %q on %s", cmd, name)
				}
			}
		}
		for _, a := range sim.api.Actions()[actions:] {
			if v := a.GetVerb(); v != "get" && v != "list" && !slices.Contains(writes, a.GetResource().Resource) {
				t.Errorf("plan wrote to the API: %s %s", v, a.GetResource().Resource)
			}
		}
		return p.Diff
	}

	if d := plan(c); d.Changes() != 0 || !d.Complete() {
		t.Errorf("plan after apply: %d changes, complete %v: %+v", d.Changes(), d.Complete(), d)
	}

	edited := cluster(t, "workers:\n  - {name: w1, address: 10.0.0.2}\nkubelet: {extraArgs: {v: \"4\"}}\n")
	d := plan(edited)
	var hosts []string
	for _, h := range d.Hosts {
		hosts = append(hosts, h.Host)
		var paths []string
		for _, f := range h.Files {
			paths = append(paths, f.Path)
			if f.Path == hostpath.KubeletFlagsEnvPath && (f.Action != "change" || !strings.Contains(f.Diff, "--v=4")) {
				t.Errorf("%s: %s: %s\n%s", h.Host, f.Path, f.Action, f.Diff)
			}
		}
		if !slices.Equal(paths, []string{hostpath.KubeletFlagsEnvPath}) || !slices.Equal(h.Restarts, []string{"kubelet restarts"}) {
			t.Errorf("%s: files %v, restarts %v; want the kubelet flags file and a kubelet restart", h.Host, paths, h.Restarts)
		}
	}
	if !slices.Equal(hosts, []string{"m1", "w1"}) || len(d.Certificates) != 0 || d.Changes() != 2 {
		t.Errorf("plan after the edit: hosts %v, %+v", hosts, d)
	}
	ev := runApply(t, NewApply(edited, o))
	restarted := 0
	for _, e := range ev {
		if e.Kind == progress.HostDone && strings.Contains(e.Message, "kubelet restarted") {
			restarted++
		}
	}
	if restarted != 2 {
		t.Errorf("apply after the edit restarted kubelet on %d hosts, plan said 2", restarted)
	}
	sim.settle()

	// A new SAN: the master's serving certificate alone; kube-apiserver reloads it, so no
	// static pod restarts, and apply waits until the master serves it.
	sans := cluster(t, "workers:\n  - {name: w1, address: 10.0.0.2}\nkubelet: {extraArgs: {v: \"4\"}}\npki: {apiServerCertSANs: [api.example.com]}\n")
	d = plan(sans, "configmaps") // kubeadm-config's certSANs
	if len(d.Hosts) != 1 || d.Hosts[0].Host != "m1" || len(d.Hosts[0].Files) != 2 || len(d.Hosts[0].Restarts) != 0 || len(d.Certificates) != 1 {
		t.Errorf("plan of a new SAN: %+v", d)
	}
	served := false
	for _, e := range runApply(t, NewApply(sans, o)) {
		served = served || strings.Contains(e.Message, "serving certificates are served, without a restart, on m1 (kube-apiserver)")
	}
	crt, _ := sim.hosts["m1"].File(hostpath.PKIDir + "/apiserver.crt")
	certs, err := pki.ParseCerts(crt.Data)
	if !served || err != nil || !slices.Contains(certs[0].DNSNames, "api.example.com") {
		t.Errorf("apply of a new SAN: waited for it to be served %v; %v", served, err)
	}
	if why := serves(context.Background(), sim.hosts["m1"], "10.0.0.1:6443", certs[0].Raw); why != "" {
		t.Errorf("m1 does not serve the new certificate: %s", why)
	}
	sim.settle()

	down["w1"] = true
	d = plan(sans)
	if d.Unreachable["w1"] == "" || d.Complete() || d.Changes() != 0 {
		t.Errorf("plan with w1 down: %+v", d)
	}
}

// TestFileDiffNeverShowsKeys: a kubeconfig's key and a registry password become tags (the same
// value the same tag, another value another tag), a private key is never shown, and a
// certificate is described, not dumped.
func TestFileDiffNeverShowsKeys(t *testing.T) {
	r := newRedactor(strings.NewReader(strings.Repeat("k", 32)))
	old := "users:\n- name: a\n  user:\n    client-key-data: SECRETOLD\n    token: abc.def\nserver: https://10.0.0.1:6443\n"
	neu := "users:\n- name: a\n  user:\n    client-key-data: SECRETNEW\n    token: abc.def\nserver: https://10.0.0.9:6443\n"
	diff, note := r.fileDiff("/etc/kubernetes/admin.conf", []byte(old), []byte(neu), false)
	if note != "" || strings.Contains(diff, "SECRET") || strings.Contains(diff, "abc.def") {
		t.Errorf("diff shows a secret (note %q):\n%s", note, diff)
	}
	for _, want := range []string{"-    client-key-data: <secret ", "+    client-key-data: <secret ", "-server: https://10.0.0.1:6443", "+server: https://10.0.0.9:6443", "     token: <secret "} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, diff)
		}
	}
	if r.tag("SECRETOLD") == r.tag("SECRETNEW") || r.tag("x") != r.tag("x") {
		t.Error("tags do not tell values apart")
	}
	if diff, note := r.fileDiff("/etc/kubernetes/pki/ca.key", []byte("-----BEGIN EC PRIVATE KEY-----"), []byte("-----BEGIN EC PRIVATE KEY-----x"), false); diff != "" || !strings.Contains(note, "not shown") {
		t.Errorf("private key: %q %q", diff, note)
	}
	// The API servers' encryption configuration during a key rotation: its keys are tags.
	oldKeys := &pki.EncryptionKeys{Keys: []pki.EncryptionKey{{Name: "k1", Secret: []byte(strings.Repeat("a", 32))}}}
	newKeys := &pki.EncryptionKeys{Keys: []pki.EncryptionKey{{Name: "k1", Secret: []byte(strings.Repeat("a", 32))}, {Name: "k2", Secret: []byte(strings.Repeat("b", 32))}}}
	encOld, err := templates.EncryptionConfig("secretbox", oldKeys)
	if err != nil {
		t.Fatal(err)
	}
	encNew, _ := templates.EncryptionConfig("secretbox", newKeys)
	diff, _ = r.fileDiff(hostpath.EncryptionConfig, encOld, encNew, false)
	if strings.Contains(diff, newKeys.Keys[0].Base64()) || strings.Contains(diff, newKeys.Keys[1].Base64()) || !strings.Contains(diff, "+      - name: k2") || !strings.Contains(diff, "secret: <secret ") {
		t.Errorf("encryption configuration:\n%s", diff)
	}
	toml := "[host.\"https://r\"]\n  [host.\"https://r\".header]\n    Authorization = \"Basic dTpw\"\n"
	if diff, _ := r.fileDiff("/etc/containerd/certs.d/r/hosts.toml", []byte(toml), []byte(strings.ReplaceAll(toml, "dTpw", "dTpx")), false); strings.Contains(diff, "dTp") || !strings.Contains(diff, "Authorization = <secret ") {
		t.Errorf("registry credentials:\n%s", diff)
	}
}
