package remotetest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kforge/kforge/remote"
)

func TestFakeAnswersRegisteredCommandsAndRecordsThem(t *testing.T) {
	h := New("m1")
	h.On("kubeadm version -o short", Result{Stdout: "v1.36.3\n"})
	h.OnPrefix("systemctl is-active", Result{Stdout: "inactive\n", Exit: 3})
	out, err := remote.Output(context.Background(), h, "kubeadm version -o short")
	if err != nil || string(out) != "v1.36.3\n" {
		t.Fatalf("got %q, %v", out, err)
	}
	err = h.Run(context.Background(), remote.Cmd{Command: "systemctl is-active kubelet"})
	var ce *remote.CommandError
	if !errors.As(err, &ce) || ce.ExitCode != 3 || ce.Host != "m1" {
		t.Fatalf("want exit 3 CommandError from m1, got %v", err)
	}
	err = h.Run(context.Background(), remote.Cmd{Command: "rm -rf /"})
	if !errors.As(err, &ce) || ce.ExitCode != 127 {
		t.Fatalf("unknown command should fail with 127, got %v", err)
	}
	if got := strings.Join(h.Commands(), "|"); got != "kubeadm version -o short|systemctl is-active kubelet|rm -rf /" {
		t.Errorf("commands %q", got)
	}
}

func TestFakeUploadStoresSkipsAndServesFiles(t *testing.T) {
	ctx := context.Background()
	h := New("w1")
	if err := h.Upload(ctx, remote.Bytes("/etc/kforge/a.conf", []byte("x=1\n"), 0o600)); err != nil {
		t.Fatal(err)
	}
	if err := h.Upload(ctx, remote.Bytes("/etc/kforge/a.conf", []byte("x=1\n"), 0o600)); err != nil {
		t.Fatal(err)
	}
	if err := h.Upload(ctx, remote.Bytes("/etc/kforge/a.conf", []byte("x=1\n"), 0o644)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(h.Uploads(), ","); got != "/etc/kforge/a.conf,/etc/kforge/a.conf" {
		t.Errorf("uploads %q (the identical second upload must be skipped, the mode change not)", got)
	}
	if len(h.Skipped()) != 1 || !h.IsDir("/etc/kforge") {
		t.Errorf("skipped %v, dir made %v", h.Skipped(), h.IsDir("/etc/kforge"))
	}
	data, err := remote.ReadFile(ctx, h, "/etc/kforge/a.conf")
	if err != nil || string(data) != "x=1\n" {
		t.Errorf("ReadFile = %q, %v", data, err)
	}
	if _, err := remote.ReadFile(ctx, h, "/nope"); err == nil {
		t.Error("reading a missing file succeeded")
	}
	if err := remote.MkdirAll(ctx, h, "/var/lib/kforge/x y", 0o700); err != nil || !h.IsDir("/var/lib/kforge/x y") {
		t.Errorf("MkdirAll: %v", err)
	}
	h.FailUploads(errors.New("disk full"))
	if err := h.Upload(ctx, remote.Bytes("/x", nil, 0)); err == nil {
		t.Error("FailUploads ignored")
	}
}

func TestFakeWorksWithEach(t *testing.T) {
	hosts := []remote.Host{New("a"), New("b")}
	err := remote.Each(context.Background(), hosts, remote.Limits{}, func(ctx context.Context, h remote.Host) error {
		return remote.Systemctl(ctx, h, "restart", "containerd")
	})
	var ce *remote.CommandError
	if !errors.As(err, &ce) || len(err.(remote.Errors)) != 2 {
		t.Fatalf("got %v", err)
	}
	if !strings.HasPrefix(err.Error(), "2 hosts failed: a: command \"systemctl restart containerd\" exited with status 127") {
		t.Errorf("message %q", err.Error())
	}
}

func TestFakeContextErrorsMatchSSH(t *testing.T) {
	h := New("n")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.Run(ctx, remote.Cmd{Command: "true"}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 0)
	defer cancel()
	var te *remote.TimeoutError
	if err := h.Upload(ctx, remote.Bytes("/x", nil, 0)); !errors.As(err, &te) {
		t.Errorf("deadline: %v", err)
	}
}
