package bundle

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/remote"
)

// TestShipBundleToLabHosts ships the built bundle over SSH to two lab hosts (a control-plane
// host and a worker, each a systemd host with its own containerd 1.6.20): binaries land with
// their sha256, every image the host needs is in containerd's k8s.io namespace under its name
// and digest, the worker gets no control-plane image, and a second run uploads nothing.
func TestShipBundleToLabHosts(t *testing.T) {
	dir, m := builtBundle(t)
	why := ""
	if err := lab.Prerequisites(); err != nil {
		why = err.Error()
	}
	testenv.Require(t, testenv.Missing(why))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	l, err := lab.Up(ctx, lab.Options{Name: "kfbundle", Hosts: 2, Masters: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Down(context.Background()); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	var targets []Target
	for i, h := range l.Hosts {
		// containerd starts with the host; wait for its socket.
		deadline := time.Now().Add(60 * time.Second)
		for {
			_, err := l.Exec(ctx, h.Name, "ctr", "version")
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("containerd on %s not answering: %v", h.Name, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
		s, err := remote.Dial(ctx, remote.Config{
			Name: h.Name, Address: h.Address, Port: h.Port, User: "root",
			IdentityFile: l.IdentityFile, KnownHostsFile: l.KnownHostsFile, DialRetry: 30 * time.Second,
		}, remote.Options{SSHConfigFile: "none"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		// The master as a node of a cluster that serves local volumes, the worker of one that
		// does not.
		targets = append(targets, Target{Host: s, Need: Need{ControlPlane: i == 0, LocalVolumes: i == 0}})
	}

	var mu sync.Mutex
	reports := map[string]int{}
	progress := func(host, artifact string, sent, total int64) {
		mu.Lock()
		reports[host]++
		mu.Unlock()
	}
	start := time.Now()
	plans, err := ShipAll(ctx, dir, m, targets, remote.Limits{Hosts: 2, LargeUploads: 2}, progress)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first ship to %d hosts: %s", len(targets), time.Since(start).Round(time.Millisecond))
	master, worker := l.Hosts[0].Name, l.Hosts[1].Name
	// The hosts run their own containerd: the bundle's runtime is not shipped; nor is the API
	// proxy, which only nodes of a cluster without a controlPlaneEndpoint get, nor the virtual
	// IP runner, which only masters of a cluster with a controlPlaneVIP get, nor the scheduled
	// snapshots' program, which only masters of a cluster that takes them get.
	files := 0
	for _, f := range m.Files {
		if !IsRuntime(f.Name) && f.Name != APIProxyFile && f.Name != VIPFile && f.Name != EtcdSnapshotFile {
			files++
		}
	}
	if p := plans[master]; len(p.Install) != files || len(p.Import) != len(m.Images) {
		t.Errorf("master plan: %d files, %d images; want %d and %d", len(p.Install), len(p.Import), files, len(m.Images))
	}
	for _, im := range plans[worker].Import {
		if im.ControlPlaneOnly || isLocalVolumes(im.Component) {
			t.Errorf("worker got image %s, of the control plane or the local volumes", im.Name)
		}
	}
	if reports[master] == 0 || reports[worker] == 0 {
		t.Errorf("no progress reported: %v", reports)
	}

	// Check on the hosts themselves, not through the code under test.
	for i, h := range l.Hosts {
		out, err := l.Exec(ctx, h.Name, "ctr", "-n", "k8s.io", "images", "ls")
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseImageList(string(out))
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range m.Images {
			want := im.Digest
			if (im.ControlPlaneOnly || isLocalVolumes(im.Component)) && i > 0 {
				want = ""
			}
			if got[im.Name] != want {
				t.Errorf("%s: containerd has %s at %q, want %q", h.Name, im.Name, got[im.Name], want)
			}
			// Pinned: kubelet's image garbage collection must leave it (the host cannot pull it).
			for _, l := range strings.Split(string(out), "\n") {
				if want != "" && strings.HasPrefix(l, im.Name+" ") && !strings.Contains(l, PinLabel) {
					t.Errorf("%s: %s is not labelled %s: %s", h.Name, im.Name, PinLabel, l)
				}
			}
		}
		out, err = l.Exec(ctx, h.Name, "/usr/bin/kubelet", "--version")
		if err != nil || !strings.Contains(string(out), "v1.36.3") {
			t.Errorf("%s: installed kubelet --version: %v %q", h.Name, err, out)
		}
		out, err = l.Exec(ctx, h.Name, "sh", "-c", "ls -A "+StagingDir+" 2>/dev/null | wc -l")
		if err != nil || strings.TrimSpace(string(out)) != "0" {
			t.Errorf("%s: staged archives left in %s: %v %q", h.Name, StagingDir, err, out)
		}
	}

	// Second run: nothing differs, nothing is uploaded or imported.
	start = time.Now()
	plans, err = ShipAll(ctx, dir, m, targets, remote.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second ship: %s", time.Since(start).Round(time.Millisecond))
	for host, p := range plans {
		if !p.Empty() {
			t.Errorf("%s: second run would upload %d bytes: %+v", host, p.Bytes(), p)
		}
	}
}
