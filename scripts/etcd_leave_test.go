package scripts

import (
	"os"
	"strings"
	"testing"
)

// TestEtcdLeave: the member's data goes (hidden entries too), the data directory stays; the
// member's certificates go, a listed file that is not there is no error; run again, it does
// nothing and says nothing.
func TestEtcdLeave(t *testing.T) {
	s := newSandbox(t)
	dir := s.file("etcd")
	s.write("etcd/member/snap/db", "data")
	s.write("etcd/.lock", "")
	server := s.write("pki/etcd/server.crt", "cert")
	keep := s.write("pki/etcd/ca.crt", "ca")
	cmd := Command("etcd-leave", "data_dir", dir, "files", Lines([]string{server, s.file("pki/etcd/peer.crt")}))
	out := s.mustRun(cmd, "")
	want := "changed removed " + dir + "/member\nchanged removed " + dir + "/.lock\nchanged removed " + server + "\n"
	if out != want {
		t.Errorf("printed\n%s\nwant\n%s", out, want)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("data dir: %v, %v; want it there and empty", entries, err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("the etcd CA went: %v", err)
	}
	if again := s.mustRun(cmd, ""); strings.TrimSpace(again) != "" {
		t.Errorf("second run printed %q", again)
	}
}
