package scripts

import (
	"strings"
	"testing"
)

// TestEtcdUser: on a host without the user, the group and the system user are made and the
// data directory is created for it, 0700; on a host where etcd ran as root, the data directory
// is handed over whole; where all is right, nothing is changed. The passwd line is printed.
func TestEtcdUser(t *testing.T) {
	passwd := "etcd:x:998:997:etcd, made by kforge:/var/lib/etcd:/usr/sbin/nologin"
	for _, c := range []struct {
		name, getent, owner, want string
		made                      bool
	}{
		{"no user", `[ -f made ] && echo "` + passwd + `" || exit 2`, "root:root", "groupadd --system etcd\nuseradd --system --gid etcd --home-dir DIR --no-create-home --shell /usr/sbin/nologin --comment etcd, made by kforge etcd\nchown -R etcd:etcd DIR\nchmod 0700 DIR\n", true},
		{"ran as root", `echo "` + passwd + `"`, "root:root", "chown -R etcd:etcd DIR\nchmod 0700 DIR\n", false},
		{"all right", `echo "` + passwd + `"`, "etcd:etcd", "chmod 0700 DIR\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSandbox(t)
			s.stub("getent", c.getent)
			s.stub("groupadd", "")
			s.stub("useradd", "touch made")
			s.stub("stat", "echo "+c.owner)
			s.stub("chown", "")
			s.stub("chmod", "")
			s.stub("install", "")
			dir := s.file("etcd")
			s.write("etcd/member/x", "")
			out := s.mustRun(Command("etcd-user", "user", "etcd", "dir", dir), "")
			if strings.TrimSpace(out) != passwd {
				t.Errorf("printed %q", out)
			}
			var changes []string
			for _, l := range strings.Split(s.calls(), "\n") {
				if l != "" && !strings.HasPrefix(l, "getent ") && !strings.HasPrefix(l, "stat ") {
					changes = append(changes, strings.ReplaceAll(l, dir, "DIR"))
				}
			}
			if got := strings.Join(changes, "\n") + "\n"; got != c.want {
				t.Errorf("ran\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}
