package remote

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/pkg/sftp"
)

// sftpConn is the host's SFTP session: the sftp subsystem for root, sftp-server under sudo
// otherwise (so uploads to root-owned paths work).
type sftpConn struct {
	c    *sftp.Client
	proc *proc // sudo sftp-server, if any
}

func (s *sftpConn) close() {
	s.c.Close()
	if s.proc != nil {
		s.proc.sess.Close()
	}
}

// sftpServerCommand finds and runs the OpenSSH sftp-server on the usual distributions.
const sftpServerCommand = `for p in /usr/lib/openssh/sftp-server /usr/libexec/openssh/sftp-server /usr/lib/ssh/sftp-server /usr/libexec/sftp-server /usr/lib/sftp-server; do [ -x "$p" ] && exec "$p"; done; echo "sftp-server not found" >&2; exit 127`

func (h *SSH) sftpClient(ctx context.Context) (*sftpConn, error) {
	h.sftpMu.Lock()
	defer h.sftpMu.Unlock()
	if h.sftp != nil {
		return h.sftp, nil
	}
	opts := []sftp.ClientOption{sftp.UseConcurrentWrites(true), sftp.MaxConcurrentRequestsPerFile(64)}
	if h.sudo == SudoNone {
		c, err := sftp.NewClient(h.client, opts...)
		if err != nil {
			return nil, &HostError{Host: h.name, Err: fmt.Errorf("start SFTP: %w (is the sftp subsystem enabled in sshd_config?)", err)}
		}
		h.sftp = &sftpConn{c: c}
		return h.sftp, nil
	}
	p, err := h.start(sftpServerCommand, nil, nil)
	if err != nil {
		return nil, err
	}
	var rejected <-chan struct{}
	if p.filter != nil {
		rejected = p.filter.rejected
	}
	exited := make(chan error, 1)
	go func() { exited <- p.sess.Wait() }()
	select {
	case <-p.ready:
	case <-rejected:
		p.sess.Close()
		return nil, &CommandError{Host: h.name, Command: "sudo sftp-server", ExitCode: -1, Reason: "sudo rejected the password",
			Hint: fmt.Sprintf("the password in $%s is not %s's sudo password on this host", h.sudoEnv, h.user)}
	case err := <-exited:
		if p.filter != nil {
			p.filter.flush()
		}
		return nil, h.exitError("sudo sftp-server", errOr(err, errors.New("exited at once")), p.tail.Bytes())
	case <-ctx.Done():
		p.sess.Close()
		return nil, h.ctxError(ctx, "start of sftp-server", 0, p)
	}
	c, err := sftp.NewClientPipe(p.stdout, p.stdin, opts...)
	if err != nil {
		p.sess.Close()
		return nil, &HostError{Host: h.name, Err: fmt.Errorf("start sftp-server under sudo: %w; stderr: %s", err, strings.TrimSpace(string(p.tail.Bytes())))}
	}
	h.sftp = &sftpConn{c: c, proc: p}
	return h.sftp, nil
}

func errOr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// dropSFTP forgets a broken or aborted SFTP session; the next upload starts a new one.
func (h *SSH) dropSFTP(s *sftpConn) {
	h.sftpMu.Lock()
	defer h.sftpMu.Unlock()
	if h.sftp == s {
		h.sftp = nil
	}
	s.close()
}

// Upload implements Host.
func (h *SSH) Upload(ctx context.Context, f File) (err error) {
	start := time.Now()
	if !path.IsAbs(f.Path) {
		return &HostError{Host: h.name, Err: fmt.Errorf("upload %s: the target path must be absolute", f.Path)}
	}
	if err := f.prepare(); err != nil {
		return &HostError{Host: h.name, Err: err}
	}
	release, err := acquireUploadSlot(ctx, f.Size)
	if err != nil {
		return h.ctxError(ctx, "upload "+f.Path, time.Since(start), nil)
	}
	defer release()
	s, err := h.sftpClient(ctx)
	if err != nil {
		return err
	}
	// Cancelling ctx aborts the SFTP session (blocked requests cannot be cancelled otherwise).
	stop := context.AfterFunc(ctx, func() { h.dropSFTP(s) })
	defer stop()
	skipped, err := h.upload(ctx, s.c, f)
	if err != nil && ctx.Err() != nil {
		return h.ctxError(ctx, "upload "+f.Path, time.Since(start), nil)
	}
	if err != nil {
		if errors.Is(err, sftp.ErrSSHFxConnectionLost) || errors.Is(err, io.EOF) {
			h.dropSFTP(s)
		}
		h.log.Debug("upload failed", "host", h.name, "path", f.Path, "duration", time.Since(start), "err", err)
		return &HostError{Host: h.name, Err: fmt.Errorf("upload %s: %w", f.Path, err)}
	}
	h.log.Debug("upload", "host", h.name, "path", f.Path, "bytes", f.Size, "mode", fmt.Sprintf("%#o", f.Mode), "skipped", skipped, "duration", time.Since(start))
	return nil
}

