package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kforge/kforge/internal/fsx"
)

// A CA is replaced without downtime in phases (kforge certs rotate-ca), each finished on every
// host before the next starts:
//
//	trust    every client trusts the old and the new CA; the old one still signs
//	reissue  the new CA signs every leaf (and the kubelets' client certificates); both trusted
//	drop     only the new CA is trusted
//
// then the new CA replaces the old one in the state dir. The rotation in progress is kept in
// pki/rotation.yaml and the new CAs wait in pki/next/, so an interrupted rotation is finished by
// the next run, and apply, plan and renew in between render what the phase says.
type Phase string

const (
	PhaseTrust   Phase = "trust"
	PhaseReissue Phase = "reissue"
	PhaseDrop    Phase = "drop"
)

// Phases are the rotation's phases in order.
var Phases = []Phase{PhaseTrust, PhaseReissue, PhaseDrop}

// Rotation is a CA rotation in progress.
type Rotation struct {
	// CAs are the CAs being replaced (CA, EtcdCA, FrontProxyCA).
	CAs     []string  `yaml:"cas"`
	Phase   Phase     `yaml:"phase"`
	Started time.Time `yaml:"started"`
	// Old are the SPKI pins of the CAs being replaced, by name: what must be gone at the end.
	Old map[string]string `yaml:"old"`
}

func rotationFile(dir string) string { return filepath.Join(dir, "rotation.yaml") }

// nextBase is where CA name's replacement waits during a rotation, without extension.
func nextBase(dir, name string) (string, error) {
	spec, ok := Lookup(name)
	if !ok || !spec.IsCA() {
		return "", fmt.Errorf("pki: %q is not a CA", name)
	}
	return filepath.Join(dir, "next", spec.BaseName), nil
}

// ReadRotation reads the rotation in progress in dir; nil when there is none.
func ReadRotation(dir string) (*Rotation, error) {
	data, err := os.ReadFile(rotationFile(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r Rotation
	if err := yaml.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", rotationFile(dir), err)
	}
	if !slices.Contains(Phases, r.Phase) {
		return nil, fmt.Errorf("%s: unknown phase %q", rotationFile(dir), r.Phase)
	}
	return &r, nil
}

func writeRotation(dir string, r *Rotation) error {
	data, err := yaml.Marshal(r)
	if err != nil {
		return err
	}
	return fsx.WriteFile(rotationFile(dir), append([]byte("# A CA rotation in progress (kforge certs rotate-ca); the new CAs are in next/. Written by kforge.\n"), data...), 0o600)
}

// StartRotation begins replacing the CAs names: a new key and certificate for each (the same
// subject, the inventory's key algorithm and CA validity) in pki/next/, and the rotation
// recorded in its first phase. A rotation already in progress of the same CAs is returned as
// it is (resumed); of other CAs, it is an error.
func StartRotation(dir string, names []string, p Params, now time.Time, random io.Reader) (*Rotation, error) {
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	cur, err := ReadRotation(dir)
	if err != nil {
		return nil, err
	}
	if cur != nil {
		if !slices.Equal(cur.CAs, names) {
			return nil, fmt.Errorf("a rotation of %v is in progress (phase %s): finish it first (kforge certs rotate-ca --ca %s)", cur.CAs, cur.Phase, caFlag(cur.CAs))
		}
		return cur, nil
	}
	r := &Rotation{CAs: names, Phase: PhaseTrust, Started: now.UTC().Truncate(time.Second), Old: map[string]string{}}
	for _, name := range names {
		spec, _ := Lookup(name)
		old, err := loadPair(filepath.Join(dir, spec.BaseName))
		if err != nil {
			return nil, fmt.Errorf("CA %s: %w", name, err)
		}
		r.Old[name] = SPKIPin(old.Cert)
		base, err := nextBase(dir, name)
		if err != nil {
			return nil, err
		}
		if _, err := loadPair(base); err == nil {
			continue // made by an interrupted start
		}
		req, err := spec.Resolve(p, Master{})
		if err != nil {
			return nil, err
		}
		kp, err := Issue(req, nil, p.KeyAlgorithm, now, p.CAValidity, random)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(base), 0o700); err != nil {
			return nil, err
		}
		if err := savePair(base, kp); err != nil {
			return nil, err
		}
	}
	return r, writeRotation(dir, r)
}

