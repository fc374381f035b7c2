package firewall

import (
	"slices"
	"testing"

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
	c.Networking.Plugin = "none"
	if got := names(For(c, inventory.RoleWorker)); slices.Contains(got, "8472/udp") {
		t.Errorf("no pod network of kforge's, yet VXLAN: %v", got)
	}
}

// TestOpenCommand: firewalld's permanent configuration then a reload; ufw's ranges with a colon.
func TestOpenCommand(t *testing.T) {
	ps := []Port{port("tcp", 6443, 6443, ""), port("udp", 30000, 32767, "")}
	if got, want := OpenCommand("firewalld", ps), "firewall-cmd --permanent --add-port=6443/tcp --add-port=30000-32767/udp && firewall-cmd --reload"; got != want {
		t.Errorf("firewalld: %s", got)
	}
	if got, want := OpenCommand("ufw", ps), "ufw allow 6443/tcp && ufw allow 30000:32767/udp"; got != want {
		t.Errorf("ufw: %s", got)
	}
}
