package scripts

import (
	"strings"
	"testing"
)

// TestFirewallOpen: firewalld gets each port in the default zone and each source in the trusted
// zone, permanent, then one reload; ufw gets allow rules, its ranges with a colon, and allow and
// route rules for each source; a failing firewall command fails the script before the reload.
func TestFirewallOpen(t *testing.T) {
	s := newSandbox(t)
	s.stub("firewall-cmd", "")
	ports, sources := Lines([]string{"6443/tcp", "30000-32767/udp"}), Lines([]string{"10.244.0.0/16", "10.96.0.0/12"})
	out := s.mustRun(Command("firewall-open", "kind", "firewalld", "zone", "public", "ports", ports, "sources", sources), "")
	if want := "opened 6443/tcp\nopened 30000-32767/udp\ntrusted 10.244.0.0/16\ntrusted 10.96.0.0/12\n"; out != want {
		t.Errorf("firewalld: printed\n%s\nwant\n%s", out, want)
	}
	if got, want := s.calls(), "firewall-cmd --permanent --zone=public --add-port=6443/tcp\nfirewall-cmd --permanent --zone=public --add-port=30000-32767/udp\n"+
		"firewall-cmd --permanent --zone=trusted --add-source=10.244.0.0/16\nfirewall-cmd --permanent --zone=trusted --add-source=10.96.0.0/12\nfirewall-cmd --reload\n"; got != want {
		t.Errorf("firewalld: ran\n%s\nwant\n%s", got, want)
	}

	s = newSandbox(t)
	s.stub("ufw", "")
	out = s.mustRun(Command("firewall-open", "kind", "ufw", "zone", "", "ports", ports, "sources", Lines([]string{"10.244.0.0/16"})), "")
	if want := "opened 6443/tcp\nopened 30000-32767/udp\ntrusted 10.244.0.0/16\n"; out != want {
		t.Errorf("ufw: printed\n%s\nwant\n%s", out, want)
	}
	if got, want := s.calls(), "ufw allow 6443/tcp\nufw allow 30000:32767/udp\nufw allow from 10.244.0.0/16\nufw route allow from 10.244.0.0/16\nufw route allow to 10.244.0.0/16\n"; got != want {
		t.Errorf("ufw: ran\n%s\nwant\n%s", got, want)
	}

	s = newSandbox(t)
	s.stub("firewall-cmd", `case "$*" in *--add-port=30000-32767/udp) echo "Error: INVALID_PORT" >&2; exit 1;; esac`)
	if _, _, err := s.run(Command("firewall-open", "kind", "firewalld", "zone", "public", "ports", ports, "sources", sources), ""); err == nil {
		t.Error("a failing firewall-cmd: the script succeeded")
	}
	if strings.Contains(s.calls(), "--reload") || strings.Contains(s.calls(), "--add-source") {
		t.Errorf("after a failure the script went on:\n%s", s.calls())
	}
}
