package etcd

import (
	"context"
	"fmt"
	"github.com/kforge/kforge/etcd/snapshotfile"
	"github.com/kforge/kforge/progress"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/kforge/kforge/internal/testenv"
)

// BenchmarkSnapshot10kObjects: a real etcd member holding 10,000 ConfigMap-sized keys (1.5 KiB
// each, as a small ConfigMap is in etcd); Client.Snapshot streams it into a file and
// VerifySnapshot checks it, against `etcdctl snapshot save` (the scripted alternative) on the
// same member. Reported: both durations and their ratio, the snapshot's size, and the Go heap's
// peak above its level before the snapshot (sampled every 5 ms) next to the snapshot's size: the
// snapshot streams, so the peak stays a small constant whatever the database's size.
//
//	go test -run '^$' -bench Snapshot10k -benchtime 1x ./etcd
func BenchmarkSnapshot10kObjects(b *testing.B) {
	bin := etcdBinary(b)
	set := testPKI(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	m := startMember(b, bin, set, "m1", "https://127.0.0.1:"+fmt.Sprint(testenv.FreePort(b)), nil)
	c := connect(ctx, b, m, clientConfig(set, "m1", m.clientAddr, nil))

	const objects = 10_000
	value := strings.Repeat("x", 1536)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := range objects {
		g.Go(func() error {
			_, err := c.cli.Put(gctx, fmt.Sprintf("/registry/configmaps/bench/cm-%05d", i), value)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()

	var kforge, script time.Duration
	var size int64
	var peak uint64
	for i := 0; i < b.N; i++ {
		path := filepath.Join(dir, fmt.Sprintf("kforge-%d.db", i))
		runtime.GC()
		base, stop := heapPeak()
		start := time.Now()
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Snapshot(ctx, f); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		info, err := snapshotfile.Verify(path)
		if err != nil {
			b.Fatal(err)
		}
		kforge += time.Since(start)
		if p := stop(); p-base > peak {
			peak = p - base
		}
		size = info.Size
		if info.TotalKeys < objects {
			b.Fatalf("snapshot holds %d keys, want at least %d", info.TotalKeys, objects)
		}

		start = time.Now()
		tls := filepath.Join(dir, "tls")
		ca, _ := testenv.WritePair(b, tls, "ca", set.CAs["etcd-ca"])
		crt, key := testenv.WritePair(b, tls, "client", set.Get("apiserver-etcd-client", ""))
		cmd := exec.CommandContext(ctx, filepath.Join(filepath.Dir(bin), "etcdctl"), "--endpoints=https://"+m.clientAddr,
			"--cacert="+ca, "--cert="+crt, "--key="+key, "snapshot", "save", filepath.Join(dir, fmt.Sprintf("etcdctl-%d.db", i)))
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("etcdctl snapshot save: %v\n%s", err, out)
		}
		script += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(kforge.Seconds()/n, "kforge-s")
	b.ReportMetric(script.Seconds()/n, "etcdctl-s")
	b.ReportMetric(kforge.Seconds()/script.Seconds(), "kforge/etcdctl")
	b.ReportMetric(float64(size)/(1<<20), "snapshot-MiB")
	b.ReportMetric(float64(peak)/(1<<20), "heap-peak-MiB")
	b.Logf("%d objects: snapshot %.1f MiB; kforge (stream + verify) %s, etcdctl snapshot save %s; Go heap peak +%.1f MiB during the snapshot",
		objects, float64(size)/(1<<20), (kforge / time.Duration(b.N)).Round(time.Millisecond), (script / time.Duration(b.N)).Round(time.Millisecond), float64(peak)/(1<<20))
}

// heapPeak samples the Go heap in use every 5 ms until stop, which returns the highest sample;
// base is the level when sampling started.
func heapPeak() (base uint64, stop func() uint64) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base = ms.HeapInuse
	var max atomic.Uint64
	max.Store(base)
	// progress.Every's clock, with a sample as its heartbeat.
	stopSampling := progress.Every(func(progress.Event) {}, 5*time.Millisecond, func(time.Duration) progress.Event {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if ms.HeapInuse > max.Load() {
			max.Store(ms.HeapInuse)
		}
		return progress.Event{}
	})
	return base, func() uint64 { stopSampling(); return max.Load() }
}
