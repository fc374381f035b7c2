package tasks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/templates"
)

// Shrinking a cluster is removing hosts from the inventory. apply remembers the hosts of its
// last successful run in the state dir (HostsRecordPath), so it knows which hosts left the
// inventory and how to reach them. Without --prune it only says so; with --prune it drains
// each removed host, removes a master's etcd member, resets the host (as `kforge reset` would)
// and deletes its node.

// HostsRecordPath is the record of the hosts apply last made part of the cluster.
func HostsRecordPath(stateDir string) string { return filepath.Join(stateDir, "hosts.yaml") }

// recordedHost is one host of the record: as the inventory listed it, with its role and the SSH
// settings apply used (the inventory's defaults merged in, so the host stays reachable if they
// change).
type recordedHost struct {
	Role           inventory.Role `yaml:"role"`
	inventory.Host `yaml:",inline"`
	Connect        inventory.SSH `yaml:"connect"`
}

type hostsRecord struct {
	Cluster string         `yaml:"cluster"`
	Hosts   []recordedHost `yaml:"hosts"`
}

const hostsRecordHeader = "# The hosts kforge apply last made part of this cluster. apply reads it to find hosts\n# removed from the inventory (kforge apply --prune drains and removes them). Written by kforge.\n"

func readHostsRecord(stateDir string) (*hostsRecord, error) {
	data, err := os.ReadFile(HostsRecordPath(stateDir))
	if errors.Is(err, os.ErrNotExist) {
		return &hostsRecord{}, nil
	}
	if err != nil {
		return nil, err
	}
	var rec hostsRecord
	if err := yaml.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("%s: %w (remove it if the cluster has no hosts left outside the inventory)", HostsRecordPath(stateDir), err)
	}
	return &rec, nil
}

// Removed returns the hosts of the last apply that the inventory no longer lists, as nodes
// that can be reached the way apply reached them. A host whose name is back in the
// inventory is not removed, whatever its role. When the inventory keeps none of the recorded
// masters the error is a NoMasterLeftError, returned with the removed hosts (reset still
// wants them).
func Removed(c *inventory.Cluster, stateDir string) ([]inventory.Node, error) {
	if stateDir == "" {
		return nil, nil
	}
	rec, err := readHostsRecord(stateDir)
	if err != nil {
		return nil, err
	}
	current := names(c.Nodes(), "")
	var out []inventory.Node
	var recordedMasters []string
	keptMaster := false
	for _, h := range rec.Hosts {
		if h.Role == inventory.RoleMaster {
			recordedMasters = append(recordedMasters, h.Name)
			keptMaster = keptMaster || slices.ContainsFunc(c.Masters, func(m inventory.Host) bool { return m.Name == h.Name })
		}
		if !slices.Contains(current, h.Name) {
			out = append(out, inventory.Node{Host: h.Host, Role: h.Role, SSH: h.Connect})
		}
	}
	if len(recordedMasters) > 0 && !keptMaster {
		return out, &NoMasterLeftError{Recorded: recordedMasters}
	}
	return out, nil
}

// NoMasterLeftError refuses an inventory that keeps none of the cluster's masters: its masters
// would start a new, empty etcd cluster. Masters are replaced one at a time: add the new one,
// apply, then remove the old one and apply --prune.
type NoMasterLeftError struct{ Recorded []string }

func (e *NoMasterLeftError) Error() string {
	return fmt.Sprintf("the inventory keeps none of the cluster's masters (%s, from the last apply): its masters would start a new, empty cluster; replace masters one at a time (add the new one and apply, then remove the old one and apply --prune), or run kforge reset first to start over", strings.Join(e.Recorded, ", "))
}

// reportRemoved says which hosts left the inventory but are still in the cluster.
func (a *Applier) reportRemoved(_ context.Context, r Reporter) error {
	for _, n := range a.o.Removed {
		how := "kforge apply --prune drains it, resets the host and deletes its node"
		if n.Role == inventory.RoleMaster {
			how = "kforge apply --prune drains it, removes its etcd member, resets the host and deletes its node (take it out of your load balancer too)"
		}
		r(Event{Kind: Progress, Host: n.Name, Message: fmt.Sprintf("%s %s is no longer in the inventory but still in the cluster: %s", n.Role, n.Name, how)})
	}
	return nil
}

// prune removes the hosts that left the inventory, one at a time: drain (so their pods move
// while the others still run); for a master, remove its etcd member while it still runs (a
// stopped member would count against the quorum the removal needs: with two members, stopping
// one first would leave the cluster unable to remove it); reset the host (kubelet stopped, so it
// cannot register the node again); delete the node. A host that cannot be reached any more is
// not reset; its member and node are removed all the same, and the event says so.
func (a *Applier) prune(ctx context.Context, r Reporter) error {
	for _, n := range a.o.Removed {
		start := a.o.Now()
		evicted, err := kube.Drain(ctx, a.clients.Typed, n.Name, a.o.Timeout)
		if err != nil {
			return err
		}
		did := []string{fmt.Sprintf("drained (%s evicted)", count(len(evicted), "pod"))}
		if n.Role == inventory.RoleMaster {
			e, err := a.etcdClient(a.inv.Masters[0].Name)
			if err != nil {
				return err
			}
			removed, err := e.remove(ctx, n.Name, templates.EtcdPeerURL(n.NodeIP()))
			if err != nil {
				return fmt.Errorf("%s: remove its etcd member through %s: %w", n.Name, a.inv.Masters[0].Name, err)
			}
			if removed {
				did = append(did, "etcd member removed")
			}
		}
		o := a.o
		o.Removed = nil
		sub := NewApplier(a.inv, o)
		sub.nodes = []inventory.Node{n}
		steps := sub.ResetSteps()
		steps = slices.DeleteFunc(steps, func(s Step) bool { return s.Task.Scope == OnWorkstation })
		_, err = Run(ctx, steps, func(e Event) {
			if e.Kind == Progress {
				r(e)
			}
		}, a.o.Now)
		sub.Close()
		var unreachable *remote.DialError
		switch {
		case errors.As(err, &unreachable):
			did = append(did, "host not reset (unreachable: "+err.Error()+")")
		case err != nil:
			return fmt.Errorf("%s: reset: %w", n.Name, err)
		default:
			did = append(did, "host reset")
		}
		if deleted, err := kube.DeleteNode(ctx, a.clients.Typed, n.Name); err != nil {
			return err
		} else if deleted {
			did = append(did, "node deleted")
		}
		a.pruned = append(a.pruned, n.Name)
		r(Event{Kind: HostDone, Host: n.Name, Duration: a.o.Now().Sub(start), Message: strings.Join(did, "; ")})
	}
	return nil
}

// recordHosts writes the hosts this apply made part of the cluster, plus those that left the
// inventory and were not pruned (still in the cluster), for the next apply.
func (a *Applier) recordHosts(_ context.Context, _ Reporter) error {
	rec := hostsRecord{Cluster: a.inv.Name}
	for _, n := range a.nodes {
		rec.Hosts = append(rec.Hosts, recordedHost{Role: n.Role, Host: n.Host, Connect: n.SSH})
	}
	for _, n := range a.o.Removed {
		if !slices.Contains(a.pruned, n.Name) {
			rec.Hosts = append(rec.Hosts, recordedHost{Role: n.Role, Host: n.Host, Connect: n.SSH})
		}
	}
	data, err := yaml.Marshal(rec)
	if err != nil {
		return err
	}
	return pki.WriteFile(HostsRecordPath(a.o.StateDir), append([]byte(hostsRecordHeader), data...), 0o600)
}
