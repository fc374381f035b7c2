package bundle

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/internal/testenv"
)

// containerd is a private containerd (root, state and socket in a temporary directory) for
// import tests; it is stopped when the test ends.
type containerd struct {
	sock string
}

func startContainerd(t *testing.T) *containerd {
	t.Helper()
	why := ""
	for _, b := range []string{"containerd", "ctr"} {
		if _, err := exec.LookPath(b); err != nil {
			why = b + " is not installed (Debian package containerd)"
		}
	}
	if why == "" && os.Geteuid() != 0 {
		why = "containerd needs root"
	}
	testenv.Require(t, testenv.Missing(why))
	dir, err := os.MkdirTemp("", "kforge-ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := filepath.Join(dir, "config.toml")
	// Only what image import needs: content store, metadata, overlayfs snapshotter.
	os.WriteFile(cfg, []byte(`version = 2
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
`), 0o644)
	c := &containerd{sock: filepath.Join(dir, "containerd.sock")}
	logf, _ := os.Create(filepath.Join(dir, "containerd.log"))
	cmd := exec.Command("containerd", "--config", cfg, "--root", filepath.Join(dir, "root"), "--state", filepath.Join(dir, "state"), "--address", c.sock)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		// Unmount whatever the snapshotter left mounted under our root.
		exec.Command("umount", "-R", filepath.Join(dir, "root")).Run()
		logf.Close()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := c.ctr(context.Background(), "version"); err == nil {
			return c
		}
		select {
		case err := <-done:
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("containerd exited: %v\n%s", err, log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("containerd did not answer on %s within 20s\n%s", c.sock, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *containerd) ctr(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", c.sock}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// images returns name -> target digest of the images in containerd's k8s.io namespace.
func (c *containerd) images(t *testing.T) map[string]string {
	t.Helper()
	out, err := c.ctr(context.Background(), "-n", "k8s.io", "images", "ls")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseImageList(out)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestArchiveImportsIntoContainerd(t *testing.T) {
	dir, m := tinyBundle(t)
	c := startContainerd(t)
	im := m.Images[0]
	if out, err := c.ctr(context.Background(), "-n", "k8s.io", "images", "import", filepath.Join(dir, im.Path)); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("ctr images import: %s", out)
	}
	got := c.images(t)
	if got[im.Name] != im.Digest {
		t.Fatalf("after import containerd has %v; want %s at %s", got, im.Name, im.Digest)
	}
}
