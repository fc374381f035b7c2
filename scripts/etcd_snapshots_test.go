package scripts

import "testing"

// TestEtcdSnapshots: the master's clock, the timer's state and start (systemd's "@SECONDS"
// without its @), the last run's result, and each record on one line after its name; a
// directory without records (or none at all) gives no record line.
func TestEtcdSnapshots(t *testing.T) {
	s := newSandbox(t)
	s.stub("date", "echo 1795840000")
	s.stub("systemctl", `case "$*" in
is-active*) echo active ;;
*ActiveEnterTimestamp*) echo @1795830000 ;;
*Result*) echo success ;;
esac`)
	dir := s.file("snapshots")
	cmd := Command("etcd-snapshots", "dir", dir, "timer", "kforge-etcd-snapshot.timer", "unit", "kforge-etcd-snapshot.service")
	head := "now 1795840000\nstate active\ntimer 1795830000\nresult success\n"
	if out := s.mustRun(cmd, ""); out != head {
		t.Errorf("without a directory:\n%s\nwant\n%s", out, head)
	}
	s.write("snapshots/etcd-20261128-020000.000.json", "{\n  \"revision\": 40\n}\n")
	s.write("snapshots/etcd-20261128-020000.000.db", "db")
	s.write("snapshots/etcd-20261128-030000.000.json", "{\n  \"revision\": 90\n}\n")
	s.write("snapshots/.etcd-20261128-040000.000.json.part", "{")
	want := head + "record etcd-20261128-020000.000\n{  \"revision\": 40}\nrecord etcd-20261128-030000.000\n{  \"revision\": 90}\n"
	if out := s.mustRun(cmd, ""); out != want {
		t.Errorf("with two records:\n%s\nwant\n%s", out, want)
	}
}
