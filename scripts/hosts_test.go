package scripts

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStopUnit(t *testing.T) {
	s := newSandbox(t)
	s.stub("systemctl", "")
	unit := s.file("kforge-vip.service")
	cmd := Command("stop-unit", "unit", "kforge-vip.service", "unit_path", unit, "said", "stopped and disabled")
	if out := s.mustRun(cmd, ""); out != "" || s.calls() != "" {
		t.Errorf("without its unit file: printed %q, ran %q", out, s.calls())
	}
	s.write("kforge-vip.service", "[Unit]\n")
	if out := s.mustRun(cmd, ""); out != "changed kforge-vip.service stopped and disabled\n" || s.calls() != "systemctl disable -q --now kforge-vip.service\n" {
		t.Errorf("printed %q, ran %q", out, s.calls())
	}
	s.stub("systemctl", "exit 1")
	if _, _, err := s.run(cmd, ""); err == nil {
		t.Error("a unit systemctl cannot disable: no failure")
	}
}

func TestRetireUnit(t *testing.T) {
	s := newSandbox(t)
	s.stub("systemctl", "")
	unit := s.write("kforge-apiproxy.service", "")
	conf, bin := s.write("it's config.json", ""), s.write("bin/kforge-apiproxy", "")
	keep := s.write("keep", "")
	cmd := Command("retire-unit", "unit", "kforge-apiproxy.service", "unit_path", unit, "files", Lines([]string{conf, s.file("missing"), bin}))
	if out := s.mustRun(cmd, ""); out != "removed\n" {
		t.Errorf("printed %q", out)
	}
	for _, p := range []string{unit, conf, bin} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is still there", p)
		}
	}
	if _, err := os.Stat(keep); err != nil {
		t.Error(err)
	}
	if want := "systemctl disable -q --now kforge-apiproxy.service\nsystemctl daemon-reload\n"; s.calls() != want {
		t.Errorf("ran %q, want %q", s.calls(), want)
	}
	if out := s.mustRun(cmd, ""); out != "" {
		t.Errorf("again: %q", out)
	}
}

func TestRepointKubelet(t *testing.T) {
	s := newSandbox(t)
	s.stub("systemctl", `[ "$1" != is-active ]`) // kubelet not running
	conf := s.file("kubelet.conf")
	cmd := func(server string) string { return Command("repoint-kubelet", "server", server, "kubeconfig", conf) }
	if out := s.mustRun(cmd("https://10.0.0.9:6443"), ""); out != "" {
		t.Errorf("no kubeconfig: %q", out)
	}
	s.write("kubelet.conf", "clusters:\n- cluster:\n    server: https://10.0.0.1:6443\n  name: default\n")
	if out := s.mustRun(cmd("https://10.0.0.1:6443"), ""); out != "" || s.calls() != "" {
		t.Errorf("already right: printed %q, ran %q", out, s.calls())
	}
	if out := s.mustRun(cmd("https://10.0.0.9:6443"), ""); out != "https://10.0.0.1:6443\n" {
		t.Errorf("printed %q, want the old server", out)
	}
	data, _ := os.ReadFile(conf)
	fi, _ := os.Stat(conf)
	if string(data) != "clusters:\n- cluster:\n    server: https://10.0.0.9:6443\n  name: default\n" || fi.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig now (%v):\n%s", fi.Mode(), data)
	}
	if strings.Contains(s.calls(), "restart") {
		t.Errorf("restarted a kubelet that was not running: %q", s.calls())
	}
	s.stub("systemctl", "")
	s.mustRun(cmd("https://10.0.0.1:6443"), "")
	if !strings.HasSuffix(s.calls(), "systemctl restart kubelet\n") {
		t.Errorf("running kubelet not restarted: %q", s.calls())
	}
}

