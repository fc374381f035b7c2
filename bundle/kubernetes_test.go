package bundle

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/internal/testenv"
)

func TestKubernetesBinariesReportVersion(t *testing.T) {
	needGo(t)
	ctx := context.Background()
	start := time.Now()
	dir, err := KubernetesBinaries(ctx, BuildOptions{Version: "v1.36.3", Report: testenv.Report(t), GoOutput: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("KubernetesBinaries: %s in %s", dir, time.Since(start))

	checks := map[string][]string{
		"kubeadm":                 {"version", "-o", "short"},
		"kubelet":                 {"--version"},
		"kubectl":                 {"version", "--client"},
		"kube-apiserver":          {"--version"},
		"kube-controller-manager": {"--version"},
		"kube-scheduler":          {"--version"},
		"kube-proxy":              {"--version"},
	}
	for _, c := range KubernetesCommands {
		out, err := exec.CommandContext(ctx, filepath.Join(dir, c), checks[c]...).CombinedOutput()
		if err != nil {
			t.Errorf("%s %v: %v\n%s", c, checks[c], err, out)
			continue
		}
		if !strings.Contains(string(out), "v1.36.3") {
			t.Errorf("%s %v reports %q, want v1.36.3", c, checks[c], strings.TrimSpace(string(out)))
		}
	}

	// The second call is served from the cache: the very same files, not a rebuild.
	before, err := os.Stat(filepath.Join(dir, "kubeadm"))
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	dir2, err := KubernetesBinaries(ctx, BuildOptions{Version: "v1.36.3"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cached KubernetesBinaries: %s", time.Since(start))
	after, err := os.Stat(filepath.Join(dir2, "kubeadm"))
	if err != nil {
		t.Fatal(err)
	}
	if dir2 != dir || !os.SameFile(before, after) {
		t.Errorf("second call returned %s, want the cached %s untouched", dir2, dir)
	}
}

func TestKubernetesVersionIsChecked(t *testing.T) {
	for _, v := range []string{"1.36.3", "v1.36", "v2.0.0", "latest", ""} {
		if _, err := KubernetesBinaries(context.Background(), BuildOptions{Version: v, CacheDir: t.TempDir()}); err == nil {
			t.Errorf("version %q accepted", v)
		}
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
