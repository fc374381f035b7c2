package etcd

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/etcd/snapshotfile"
	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/release"
)

// etcdBinary returns etcd as the bundle package builds it (cached after the first build).
func etcdBinary(t testing.TB) string {
	t.Helper()
	var missing error
	if _, err := exec.LookPath("go"); err != nil {
		missing = fmt.Errorf("the go command is not on PATH (it builds etcd): %w", err)
	}
	testenv.Require(t, missing)
	dir, err := bundle.EtcdBinaries(context.Background(), bundle.BuildOptions{Version: release.Default(), Report: testenv.Report(t)})
	if err != nil {
		t.Fatalf("etcd binaries: %v", err)
	}
	return filepath.Join(dir, "etcd")
}

type testLog struct{ t testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// testPKI is kforge's PKI for masters m1 and m2 on 127.0.0.1, made by package pki.
func testPKI(t testing.TB) *pki.Set {
	t.Helper()
	return testPKIFor(t, "m1", "m2")
}

// testPKIFor is a cluster PKI whose masters are named names (on 198.51.100.10 on).
func testPKIFor(t testing.TB, names ...string) *pki.Set {
	t.Helper()
	var masters []inventory.Host
	for i, n := range names {
		masters = append(masters, inventory.Host{Name: n, Address: fmt.Sprintf("198.51.100.%d", 10+i)})
	}
	c := &inventory.Cluster{
		APIVersion: inventory.APIVersion, Kind: inventory.Kind, Name: "etcd-it",
		KubernetesVersion: release.Default(),
		Networking:        inventory.Networking{PodSubnet: "10.244.0.0/16", ServiceSubnet: "10.96.0.0/12", DNSDomain: "cluster.local"},
		PKI:               inventory.PKI{KeyAlgorithm: "ecdsa-p256", CertValidity: inventory.DefaultCertValidity, CAValidity: inventory.DefaultCAValidity},
		Masters:           masters,
	}
	set, _, err := pki.EnsureCluster(c, "", t.TempDir(), time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// member is a running etcd, killed by PID when the test ends.
type member struct {
	name, clientAddr, peerURL string
	*testenv.Process
}

func (m *member) exited() bool {
	select {
	case <-m.Done:
		return true
	default:
		return false
	}
}

// startMember starts etcd member name with client TLS (client certificates required) and peer
// TLS on loopback, as kforge's static pod runs it. cluster is the --initial-cluster list
// without this member; empty starts a new one-member cluster.
func startMember(t testing.TB, bin string, set *pki.Set, name, peerURL string, cluster []string) *member {
	t.Helper()
	state := "new"
	if len(cluster) > 0 {
		state = "existing"
	}
	return runMember(t, bin, set, name, peerURL, append(cluster, name+"="+peerURL), state)
}

// startNewMember starts member name of a new cluster of several members (initial: each
// name=peerURL, this one's included); the cluster forms once a quorum of them runs.
func startNewMember(t testing.TB, bin string, set *pki.Set, name, peerURL string, initial []string) *member {
	t.Helper()
	return runMember(t, bin, set, name, peerURL, initial, "new")
}

func runMember(t testing.TB, bin string, set *pki.Set, name, peerURL string, initial []string, state string) *member {
	t.Helper()
	dir := t.TempDir()
	ca, _ := testenv.WritePair(t, dir, "ca", set.CAs[pki.EtcdCA])
	srvCrt, srvKey := testenv.WritePair(t, dir, "server", set.Get("etcd-server", name))
	peerCrt, peerKey := testenv.WritePair(t, dir, "peer", set.Get("etcd-peer", name))
	m := &member{name: name, clientAddr: "127.0.0.1:" + fmt.Sprint(testenv.FreePort(t)), peerURL: peerURL}
	clientURL := "https://" + m.clientAddr
	m.Process = testenv.Start(t, bin,
		"--name="+name, "--data-dir="+filepath.Join(dir, "data"),
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster="+strings.Join(initial, ","), "--initial-cluster-state="+state,
		"--listen-metrics-urls=http://127.0.0.1:"+fmt.Sprint(testenv.FreePort(t)),
		"--cert-file="+srvCrt, "--key-file="+srvKey, "--trusted-ca-file="+ca, "--client-cert-auth=true",
		"--peer-cert-file="+peerCrt, "--peer-key-file="+peerKey, "--peer-trusted-ca-file="+ca, "--peer-client-cert-auth=true",
		"--log-level=warn",
	)
	return m
}

// clientConfig is the configuration kforge uses: the etcd CA and apiserver-etcd-client.
func clientConfig(set *pki.Set, host, endpoint string, d Dialer) Config {
	kp := set.Get("apiserver-etcd-client", "")
	return Config{Host: host, Endpoint: endpoint, Dialer: d, CA: set.CAs[pki.EtcdCA].Cert, Cert: kp.Cert, Key: kp.Key}
}

// connect retries New until the member answers (it is starting).
func connect(ctx context.Context, t testing.TB, m *member, c Config) *Client {
	t.Helper()
	for {
		cl, err := New(ctx, c)
		if err == nil {
			t.Cleanup(func() { cl.Close() })
			return cl
		}
		if m.exited() || ctx.Err() != nil {
			t.Fatalf("etcd %s does not answer: %v", m.name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestRealEtcd drives real etcd members, through a dialer that counts its dials: the member
// list and status, a snapshot, adding a member that a second real etcd then starts as, adding
// one more while etcd still calls the cluster unhealthy, removing members, and the errors of a
// wrong CA and of a refused client certificate.
func TestRealEtcd(t *testing.T) {
	bin := etcdBinary(t)
	set := testPKI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	peer1 := "https://127.0.0.1:" + fmt.Sprint(testenv.FreePort(t))
	m1 := startMember(t, bin, set, "m1", peer1, nil)
	dialer := &countingDialer{}
	c := connect(ctx, t, m1, clientConfig(set, "m1", m1.clientAddr, dialer))

	members, err := c.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 1 || members[0].Name != "m1" || len(members[0].PeerURLs) != 1 || members[0].PeerURLs[0] != peer1 ||
		len(members[0].ClientURLs) != 1 || members[0].ClientURLs[0] != "https://"+m1.clientAddr {
		t.Fatalf("members: %+v; want m1 with peer URL %s and client URL https://%s", members, peer1, m1.clientAddr)
	}
	before, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if before.MemberID != members[0].ID || before.Leader != members[0].ID || before.DBSize <= 0 || before.RaftIndex == 0 ||
		!strings.HasPrefix(before.Version, "3.6.") {
		t.Errorf("status %+v; want member and leader %x, a database, a raft index, version 3.6.x", before, members[0].ID)
	}

	t.Run("snapshot", func(t *testing.T) {
		var buf bytes.Buffer
		n, err := c.Snapshot(ctx, &buf)
		if err != nil {
			t.Fatal(err)
		}
		after, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b := buf.Bytes()
		if n != int64(len(b)) || n < 4096+sha256.Size {
			t.Fatalf("snapshot: returned %d, wrote %d bytes", n, len(b))
		}
		db, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
		// A bbolt file starts with a meta page: 16-byte page header, then the magic.
		if magic := binary.LittleEndian.Uint32(db[16:20]); magic != 0xED0CDAED {
			t.Errorf("snapshot does not start with a bbolt meta page (magic %#x)", magic)
		}
		if got := sha256.Sum256(db); !bytes.Equal(got[:], sum) {
			t.Errorf("snapshot's trailing sha256 does not match its database")
		}
		if size := int64(len(db)); size != before.DBSize && size != after.DBSize {
			t.Errorf("snapshot database is %d bytes; etcd's status says %d (before) and %d (after)", size, before.DBSize, after.DBSize)
		}
	})

	t.Run("unprefixed values", func(t *testing.T) {
		// 250 keys (three pages), every seventh without the prefix; a key beside the range.
		var want []string
		for i := range 250 {
			v := "k8s:enc:secretbox:v1:new:" + fmt.Sprint(i)
			k := fmt.Sprintf("/registry/secrets/ns/s%03d", i)
			if i%7 == 0 {
				v = "k8s:enc:secretbox:v1:old:" + fmt.Sprint(i)
				want = append(want, k)
			}
			if _, err := c.cli.Put(ctx, k, v); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.cli.Put(ctx, "/registry/secretsx", "plain"); err != nil {
			t.Fatal(err)
		}
		total, got, err := c.Unprefixed(ctx, "/registry/secrets/", []byte("k8s:enc:secretbox:v1:new:"))
		if err != nil || total != 250 || !slices.Equal(got, want) {
			t.Errorf("Unprefixed: %d keys, %d without the prefix (want 250 and %d), %v", total, len(got), len(want), err)
		}
	})

	t.Run("verify a snapshot file", func(t *testing.T) {
		const keys = 50
		var last int64
		for i := range keys {
			resp, err := c.cli.Put(ctx, fmt.Sprintf("/kforge-test/k%03d", i), strings.Repeat("v", 100))
			if err != nil {
				t.Fatal(err)
			}
			last = resp.Header.Revision
		}
		dir := t.TempDir()
		path := filepath.Join(dir, "snap.db")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		n, err := c.Snapshot(ctx, f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		info, err := snapshotfile.Verify(path)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(data); info.Size != n || info.SHA256 != hex.EncodeToString(sum[:]) || info.Revision < last || info.TotalKeys < keys {
			t.Fatalf("VerifySnapshot = %+v; want %d bytes, sha256 %x, revision >= %d, >= %d keys", info, n, sum, last, keys)
		}
		t.Logf("snapshot: %+v", info)

		// One flipped byte in the database, a truncated copy, and a file that is no snapshot are
		// all refused, each saying why.
		for _, bad := range []struct {
			name string
			data []byte
			want string
		}{
			{"flipped", flip(data, len(data)/2), "the database's sha256 is"},
			{"truncated", data[:len(data)-100], "not a database followed by its sha256"},
			{"cut by a page", data[:len(data)-512], "the database's sha256 is"},
			{"text", []byte("not a snapshot\n"), "not a database followed by its sha256"},
		} {
			p := filepath.Join(dir, bad.name+".db")
			if err := os.WriteFile(p, bad.data, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := snapshotfile.Verify(p)
			var se *snapshotfile.Error
			if !errors.As(err, &se) || !errors.Is(err, snapshotfile.ErrRefused) || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("%s snapshot: %v; want a *snapshotfile.Error naming the file and saying %q", bad.name, err, bad.want)
			}
		}
	})

	t.Run("remove absent", func(t *testing.T) {
		removed, err := c.Remove(ctx, "m9", "https://127.0.0.1:1")
		if err != nil || removed {
			t.Fatalf("Remove of an absent member = %v, %v; want false, nil", removed, err)
		}
	})

	t.Run("wait for a member that is not there", func(t *testing.T) {
		err := c.WaitStarted(ctx, "m9", "https://127.0.0.1:1")
		var e *Error
		if !errors.As(err, &e) || e.Host != "m1" || !strings.Contains(err.Error(), "no member with peer URL https://127.0.0.1:1 (members: m1 (") {
			t.Fatalf("WaitStarted for an absent member: %v; want an *Error naming m1, the peer URL and the members", err)
		}
		t.Log(err)
	})

	// m2 joins as kforge joins a master: add its member, start it with state existing, wait.
	peer2 := "https://127.0.0.1:" + fmt.Sprint(testenv.FreePort(t))
	t.Run("add and start a member", func(t *testing.T) {
		if err := c.Add(ctx, peer2); err != nil {
			t.Fatal(err)
		}
		// The cluster has no quorum now (one of two members runs): the member list still
		// answers, and adding again is success.
		if err := c.Add(ctx, peer2); err != nil {
			t.Fatalf("adding the same peer URL again: %v", err)
		}
		members, err := c.Members(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m, ok := find(members, "", peer2); len(members) != 2 || !ok || m.Name != "" {
			t.Fatalf("members after Add: %v; want m1 and an unstarted member with %s", members, peer2)
		}
		short, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancel()
		err = c.WaitStarted(short, "m2", peer2)
		if err == nil || !strings.Contains(err.Error(), "last seen: member unstarted (") {
			t.Fatalf("WaitStarted before m2 runs: %v; want it to say the member is listed but not started", err)
		}
		t.Log(err)

		m2 := startMember(t, bin, set, "m2", peer2, []string{"m1=" + peer1})
		if err := c.WaitStarted(ctx, "m2", peer2); err != nil {
			t.Fatal(err)
		}

		// etcd refuses a new member until every member has been connected for 5 seconds: m2
		// has just joined, so Add must wait that out.
		peer3 := "https://127.0.0.1:" + fmt.Sprint(testenv.FreePort(t))
		start := time.Now()
		if err := c.Add(ctx, peer3); err != nil {
			t.Fatal(err)
		}
		t.Logf("added a third member %s after %s", peer3, time.Since(start).Round(time.Millisecond))
		members, err = c.Members(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(members) != 3 {
			t.Fatalf("members: %v; want m1, m2 and an unstarted one", members)
		}
		// Removing the unstarted member by its peer URL, then m2 by name.
		if removed, err := c.Remove(ctx, "", peer3); err != nil || !removed {
			t.Fatalf("Remove of the unstarted member = %v, %v; want true, nil", removed, err)
		}
		// m1 leads (it was alone): it hands its leadership to m2; asked again, it leads no more.
		if moved, err := c.HandOver(ctx, peer2); err != nil || !moved {
			t.Fatalf("HandOver from the leader m1 to m2 = %v, %v; want true, nil", moved, err)
		}
		s, err := c.Status(ctx)
		if m, _ := find(members, "m2", ""); err != nil || s.Leader != m.ID {
			t.Fatalf("after HandOver: status %+v, %v; want m2 (%x) the leader", s, err, m.ID)
		}
		if moved, err := c.HandOver(ctx, peer2); err != nil || moved {
			t.Fatalf("HandOver from m1, which no longer leads = %v, %v; want false, nil", moved, err)
		}
		if removed, err := c.Remove(ctx, "m2", ""); err != nil || !removed {
			t.Fatalf("Remove of m2 = %v, %v; want true, nil", removed, err)
		}
		members, err = c.Members(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(members) != 1 || members[0].Name != "m1" {
			t.Fatalf("members after removals: %v; want m1 alone", members)
		}
		if removed, err := c.Remove(ctx, "m2", peer2); err != nil || removed {
			t.Fatalf("Remove of m2 again = %v, %v; want false, nil", removed, err)
		}
		// A removed member stops by itself.
		select {
		case <-m2.Done:
		case <-time.After(30 * time.Second):
			t.Errorf("etcd m2 still runs 30s after its removal")
		}
	})

	t.Run("wrong CA", func(t *testing.T) {
		other := testPKI(t)
		cfg := clientConfig(set, "m1", m1.clientAddr, nil)
		cfg.CA = other.CAs[pki.EtcdCA].Cert
		_, err := New(ctx, cfg)
		var e *Error
		if !errors.As(err, &e) || e.Host != "m1" || !strings.Contains(e.Seen, "not signed by the etcd CA kforge holds") {
			t.Fatalf("New with another etcd CA: %v; want an *Error naming m1 and the CA", err)
		}
		t.Log(err)
	})

	t.Run("client certificate of another CA", func(t *testing.T) {
		other := testPKI(t)
		cfg := clientConfig(other, "m1", m1.clientAddr, nil)
		cfg.CA = set.CAs[pki.EtcdCA].Cert
		_, err := New(ctx, cfg)
		var e *Error
		if !errors.As(err, &e) || e.Host != "m1" || !strings.Contains(e.Seen, "etcd refused kforge's client certificate") {
			t.Fatalf("New with a client certificate etcd does not trust: %v; want an *Error naming m1 and the refusal", err)
		}
		t.Log(err)
	})

	// raft abandons a leadership transfer whose transferee has not caught up within an election
	// timeout, and etcd's MoveLeader then waits for its context without asking again (a9eb524's
	// CI: the hand-over above waited out the test's deadline on a loaded machine). Here the
	// transferee is stopped and falls behind a write: the first attempt is abandoned, and
	// HandOver must ask again once it runs.
	t.Run("hand over to a member that fell behind", func(t *testing.T) {
		// Three members of a cluster of their own: the leader keeps its quorum while the
		// transferee is stopped.
		set := testPKIFor(t, "x1", "x2", "x3")
		var cluster []string
		peers := map[string]string{}
		for _, n := range []string{"x1", "x2", "x3"} {
			peers[n] = "https://127.0.0.1:" + fmt.Sprint(testenv.FreePort(t))
			cluster = append(cluster, n+"="+peers[n])
		}
		ms := map[string]*member{}
		for _, n := range []string{"x1", "x2", "x3"} {
			ms[n] = startNewMember(t, bin, set, n, peers[n], cluster)
		}
		x1 := connect(ctx, t, ms["x1"], clientConfig(set, "x1", ms["x1"].clientAddr, nil))
		var s Status
		for s.Leader == 0 {
			var err error
			if s, err = x1.Status(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		members, err := x1.Members(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var leader, to Member
		for _, m := range members {
			switch {
			case m.ID == s.Leader:
				leader = m
			case to.ID == 0:
				to = m
			}
		}
		lc := connect(ctx, t, ms[leader.Name], clientConfig(set, leader.Name, ms[leader.Name].clientAddr, nil))
		behind := ms[to.Name]
		if err := behind.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		resumed := false
		resume := func() {
			if !resumed {
				resumed = true
				behind.Cmd.Process.Signal(syscall.SIGCONT)
			}
		}
		t.Cleanup(resume)
		if _, err := lc.cli.Put(ctx, "/kforge-test/behind", to.Name+" misses this"); err != nil { // the other two are a quorum
			t.Fatal(err)
		}
		start := time.Now()
		type result struct {
			moved bool
			err   error
		}
		done := make(chan result, 1)
		go func() {
			moved, err := lc.HandOver(ctx, to.PeerURLs[0])
			done <- result{moved, err}
		}()
		time.Sleep(3 * time.Second) // raft gives the transfer up after an election timeout (1 s)
		resume()
		r := <-done
		took := time.Since(start)
		s, err = lc.Status(ctx)
		if r.err != nil || !r.moved || err != nil || s.Leader != to.ID {
			t.Fatalf("HandOver from %s to %s, stopped 3 s and behind = %v, %v after %s; status %+v, %v; want true, nil and %s (%x) the leader",
				leader.Name, to.Name, r.moved, r.err, took.Round(100*time.Millisecond), s, err, to.Name, to.ID)
		}
		if took < transferAttempt {
			t.Errorf("HandOver took %s; want at least one abandoned attempt (%s) before the one that moved leadership", took.Round(100*time.Millisecond), transferAttempt)
		}
		t.Logf("leadership handed over from %s to %s after %s (the first attempt abandoned while %s was stopped)", leader.Name, to.Name, took.Round(100*time.Millisecond), to.Name)
	})

	if n, addrs := dialer.dials(); n == 0 {
		t.Errorf("the dialer was never used")
	} else {
		for _, a := range addrs {
			if a != m1.clientAddr {
				t.Errorf("the dialer was asked for %s; only %s was given", a, m1.clientAddr)
			}
		}
		t.Logf("%d dials through the dialer, all to %s", n, m1.clientAddr)
	}
}

// flip returns a copy of data with the byte at i inverted.
func flip(data []byte, i int) []byte {
	out := bytes.Clone(data)
	out[i] ^= 0xff
	return out
}
