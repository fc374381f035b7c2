package tasks

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// kubeletSaysScript, run by sh against a journal of known lines (journalctl and systemctl
// replaced on PATH): the last error about the pods waited for when there is one, else the last
// error at all.
func TestKubeletSaysScript(t *testing.T) {
	bin := t.TempDir()
	journal := filepath.Join(bin, "journal")
	os.WriteFile(filepath.Join(bin, "systemctl"), []byte("#!/bin/sh\necho active\n"), 0o755)
	os.WriteFile(filepath.Join(bin, "journalctl"), []byte("#!/bin/sh\ncat "+journal+"\n"), 0o755)
	run := func(lines string, pods []string) string {
		t.Helper()
		os.WriteFile(journal, []byte(lines), 0o644)
		cmd := exec.Command("sh", "-c", kubeletSaysScript(pods))
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	lines := `I1126 14:27:00 kubelet.go:1 "SyncLoop ADD" pod="kube-system/kube-scheduler-m1"
E1126 14:27:01 pod_workers.go:1 "Error syncing pod, skipping" err="failed to destroy cgroup" pod="kube-system/kube-scheduler-m1"
E1126 14:27:02 kubelet_node_status.go:1 "Error updating node status, will retry" err="timeout"
I1126 14:27:03 kubelet.go:1 "done"
`
	if got, want := run(lines, []string{"kube-system/kube-scheduler-m1"}), "kubelet active\n"+strings.Split(lines, "\n")[1]; got != want {
		t.Errorf("about kube-scheduler-m1:\n got %q\nwant %q", got, want)
	}
	if got, want := run(lines, []string{"kube-system/etcd-m1"}), "kubelet active\n"+strings.Split(lines, "\n")[2]; got != want {
		t.Errorf("about etcd-m1 (no line): want the last error\n got %q\nwant %q", got, want)
	}
	if got, want := run(lines, nil), "kubelet active\n"+strings.Split(lines, "\n")[2]; got != want {
		t.Errorf("no pods:\n got %q\nwant %q", got, want)
	}
}