func (h *SSH) upload(ctx context.Context, c *sftp.Client, f File) (skipped bool, err error) {
	if st, err := c.Lstat(f.Path); err == nil && st.Mode().IsRegular() && f.SHA256 != "" && st.Size() == f.Size {
		sum, err := Output(ctx, h, "sha256sum -- "+Quote(f.Path))
		if err == nil && strings.HasPrefix(string(sum), f.SHA256+" ") {
			uid, gid := ownerOf(st)
			if st.Mode().Perm() != f.Mode.Perm() {
				if err := c.Chmod(f.Path, f.Mode); err != nil {
					return false, fmt.Errorf("chmod: %w", err)
				}
			}
			if (f.UID >= 0 && uid != f.UID) || (f.GID >= 0 && gid != f.GID) {
				if err := c.Chown(f.Path, pick(f.UID, uid), pick(f.GID, gid)); err != nil {
					return false, fmt.Errorf("chown: %w", err)
				}
			}
			return true, nil
		}
	}
	dir := path.Dir(f.Path)
	if err := c.MkdirAll(dir); err != nil {
		return false, fmt.Errorf("create %s: %w", dir, err)
	}
	rnd := make([]byte, 6)
	rand.Read(rnd)
	tmp := path.Join(dir, "."+path.Base(f.Path)+".kforge-"+hex.EncodeToString(rnd))
	w, err := c.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL)
	if err != nil {
		return false, fmt.Errorf("create temporary file %s: %w", tmp, err)
	}
	done := false
	defer func() {
		if !done {
			w.Close()
			c.Remove(tmp)
		}
	}()
	// Mode first, so a secret is never readable by others, not even half written.
	if err := w.Chmod(f.Mode.Perm()); err != nil {
		return false, fmt.Errorf("chmod %s: %w", tmp, err)
	}
	n, err := w.ReadFromWithConcurrency(&ctxReader{ctx: ctx, r: f.Body}, 64)
	if err != nil {
		return false, fmt.Errorf("write %s: %w", tmp, err)
	}
	if f.Size > 0 && n != f.Size {
		return false, fmt.Errorf("write %s: wrote %d bytes, expected %d", tmp, n, f.Size)
	}
	if err := w.Sync(); err != nil && !isUnsupported(err) {
		return false, fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if f.UID >= 0 || f.GID >= 0 {
		if err := w.Chown(pick(f.UID, -1), pick(f.GID, -1)); err != nil {
			return false, fmt.Errorf("chown %s: %w", tmp, err)
		}
		if f.Mode&(os.ModeSetuid|os.ModeSetgid) != 0 {
			w.Chmod(f.Mode)
		}
	}
	if err := w.Close(); err != nil {
		return false, fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := c.PosixRename(tmp, f.Path); err != nil {
		return false, fmt.Errorf("rename %s to %s: %w", tmp, f.Path, err)
	}
	done = true
	return false, nil
}

func pick(v, def int) int {
	if v < 0 {
		return def
	}
	return v
}

func ownerOf(fi os.FileInfo) (int, int) {
	if st, ok := fi.Sys().(*sftp.FileStat); ok {
		return int(st.UID), int(st.GID)
	}
	return -1, -1
}

func isUnsupported(err error) bool {
	var se *sftp.StatusError
	return errors.As(err, &se) && se.FxCode() == sftp.ErrSSHFxOpUnsupported
}

// ctxReader stops a streamed upload when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
