// Package fsx holds kforge's two file-system primitives on the workstation, so there is one of
// each: an atomic writer (a file is either its old or its new content, never half of it) and a
// flock helper (two kforge processes never work on the same state or cache at once).
package fsx

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// WriteFile writes data to path atomically: a temporary file beside path with mode set, synced,
// then renamed over path. Missing parent directories are created 0700.
func WriteFile(path string, data []byte, mode os.FileMode) error {
	p, err := Create(path, mode)
	if err != nil {
		return err
	}
	defer p.Abort()
	if _, err := p.Write(data); err != nil {
		return err
	}
	return p.Commit()
}

// Pending is a file being written atomically (Create): it lands at its path only on Commit.
// Until then it is a temporary file beside the path (Name), which may be read back to check it
// first; Abort removes it.
type Pending struct {
	*os.File
	path string
	done bool
}

// Create starts writing path atomically: a temporary file beside it, with mode set. Missing
// parent directories are created 0700. Stream into it, then Commit; a deferred Abort cleans up
// whatever did not commit.
func Create(path string, mode os.FileMode) (*Pending, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &Pending{File: f, path: path}, nil
}

// Commit syncs the file and renames it over its path.
func (p *Pending) Commit() error {
	if err := p.Sync(); err != nil {
		return err
	}
	if err := p.Close(); err != nil {
		return err
	}
	if err := os.Rename(p.Name(), p.path); err != nil {
		return err
	}
	p.done = true
	return nil
}

// Abort removes the temporary file unless Commit succeeded; safe to call more than once.
func (p *Pending) Abort() {
	if p.done {
		return
	}
	p.done = true
	p.Close()
	os.Remove(p.Name())
}

// ErrLocked is returned by TryLock when another process holds the lock.
var ErrLocked = errors.New("locked by another process")

// TryLock takes an exclusive flock on path (created 0600) without waiting; the returned
// function releases it. A lock held elsewhere is ErrLocked.
func TryLock(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrLocked
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// Lock takes an exclusive flock on path, waiting until it is free or ctx ends.
func Lock(ctx context.Context, path string) (unlock func(), err error) {
	for {
		unlock, err := TryLock(path)
		if !errors.Is(err, ErrLocked) {
			return unlock, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the lock %s: %w", path, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
