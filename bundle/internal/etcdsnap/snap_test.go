package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/etcd/snapshotfile"
	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/release"
	"github.com/kforge/kforge/state"
)

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// Prune keeps the newest recorded snapshots and removes the rest, records first, with what
// interrupted runs left: a snapshot without a record, a hidden part file.
func TestPruneKeepsTheNewest(t *testing.T) {
	dir := t.TempDir()
	base := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	for i := range 4 {
		n := Name(base.Add(time.Duration(i) * time.Hour))
		for _, ext := range []string{".db", ".json"} {
			if err := os.WriteFile(filepath.Join(dir, n+ext), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	orphan, part := Name(base.Add(5*time.Hour))+".db", "."+Name(base.Add(6*time.Hour))+".db.part"
	for _, f := range []string{orphan, part} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	gone, err := Prune(dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"etcd-20261128-050000.000.db", "etcd-20261128-050000.000.json", "etcd-20261128-060000.000.db", "etcd-20261128-060000.000.json"}
	if got := names(t, dir); !slices.Equal(got, want) {
		t.Errorf("left %q; want %q", got, want)
	}
	if len(gone) != 6 || gone[0] != "etcd-20261128-030000.000.json" || gone[1] != "etcd-20261128-030000.000.db" {
		t.Errorf("deleted %q; want the two oldest snapshots, each record before its file, then %s and %s", gone, orphan, part)
	}
}

type fakeSource struct {
	status error
	data   string
}

func (f fakeSource) Status(context.Context) (string, error) { return "3.6.5", f.status }
func (f fakeSource) Snapshot(context.Context) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(f.data)), nil
}

// A member without a leader is not snapshotted, and a stream that does not verify leaves no
// file: a snapshot under its final name is always whole.
func TestTakeRefusesAndLeavesNothing(t *testing.T) {
	c := Config{Member: "m1", Keep: 2}
	dir := t.TempDir()
	noLeader := errors.New("etcd at https://127.0.0.1:2379 has no leader")
	if _, err := Take(context.Background(), fakeSource{status: noLeader}, dir, c, time.Now()); !errors.Is(err, noLeader) {
		t.Errorf("Take of a member without a leader: %v; want its status's error", err)
	}
	_, err := Take(context.Background(), fakeSource{data: strings.Repeat("x", 512+32)}, dir, c, time.Now())
	if !errors.Is(err, snapshotfile.ErrRefused) {
		t.Errorf("Take of a stream that is no snapshot: %v; want it refused by the verification", err)
	}
	if got := names(t, dir); len(got) != 0 {
		t.Errorf("after two refused runs the directory holds %q; want nothing", got)
	}
}

// The program against a real etcd member with client TLS, as on a master: three runs keep
// two snapshots, each verifying, each record in the state dir's format with the revision the
// member had, the database file 0600.
func TestRealEtcdMember(t *testing.T) {
	testenv.Integration(t)
	bins, err := bundle.EtcdBinaries(context.Background(), bundle.BuildOptions{Version: release.Default(), Report: testenv.Report(t)})
	if err != nil {
		t.Fatal(err)
	}
	c := &inventory.Cluster{
		APIVersion: inventory.APIVersion, Kind: inventory.Kind, Name: "snap-it", KubernetesVersion: release.Default(),
		Networking: inventory.Networking{PodSubnet: "10.244.0.0/16", ServiceSubnet: "10.96.0.0/12", DNSDomain: "cluster.local"},
		PKI:        inventory.PKI{KeyAlgorithm: "ecdsa-p256", CertValidity: inventory.DefaultCertValidity, CAValidity: inventory.DefaultCAValidity},
		Masters:    []inventory.Host{{Name: "m1", Address: "198.51.100.10"}},
	}
	set, _, err := pki.EnsureCluster(c, "", t.TempDir(), time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tls := t.TempDir()
	ca, _ := testenv.WritePair(t, tls, "ca", set.CAs[pki.EtcdCA])
	srvCrt, srvKey := testenv.WritePair(t, tls, "server", set.Get("etcd-server", "m1"))
	cliCrt, cliKey := testenv.WritePair(t, tls, "client", set.Get("apiserver-etcd-client", ""))
	client := "https://127.0.0.1:" + fmt.Sprint(testenv.FreePort(t))
	peer := "http://127.0.0.1:" + fmt.Sprint(testenv.FreePort(t))
	member := testenv.Start(t, filepath.Join(bins, "etcd"), "--name=m1", "--data-dir="+filepath.Join(t.TempDir(), "data"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer, "--initial-cluster=m1="+peer,
		"--listen-metrics-urls=http://127.0.0.1:"+fmt.Sprint(testenv.FreePort(t)),
		"--cert-file="+srvCrt, "--key-file="+srvKey, "--trusted-ca-file="+ca, "--client-cert-auth=true", "--log-level=warn")

	dir := filepath.Join(t.TempDir(), "snapshots")
	cfg := Config{Endpoint: client, CA: ca, Cert: cliCrt, Key: cliKey, Member: "m1", Kubernetes: "v" + release.Default(), Keep: 2}
	data, _ := json.Marshal(cfg)
	config := filepath.Join(t.TempDir(), "etcd-snapshot.json")
	if err := os.WriteFile(config, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src, err := dial(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var revisions []int64
	for i := range 3 {
		for { // the member is starting
			if _, err := src.Status(ctx); err == nil {
				break
			} else if ctx.Err() != nil {
				t.Fatalf("etcd does not answer: %v\n%s", err, member.Output(4096))
			}
			time.Sleep(200 * time.Millisecond)
		}
		if _, err := src.cli.Put(ctx, fmt.Sprintf("/k/%d", i), "v"); err != nil {
			t.Fatal(err)
		}
		if err := run(ctx, config, dir); err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
		time.Sleep(10 * time.Millisecond) // the names have milliseconds
		latest := latestRecord(t, dir)
		revisions = append(revisions, latest.Revision)
	}
	got := names(t, dir)
	if len(got) != 4 {
		t.Fatalf("after 3 runs keeping 2 the directory holds %q; want 2 snapshots and their records", got)
	}
	for _, n := range got {
		if !strings.HasSuffix(n, ".db") {
			continue
		}
		file := filepath.Join(dir, n)
		info, err := snapshotfile.Verify(file)
		if err != nil {
			t.Error(err)
		}
		var rec state.Snapshot
		b, err := os.ReadFile(strings.TrimSuffix(file, ".db") + ".json")
		if err == nil {
			err = json.Unmarshal(b, &rec)
		}
		if err != nil || rec.SHA256 != info.SHA256 || rec.Size != info.Size || rec.Revision != info.Revision || rec.Member != "m1" || rec.Etcd == "" || rec.Kubernetes != cfg.Kubernetes {
			t.Errorf("%s's record %+v (%v) does not match it: %+v", n, rec, err, info)
		}
		if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600", n, err, st.Mode().Perm())
		}
	}
	if !(revisions[0] < revisions[1] && revisions[1] < revisions[2]) {
		t.Errorf("the snapshots' revisions %v do not grow with the keys put between them", revisions)
	}
}

func latestRecord(t *testing.T, dir string) state.Snapshot {
	t.Helper()
	var newest string
	for _, n := range names(t, dir) {
		if strings.HasSuffix(n, ".json") && n > newest {
			newest = n
		}
	}
	var rec state.Snapshot
	b, err := os.ReadFile(filepath.Join(dir, newest))
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil {
		t.Fatal(err)
	}
	return rec
}
