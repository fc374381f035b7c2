// Package remote is how kforge talks to hosts: one small Host interface, an SSH/SFTP
// implementation of it, free functions over it (mkdir, systemctl, output), a fan-out helper and
// typed errors that say what failed, where, and what to do next.
//
// Everything a Host runs runs as root: the SSH implementation wraps commands in sudo when the
// login user is not root (see SudoMode). Nothing in this package prints; it logs to the
// *slog.Logger it is given, at debug level, and never logs a secret.
package remote

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// Host is one machine kforge works on.
type Host interface {
	// Name is the host's name in messages and logs (the inventory node name).
	Name() string
	// Run runs c.Command as root through the remote shell and waits for it. A non-zero exit is a
	// *CommandError; the context's deadline or cancellation ends the remote command.
	Run(ctx context.Context, c Cmd) error
	// Upload writes f atomically: a temporary file beside the target, synced, chmod and chown,
	// then renamed over the target. Parent directories are created. When the target already has
	// the same content, mode and owner, nothing is written.
	Upload(ctx context.Context, f File) error
}

// Cmd is one remote command. Command is a shell command line; quote arguments with Quote.
type Cmd struct {
	Command string
	Stdin   io.Reader // nil: empty stdin
	Stdout  io.Writer // nil: discarded
	Stderr  io.Writer // nil: discarded (the tail is still kept for the error)
}

// File is one file to upload.
type File struct {
	// Path is the absolute target path on the host.
	Path string
	// Body is the content. It is read once; when Size and SHA256 are unset and Body is an
	// io.ReadSeeker, it is read twice (hash, then upload).
	Body io.Reader
	// Size is the length of Body; -1 or 0 with SHA256 unset means "find out".
	Size int64
	// SHA256 is the hex sha256 of Body; used to skip files that are already there.
	SHA256 string
	// Mode is the permission bits of the target (0644 if zero).
	Mode fs.FileMode
	// UID and GID own the target; 0 (root) by default, -1 leaves the uploader's ownership.
	UID, GID int
}

// Bytes returns a File with data as its content.
func Bytes(path string, data []byte, mode fs.FileMode) File {
	sum := sha256.Sum256(data)
	return File{Path: path, Body: bytes.NewReader(data), Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]), Mode: mode}
}

// LocalFile returns a File streamed from the local file src, hashing it first. The caller closes
// the returned closer after the upload.
func LocalFile(src, path string, mode fs.FileMode) (File, io.Closer, error) {
	f, err := os.Open(src)
	if err != nil {
		return File{}, nil, err
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return File{}, nil, fmt.Errorf("read %s: %w", src, err)
	}
	return File{Path: path, Body: f, Size: n, SHA256: hex.EncodeToString(h.Sum(nil)), Mode: mode}, f, nil
}

// prepare fills in Size and SHA256 when they are missing and Body can be read twice, and
// defaults Mode.
func (f *File) prepare() error {
	if f.Mode == 0 {
		f.Mode = 0o644
	}
	if f.Body == nil {
		f.Body = bytes.NewReader(nil)
	}
	if f.SHA256 != "" && f.Size > 0 {
		return nil
	}
	rs, ok := f.Body.(io.ReadSeeker)
	if !ok {
		return nil
	}
	start, err := rs.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil
	}
	h := sha256.New()
	n, err := io.Copy(h, rs)
	if err != nil {
		return fmt.Errorf("read content of %s: %w", f.Path, err)
	}
	if _, err := rs.Seek(start, io.SeekStart); err != nil {
		return fmt.Errorf("rewind content of %s: %w", f.Path, err)
	}
	f.Size, f.SHA256 = n, hex.EncodeToString(h.Sum(nil))
	return nil
}
