package firewall

import (
	"slices"
	"testing"

	"github.com/kforge/kforge/facts"
	"github.com/kforge/kforge/inventory"
)

// TestFor: masters add the API server and etcd to every node's ports, and the registry when
// the masters serve the bundle; the pod network's VXLAN only with flannel.
func TestFor(t *testing.T) {
	names := func(ps []Port) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.String())
		}
		return out
	}
	c := &inventory.Cluster{Networking: inventory.Networking{Plugin: "flannel"}}
	if got, want := names(For(c, inventory.RoleWorker)), []string{"10250/tcp", "10256/tcp", "30000-32767/tcp", "30000-32767/udp", "8472/udp"}; !slices.Equal(got, want) {
		t.Errorf("worker: %v, want %v", got, want)
	}
	if got, want := names(For(c, inventory.RoleMaster)), []string{"6443/tcp", "2379-2380/tcp", "10250/tcp", "10256/tcp", "30000-32767/tcp", "30000-32767/udp", "8472/udp"}; !slices.Equal(got, want) {
		t.Errorf("master: %v, want %v", got, want)
	}
	c.Etcd = []inventory.Host{{Name: "e1"}, {Name: "e2"}, {Name: "e3"}}
	if got, want := names(For(c, inventory.RoleMaster)), []string{"6443/tcp", "10250/tcp", "10256/tcp", "30000-32767/tcp", "30000-32767/udp", "8472/udp"}; !slices.Equal(got, want) {
		t.Errorf("master of a cluster with an external etcd: %v, want %v", got, want)
	}
	if got, want := names(For(c, inventory.RoleEtcd)), []string{"2379-2380/tcp"}; !slices.Equal(got, want) {
		t.Errorf("etcd host: %v, want %v", got, want)
	}
	c.Networking.Plugin = "none"
	if got := names(For(c, inventory.RoleWorker)); slices.Contains(got, "8472/udp") {
		t.Errorf("no pod network of kforge's, yet VXLAN: %v", got)
	}
}

// TestOpenCommand: firewalld's permanent configuration (ports in the default zone, sources in
// the trusted zone) then a reload; ufw's ranges with a colon, and its sources with route rules.
func TestOpenCommand(t *testing.T) {
	ps := []Port{port("tcp", 6443, 6443, ""), port("udp", 30000, 32767, "")}
	if got, want := OpenCommand("firewalld", ps, nil), "firewall-cmd --permanent --add-port=6443/tcp --add-port=30000-32767/udp && firewall-cmd --reload"; got != want {
		t.Errorf("firewalld: %s", got)
	}
	if got, want := OpenCommand("firewalld", nil, []string{"10.244.0.0/16"}), "firewall-cmd --permanent --zone=trusted --add-source=10.244.0.0/16 && firewall-cmd --reload"; got != want {
		t.Errorf("firewalld, a source: %s", got)
	}
	if got, want := OpenCommand("ufw", ps, []string{"10.244.0.0/16"}), "ufw allow 6443/tcp && ufw allow 30000:32767/udp && ufw allow from 10.244.0.0/16 && ufw route allow from 10.244.0.0/16 && ufw route allow to 10.244.0.0/16"; got != want {
		t.Errorf("ufw: %s", got)
	}
}

// TestUntrusted: firewalld's public zone must trust the pod and Service subnets, and ufw must
// let them in; firewalld's trusted zone and no firewall need nothing.
func TestUntrusted(t *testing.T) {
	c := &inventory.Cluster{}
	want := Sources(c, inventory.RoleWorker)
	if !slices.Equal(want, []string{"10.244.0.0/16", "10.96.0.0/12"}) {
		t.Errorf("sources of a cluster with default subnets: %v", want)
	}
	if etcd := Sources(c, inventory.RoleEtcd); etcd != nil {
		t.Errorf("an etcd host's sources: %v, want none (it runs no pods)", etcd)
	}
	if got := Untrusted(facts.Firewall{Kind: "firewalld", Zone: "public", Sources: []string{"10.96.0.0/12"}}, want); !slices.Equal(got, []string{"10.244.0.0/16"}) {
		t.Errorf("firewalld trusting the Service subnet: untrusted %v", got)
	}
	if got := Untrusted(facts.Firewall{Kind: "ufw", Sources: []string{"10.244.0.0/16"}}, want); !slices.Equal(got, []string{"10.96.0.0/12"}) {
		t.Errorf("ufw letting in the pod subnet: untrusted %v", got)
	}
	for _, fw := range []facts.Firewall{{Kind: "firewalld", Zone: "trusted"}, {Kind: "ufw", Sources: []string{"Anywhere"}}, {Kind: "none"}} {
		if got := Untrusted(fw, want); len(got) != 0 {
			t.Errorf("%+v: untrusted %v, want none", fw, got)
		}
	}
}
