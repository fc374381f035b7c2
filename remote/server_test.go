package remote

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// testServer is an in-process SSH server: exec runs `sh -c` on this machine (with a fake sudo
// first on PATH), the sftp subsystem serves this machine's files, direct-tcpip forwards (for
// bastion tests). Hooks let tests cut connections and count attempts.
type testServer struct {
	t       *testing.T
	ln      net.Listener
	addr    string
	hostKey ssh.Signer
	cfg     *ssh.ServerConfig
	bin     string // directory with the fake sudo

	// sudoPassword, when set, makes the fake sudo demand it (on stdin with -S).
	sudoPassword string
	// dropSFTPAfter closes the whole connection after the sftp subsystem read this many bytes.
	dropSFTPAfter int64

	authorized  map[string]bool // marshalled public keys
	password    string
	conns       atomic.Int32         // TCP connections accepted
	keyAttempts atomic.Int32         // public keys offered (all connections)
	onExec      func() (done func()) // called around every exec

	mu      sync.Mutex
	closers []io.Closer
}

const fakeSudo = `#!/bin/sh
# Fake sudo for the in-process server: understands -n, -S, -p PROMPT, --.
nonint=0; stdin=0; prompt="[sudo] password: "
while [ $# -gt 0 ]; do
  case "$1" in -n) nonint=1;; -S) stdin=1;; -k) ;; -p) shift; prompt="$1";; --) shift; break;; *) break;; esac
  shift
done
if [ -n "$FAKE_SUDO_PASSWORD" ]; then
  if [ $nonint = 1 ] || [ $stdin = 0 ]; then echo "sudo: a password is required" >&2; exit 1; fi
  tries=0
  while :; do
    printf '%s' "$prompt" >&2
    IFS= read -r pw || { echo "sudo: no password was provided" >&2; exit 1; }
    [ "$pw" = "$FAKE_SUDO_PASSWORD" ] && break
    tries=$((tries+1)); echo "Sorry, try again." >&2
    [ $tries -ge 3 ] && { echo "sudo: 3 incorrect password attempts" >&2; exit 1; }
  done
fi
export FAKE_SUDO_RAN=1
exec "$@"
`

func newTestServer(t *testing.T) *testServer {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	hk, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{t: t, hostKey: hk, authorized: map[string]bool{}, bin: t.TempDir()}
	if err := os.WriteFile(filepath.Join(s.bin, "sudo"), []byte(fakeSudo), 0o755); err != nil {
		t.Fatal(err)
	}
	s.cfg = &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			s.keyAttempts.Add(1)
			k := key
			if c, ok := key.(*ssh.Certificate); ok {
				k = c // certificates are authorized by their own marshalled form in these tests
			}
			s.mu.Lock()
			ok := s.authorized[string(k.Marshal())]
			s.mu.Unlock()
			if ok {
				return nil, nil
			}
			return nil, errors.New("not authorized")
		},
		PasswordCallback: func(_ ssh.ConnMetadata, pw []byte) (*ssh.Permissions, error) {
			if s.password != "" && string(pw) == s.password {
				return nil, nil
			}
			return nil, errors.New("wrong password")
		},
		MaxAuthTries: 6,
	}
	s.cfg.AddHostKey(hk)
	s.listen("127.0.0.1:0")
	t.Cleanup(s.close)
	return s
}

func (s *testServer) listen(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		s.t.Fatal(err)
	}
	s.ln, s.addr = ln, ln.Addr().String()
	go s.serve(ln)
}

func (s *testServer) authorize(k ssh.PublicKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.authorized[string(k.Marshal())] = true
}

func (s *testServer) track(c io.Closer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closers = append(s.closers, c)
}

func (s *testServer) close() {
	s.ln.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.closers {
		c.Close()
	}
}

func (s *testServer) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.conns.Add(1)
		s.track(c)
		go s.handle(c)
	}
}

