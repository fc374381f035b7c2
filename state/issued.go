package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"gopkg.in/yaml.v3"
)

// Issued is a kubeconfig kforge signed for a person or a CI job (kforge kubeconfig --user):
// who, which groups, when it expires, and which CA signed it. The kubeconfig itself, with its
// private key, is not kept.
type Issued struct {
	User     string    `yaml:"user" json:"user"`
	Groups   []string  `yaml:"groups,omitempty" json:"groups,omitempty"`
	Serial   string    `yaml:"serial" json:"serial"`
	Issued   time.Time `yaml:"issued" json:"issued"`
	NotAfter time.Time `yaml:"notAfter" json:"notAfter"`
	// CA is the SPKI pin (sha256:…) of the CA that signed it.
	CA string `yaml:"ca" json:"ca"`
	// Cert is the PEM certificate, so certs check can show it like any other.
	Cert string `yaml:"cert" json:"-"`
}

// IssuedRecord is where the issued kubeconfigs are recorded.
func (d Dir) IssuedRecord() string { return filepath.Join(d.path, "issued.yaml") }

const issuedHeader = "# The user kubeconfigs kforge issued (kforge kubeconfig --user), shown by kforge certs check.\n# Written by kforge.\n"

// ReadIssued reads the record of issued kubeconfigs; none yet is an empty list.
func (d Dir) ReadIssued() ([]Issued, error) {
	data, err := os.ReadFile(d.IssuedRecord())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Issued
	if err := yaml.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("%s: %w", d.IssuedRecord(), err)
	}
	return out, nil
}

// RecordIssued adds one issued kubeconfig to the record. The caller holds the state dir's lock.
func (d Dir) RecordIssued(i Issued) error {
	all, err := d.ReadIssued()
	if err != nil {
		return err
	}
	data, err := yaml.Marshal(append(all, i))
	if err != nil {
		return err
	}
	return d.Write(d.IssuedRecord(), append([]byte(issuedHeader), data...), 0o600)
}
