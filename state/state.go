// Package state owns a cluster's state dir on the workstation: its layout, the lock a run
// holds from start to end, atomic writes, the record of the hosts apply made part of the
// cluster, and a record of what each run did. Nothing else decides where a file of the state
// dir lives.
//
//	<dir>/.lock            held by the run in progress
//	<dir>/pki/             the cluster's CAs, certificates and keys (package pki)
//	<dir>/admin.conf       the user's admin kubeconfig
//	<dir>/bootstrap-token  the workers' bootstrap token
//	<dir>/hosts.yaml       the hosts of the last apply (HostsRecord)
//	<dir>/issued.yaml      the user kubeconfigs kforge issued (Issued)
//	<dir>/logs/            one debug log per run
//	<dir>/runs/            one record per run: its steps, what each host reported, the outcome
package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kforge/kforge/internal/fsx"
)

// Dir is one cluster's state dir.
type Dir struct{ path string }

// At is the state dir at path; nothing is created until something is written.
func At(path string) Dir { return Dir{path: path} }

// Default is the state dir of cluster name when --state-dir is not given:
// $XDG_STATE_HOME/kforge/<name>, else ~/.local/state/kforge/<name>.
func Default(name string) (Dir, error) {
	if x := os.Getenv("XDG_STATE_HOME"); x != "" {
		return At(filepath.Join(x, "kforge", name)), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return Dir{}, fmt.Errorf("no state dir: set --state-dir or KFORGE_STATE_DIR (%v)", err)
	}
	return At(filepath.Join(home, ".local", "state", "kforge", name)), nil
}

func (d Dir) Path() string            { return d.path }
func (d Dir) PKI() string             { return filepath.Join(d.path, "pki") }
func (d Dir) AdminKubeconfig() string { return filepath.Join(d.path, "admin.conf") }
func (d Dir) BootstrapToken() string  { return filepath.Join(d.path, "bootstrap-token") }
func (d Dir) HostsRecord() string     { return filepath.Join(d.path, "hosts.yaml") }
func (d Dir) Logs() string            { return filepath.Join(d.path, "logs") }
func (d Dir) Runs() string            { return filepath.Join(d.path, "runs") }
func (d Dir) Snapshots() string       { return filepath.Join(d.path, "snapshots") }

// Write writes one of the state dir's files (a path from the methods above) atomically.
func (d Dir) Write(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(d.path, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	return fsx.WriteFile(path, data, mode)
}

// LockedError is a state dir another kforge run is working in.
type LockedError struct{ Dir string }

func (e *LockedError) Error() string {
	return fmt.Sprintf("state dir %s is in use by another kforge run: wait for it to finish (two runs on one cluster would issue certificates and change hosts at once)", e.Dir)
}

// Lock takes the state dir for one run, from its start to its end; the returned function
// releases it. Another run holding it is a *LockedError, returned at once.
func (d Dir) Lock() (unlock func(), err error) {
	if err := os.MkdirAll(d.path, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	unlock, err = fsx.TryLock(filepath.Join(d.path, ".lock"))
	if errors.Is(err, fsx.ErrLocked) {
		return nil, &LockedError{Dir: d.path}
	}
	return unlock, err
}

// Remove deletes the given files of the state dir and returns those that were there.
func (d Dir) Remove(paths ...string) ([]string, error) {
	var removed []string
	for _, p := range paths {
		err := os.Remove(p)
		switch {
		case err == nil:
			removed = append(removed, p)
		case !errors.Is(err, os.ErrNotExist):
			return removed, fmt.Errorf("state dir: %w", err)
		}
	}
	return removed, nil
}