func (s *testServer) handle(nc net.Conn) {
	conn, chans, reqs, err := ssh.NewServerConn(nc, s.cfg)
	if err != nil {
		nc.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	for nch := range chans {
		switch nch.ChannelType() {
		case "session":
			ch, creqs, err := nch.Accept()
			if err != nil {
				continue
			}
			go s.session(conn, ch, creqs)
		case "direct-tcpip":
			var p struct {
				Host     string
				Port     uint32
				OrigHost string
				OrigPort uint32
			}
			if err := ssh.Unmarshal(nch.ExtraData(), &p); err != nil {
				nch.Reject(ssh.ConnectionFailed, "bad request")
				continue
			}
			dst, err := net.Dial("tcp", net.JoinHostPort(p.Host, fmt.Sprint(p.Port)))
			if err != nil {
				nch.Reject(ssh.ConnectionFailed, err.Error())
				continue
			}
			ch, creqs, err := nch.Accept()
			if err != nil {
				dst.Close()
				continue
			}
			go ssh.DiscardRequests(creqs)
			go func() { io.Copy(ch, dst); ch.CloseWrite() }()
			go func() { io.Copy(dst, ch); dst.Close() }()
		default:
			nch.Reject(ssh.UnknownChannelType, "no")
		}
	}
}

var signals = map[string]syscall.Signal{"TERM": syscall.SIGTERM, "KILL": syscall.SIGKILL, "INT": syscall.SIGINT, "HUP": syscall.SIGHUP}

func (s *testServer) session(conn *ssh.ServerConn, ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	var cmd *exec.Cmd
	for req := range reqs {
		switch req.Type {
		case "exec":
			var p struct{ Command string }
			ssh.Unmarshal(req.Payload, &p)
			req.Reply(true, nil)
			cmd = exec.Command("sh", "-c", p.Command)
			cmd.Env = append(os.Environ(), "PATH="+s.bin+":"+os.Getenv("PATH"))
			if s.sudoPassword != "" {
				cmd.Env = append(cmd.Env, "FAKE_SUDO_PASSWORD="+s.sudoPassword)
			}
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			// Like sshd, do not wait for the client's stdin to end once the command exited.
			cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
			stdin, _ := cmd.StdinPipe()
			go func() { io.Copy(stdin, ch); stdin.Close() }()
			if err := cmd.Start(); err != nil {
				ch.SendRequest("exit-status", false, ssh.Marshal(struct{ C uint32 }{127}))
				return
			}
			finished := func() {}
			if s.onExec != nil {
				finished = s.onExec()
			}
			go func() {
				err := cmd.Wait()
				finished()
				ch.CloseWrite()
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
						name := "KILL"
						for n, sig := range signals {
							if sig == ws.Signal() {
								name = n
							}
						}
						ch.SendRequest("exit-signal", false, ssh.Marshal(struct {
							Signal     string
							CoreDumped bool
							Msg, Lang  string
						}{Signal: name}))
						ch.Close()
						return
					}
				}
				code := uint32(0)
				if err != nil {
					code = uint32(cmd.ProcessState.ExitCode())
				}
				ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, code))
				ch.Close()
			}()
		case "subsystem":
			var p struct{ Name string }
			ssh.Unmarshal(req.Payload, &p)
			if p.Name != "sftp" {
				req.Reply(false, nil)
				continue
			}
			req.Reply(true, nil)
			var rw io.ReadWriteCloser = ch
			if s.dropSFTPAfter > 0 {
				rw = &dropper{Channel: ch, left: s.dropSFTPAfter, conn: conn}
			}
			srv, err := sftp.NewServer(rw)
			if err != nil {
				return
			}
			go func() {
				srv.Serve()
				ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, 0))
				ch.Close()
			}()
		case "signal":
			var p struct{ Signal string }
			ssh.Unmarshal(req.Payload, &p)
			if cmd != nil && cmd.Process != nil {
				if sig, ok := signals[p.Signal]; ok {
					syscall.Kill(-cmd.Process.Pid, sig)
				}
			}
		default:
			if req.WantReply {
				req.Reply(false, nil)
			}
		}
	}
	// Channel closed by the client: end what still runs, like sshd does.
	if cmd != nil && cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGHUP)
	}
}

// dropper cuts the whole SSH connection once the sftp server has read left bytes: the
// "network dies in the middle of an upload" case.
type dropper struct {
	ssh.Channel
	left int64
	conn *ssh.ServerConn
}

func (d *dropper) Read(p []byte) (int, error) {
	if d.left <= 0 {
		d.conn.Close()
		return 0, io.EOF
	}
	if int64(len(p)) > d.left {
		p = p[:d.left]
	}
	n, err := d.Channel.Read(p)
	d.left -= int64(n)
	return n, err
}

// clientKey makes a key pair and writes the private key (OpenSSH format, encrypted when
// passphrase is set) to dir/name and the public key to dir/name.pub.
func clientKey(t *testing.T, dir, name, passphrase string) (string, ssh.Signer) {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	var blk *pem.Block
	var err error
	if passphrase == "" {
		blk, err = ssh.MarshalPrivateKey(priv, "")
	} else {
		blk, err = ssh.MarshalPrivateKeyWithPassphrase(priv, "", []byte(passphrase))
	}
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	s, _ := ssh.NewSignerFromKey(priv)
	if err := os.WriteFile(path, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".pub", ssh.MarshalAuthorizedKey(s.PublicKey()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, s
}

func pemEncode(b *pem.Block) []byte { return pem.EncodeToMemory(b) }