func TestKubeletSays(t *testing.T) {
	journal := `I0101 kubelet.go:1] starting
E0101 pod_workers.go:1] "Error syncing pod" pod="kube-system/etcd-m1"
E0101 kubelet.go:2] "Failed to get node info" err="not found"`
	s := newSandbox(t)
	s.stub("systemctl", "echo activating; exit 3")
	s.stub("journalctl", "cat <<'J'\n"+journal+"\nJ")
	if out := s.mustRun(Command("kubelet-says", "pods", `pod="kube-system/etcd-m1"`), ""); out != "kubelet activating\n"+strings.Split(journal, "\n")[1]+"\n" {
		t.Errorf("about etcd-m1: %q", out)
	}
	if out := s.mustRun(Command("kubelet-says", "pods", ""), ""); out != "kubelet activating\n"+strings.Split(journal, "\n")[2]+"\n" {
		t.Errorf("about no pod: %q", out)
	}
}

func TestRestartAPIServer(t *testing.T) {
	s := newSandbox(t)
	s.stub("ctr", `[ "$3" = containers ] && printf 'CONTAINER IMAGE RUNTIME\nabc registry.k8s.io/kube-apiserver:v1.36.3 io.containerd.runc.v2\ndef registry.k8s.io/etcd:3.6.5-0 io.containerd.runc.v2\n'`)
	s.mustRun(Command("restart-apiserver"), "")
	if want := "ctr -n k8s.io containers ls\nctr -n k8s.io tasks kill -s SIGKILL abc\n"; s.calls() != want {
		t.Errorf("ran %q, want %q", s.calls(), want)
	}
}

// TestRestoreEtcdData: the member directory on stdin replaces the old one; nothing else of the
// data directory is touched; no work directory is left.
func TestRestoreEtcdData(t *testing.T) {
	s := newSandbox(t)
	s.write("etcd/member/snap/old", "old")
	s.write("etcd/keep", "")
	var tgz bytes.Buffer
	zw := gzip.NewWriter(&tgz)
	tw := tar.NewWriter(zw)
	for _, f := range []struct{ name, data string }{{"member/", ""}, {"member/wal/0.wal", "new"}} {
		h := &tar.Header{Name: f.name, Mode: 0o700, Typeflag: tar.TypeDir}
		if f.data != "" {
			h = &tar.Header{Name: f.name, Mode: 0o600, Size: int64(len(f.data)), Typeflag: tar.TypeReg}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	dir := s.file("etcd")
	s.mustRun(Command("restore-etcd-data", "dir", dir, "owner", ""), tgz.String())
	var got []string
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, _ error) error {
		if !fi.IsDir() {
			got = append(got, strings.TrimPrefix(p, dir+"/"))
		}
		return nil
	})
	if strings.Join(got, " ") != "keep member/wal/0.wal" {
		t.Errorf("data directory holds %q", got)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data directory: %v %v", fi, err)
	}
	if _, err := os.Stat(dir + ".kforge-restore"); err == nil {
		t.Error("the work directory is left")
	}
	if _, _, err := s.run(Command("restore-etcd-data", "dir", dir, "owner", ""), "not a tar"); err == nil {
		t.Error("a broken archive: no failure")
	}
}

// TestReadCerts: a PEM file's certificates without its key, a kubeconfig's client certificate
// decoded, a missing file's header only.
func TestReadCerts(t *testing.T) {
	s := newSandbox(t)
	cert := "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	pem := s.write("pki/apiserver.pem", "-----BEGIN PRIVATE KEY-----\nsecret\n-----END PRIVATE KEY-----\n"+cert)
	conf := s.write("kubelet conf", "users:\n- user:\n    client-certificate-data: "+base64.StdEncoding.EncodeToString([]byte(cert))+"\n    client-key-data: c2VjcmV0\n")
	missing := s.file("missing.crt")
	out := s.mustRun(Command("read-certs", "files", Lines([]string{"cert " + pem, "kubeconfig " + conf, "cert " + missing})), "")
	if want := "==> " + pem + "\n" + cert + "==> " + conf + "\n" + cert + "==> " + missing + "\n"; out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
}