// AdvanceRotation records that every host is done with the rotation's phase and moves it to
// the next one.
func AdvanceRotation(dir string, r *Rotation) error {
	i := slices.Index(Phases, r.Phase)
	if i < 0 || i == len(Phases)-1 {
		return fmt.Errorf("rotation in phase %q has no next phase: finish it", r.Phase)
	}
	r.Phase = Phases[i+1]
	return writeRotation(dir, r)
}

// FinishRotation makes the new CAs the state dir's CAs and ends the rotation. Run twice, after
// an interruption, it completes what the first run left.
func FinishRotation(dir string, r *Rotation) error {
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	for _, name := range r.CAs {
		spec, _ := Lookup(name)
		base, err := nextBase(dir, name)
		if err != nil {
			return err
		}
		next, err := loadPair(base)
		if errors.Is(err, fs.ErrNotExist) {
			continue // moved by an interrupted finish
		} else if err != nil {
			return fmt.Errorf("new CA %s: %w", name, err)
		}
		if err := savePair(filepath.Join(dir, spec.BaseName), next); err != nil {
			return err
		}
		if err := os.Remove(base + ".key"); err != nil {
			return err
		}
		if err := os.Remove(base + ".crt"); err != nil {
			return err
		}
	}
	_ = os.RemoveAll(filepath.Join(dir, "next"))
	return os.Remove(rotationFile(dir))
}

// rotated applies the rotation in progress to CA name: the signer and the certificates its
// clients trust, in the rotation's phase. cur is the state dir's CA (the old one).
func rotated(dir string, r *Rotation, name string, cur *KeyPair) (signer *KeyPair, trust []*x509.Certificate, err error) {
	if r == nil || !slices.Contains(r.CAs, name) {
		return cur, []*x509.Certificate{cur.Cert}, nil
	}
	base, err := nextBase(dir, name)
	if err != nil {
		return nil, nil, err
	}
	next, err := loadPair(base)
	if err != nil {
		return nil, nil, fmt.Errorf("CA %s is being rotated but its new CA is unreadable: %w", name, err)
	}
	switch r.Phase {
	case PhaseTrust:
		return cur, []*x509.Certificate{cur.Cert, next.Cert}, nil
	case PhaseReissue:
		return next, []*x509.Certificate{next.Cert, cur.Cert}, nil
	}
	return next, []*x509.Certificate{next.Cert}, nil
}

// caFlag is the --ca value naming cas.
func caFlag(cas []string) string {
	if len(cas) == 3 {
		return "all"
	}
	out := ""
	for i, c := range cas {
		if i > 0 {
			out += ","
		}
		out += map[string]string{CA: "cluster", EtcdCA: "etcd", FrontProxyCA: "front-proxy"}[c]
	}
	return out
}

// NextCAs are the new CAs of the rotation in progress in dir, by name; empty without one.
func NextCAs(dir string) (map[string]*x509.Certificate, error) {
	out := map[string]*x509.Certificate{}
	r, err := ReadRotation(dir)
	if err != nil || r == nil {
		return out, err
	}
	for _, name := range r.CAs {
		base, err := nextBase(dir, name)
		if err != nil {
			return nil, err
		}
		kp, err := loadPair(base)
		if errors.Is(err, fs.ErrNotExist) {
			continue // not made yet, or already moved by an interrupted finish
		} else if err != nil {
			return nil, err
		}
		out[name] = kp.Cert
	}
	return out, nil
}
