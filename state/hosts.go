package state

import (
	"errors"
	"fmt"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/kforge/kforge/inventory"
)

// HostsRecord is the hosts apply last made part of the cluster, so a later run knows which
// hosts left the inventory and how to reach them.
type HostsRecord struct {
	Cluster string         `yaml:"cluster"`
	Hosts   []RecordedHost `yaml:"hosts"`
}

// RecordedHost is one host as the inventory listed it, with its role and the SSH settings apply
// used (the inventory's defaults merged in, so the host stays reachable if they change).
type RecordedHost struct {
	Role           inventory.Role `yaml:"role"`
	inventory.Host `yaml:",inline"`
	Connect        inventory.SSH `yaml:"connect"`
}

// Node is the recorded host as a node reached the way apply reached it.
func (h RecordedHost) Node() inventory.Node {
	return inventory.Node{Host: h.Host, Role: h.Role, SSH: h.Connect}
}

// Record is n as a RecordedHost.
func Record(n inventory.Node) RecordedHost {
	return RecordedHost{Role: n.Role, Host: n.Host, Connect: n.SSH}
}

const hostsRecordHeader = "# The hosts kforge apply last made part of this cluster. apply reads it to find hosts\n# removed from the inventory (kforge apply --prune drains and removes them). Written by kforge.\n"

// ReadHosts reads the hosts record; none yet is an empty record.
func (d Dir) ReadHosts() (*HostsRecord, error) {
	data, err := os.ReadFile(d.HostsRecord())
	if errors.Is(err, os.ErrNotExist) {
		return &HostsRecord{}, nil
	}
	if err != nil {
		return nil, err
	}
	var rec HostsRecord
	if err := yaml.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("%s: %w (remove it if the cluster has no hosts left outside the inventory)", d.HostsRecord(), err)
	}
	return &rec, nil
}

// WriteHosts replaces the hosts record.
func (d Dir) WriteHosts(rec HostsRecord) error {
	data, err := yaml.Marshal(rec)
	if err != nil {
		return err
	}
	return d.Write(d.HostsRecord(), append([]byte(hostsRecordHeader), data...), 0o600)
}
