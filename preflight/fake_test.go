package preflight

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/facts"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/remote/remotetest"
)

// TestGatherAndCheckFakeHosts drives the whole of steps 1 and 2 against in-memory hosts: m1 is
// a master where kforge already runs the control plane (its ports are kforge's own) but swap is
// on; w1 is a bare Debian machine without systemd, kubelet or a running containerd.
func TestGatherAndCheckFakeHosts(t *testing.T) {
	var hosts []remote.Host
	for name, file := range map[string]string{"m1": "ubuntu-v2-rerun.txt", "w1": "debian12-hybrid.txt"} {
		out, err := os.ReadFile("../facts/testdata/" + file)
		if err != nil {
			t.Fatal(err)
		}
		h := remotetest.New(name)
		h.OnPrefix("sh -c ", remotetest.Result{Stdout: string(out)})
		hosts = append(hosts, h)
	}
	now := func() time.Time { return time.Unix(1795295173, 600_000_000) }
	all, err := facts.GatherAll(context.Background(), hosts, remote.Limits{}, func(string) facts.Options { return facts.Options{Now: now} })
	if err != nil {
		t.Fatal(err)
	}
	c := cluster()
	fs := Check(c, all, Options{})
	var got []string
	for _, f := range fs {
		if f.Severity == Error {
			got = append(got, f.Host+"/"+f.Check)
		}
		if f.Host == "m1" && strings.HasPrefix(f.Check, "Port-") && f.Severity != Info {
			t.Errorf("m1 runs kforge's own control plane, but %s", f)
		}
	}
	want := "m1/Swap w1/SystemVerification w1/InitSystem w1/FileExisting-kubelet w1/CRI"
	if strings.Join(got, " ") != want {
		t.Errorf("errors %v, want %s\nall findings:\n%s", got, want, lines(fs))
	}
	var infos []string
	for _, f := range fs {
		if f.Host == "m1" && f.Severity == Info {
			infos = append(infos, f.Check)
		}
	}
	if strings.Join(infos, " ") != "Port-6443 Port-10259 Port-10257 Port-2379 Port-2380" {
		t.Errorf("m1 infos %v", infos)
	}
	ig, err := ParseIgnore([]string{"Swap,SystemVerification", "InitSystem,FileExisting-kubelet,CRI"})
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(c, all, Options{Ignore: ig}).Err(); err != nil {
		t.Errorf("all errors ignored, still %v", err)
	}
}

func lines(fs Findings) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.String() + "\n")
	}
	return b.String()
}
