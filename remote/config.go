package remote

import (
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kforge/kforge/inventory"
)

// SudoMode says how a non-root login becomes root.
type SudoMode string

const (
	SudoAuto         SudoMode = "auto"         // none for root, passwordless otherwise
	SudoNone         SudoMode = "none"         // never use sudo
	SudoPasswordless SudoMode = "passwordless" // sudo -n
	SudoPassword     SudoMode = "password"     // sudo -S, password from SudoPasswordEnv fed on stdin
)

// Config says how to reach one host. It holds names of environment variables, never secrets.
type Config struct {
	Name            string // host name in messages; Address when empty
	Address         string // IP or DNS name (or an alias in ~/.ssh/config)
	Port            int    // 0: ~/.ssh/config, then 22
	User            string // "": ~/.ssh/config, then root
	IdentityFile    string // private key; a certificate is taken from IdentityFile-cert.pub when present
	PassphraseEnv   string // env var with the passphrase of an encrypted IdentityFile
	PasswordEnv     string // env var with a password for password authentication
	Agent           bool   // use the ssh-agent at $SSH_AUTH_SOCK
	KnownHostsFile  string // "": ~/.ssh/known_hosts
	HostKey         string // pinned host key, authorized_keys form; the only key accepted when set
	Bastions        []Bastion
	Sudo            SudoMode // "": auto
	SudoPasswordEnv string

	// AcceptNewHostKeys trusts a host whose key is unknown and appends it to KnownHostsFile
	// (kforge apply --accept-new-host-keys). A changed key is still refused.
	AcceptNewHostKeys bool
	// DialTimeout bounds each connection attempt (TCP + SSH handshake); 10s when 0.
	DialTimeout time.Duration
	// DialRetry is how long failed connection attempts (refused, unreachable, timed out) are
	// retried with backoff, for hosts that are still booting; 0 means one attempt. Auth and host
	// key failures are never retried.
	DialRetry time.Duration
	// KeepAlive is the interval of keepalive requests on the open connection; 15s when 0, <0 off.
	KeepAlive time.Duration
}

// Bastion is one jump host, outermost first.
type Bastion struct {
	Address      string // host or host:port
	Port         int
	User         string // "": the host's user
	IdentityFile string // "": the host's identity file
	HostKey      string // pinned key; "": known_hosts
}

// Options are the process-wide parts: where to log, how to read the environment and files.
type Options struct {
	// Logger receives every command, upload and connection at debug level; nil discards.
	Logger *slog.Logger
	// Getenv reads environment variables (passwords, passphrases, SSH_AUTH_SOCK, HOME); os.Getenv
	// when nil. Tests pass their own.
	Getenv func(string) string
	// SSHConfigFile is the OpenSSH client config to honour (HostName, User, Port, IdentityFile,
	// ProxyJump); "" means ~/.ssh/config; "none" disables it.
	SSHConfigFile string
	// Jumps, when set, shares bastion connections between the hosts dialled with it (one per
	// chain of bastions instead of one per host); its owner closes it after the hosts.
	Jumps *Jumps
	// Traffic, when set, counts the bytes of the workstation's connections (the first hop's).
	Traffic *Traffic
}

func (o Options) getenv(k string) string {
	if o.Getenv != nil {
		return o.Getenv(k)
	}
	return os.Getenv(k)
}

func (o Options) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// expandHome replaces a leading ~ with the home directory.
func (o Options) expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		home := o.getenv("HOME")
		if home == "" {
			home, _ = os.UserHomeDir()
		}
		return filepath.Join(home, p[1:])
	}
	return p
}

// ConfigFor maps an inventory node (with its merged SSH settings) to a Config.
func ConfigFor(n inventory.Node) Config {
	s := n.SSH
	c := Config{
		Name:            n.Name,
		Address:         n.Address,
		Port:            s.Port,
		User:            s.User,
		IdentityFile:    s.IdentityFile,
		PassphraseEnv:   s.PassphraseEnv,
		PasswordEnv:     s.PasswordEnv,
		Agent:           s.Agent == nil || *s.Agent,
		KnownHostsFile:  s.KnownHostsFile,
		HostKey:         s.HostKey,
		Sudo:            SudoMode(s.Sudo),
		SudoPasswordEnv: s.SudoPasswordEnv,
	}
	for _, b := range s.Bastions {
		c.Bastions = append(c.Bastions, Bastion{Address: b.Address, User: b.User, IdentityFile: b.IdentityFile, HostKey: b.HostKey})
	}
	return c
}

func (c Config) name() string {
	if c.Name != "" {
		return c.Name
	}
	return c.Address
}

// splitHostPort splits "host", "host:port" or "[v6]:port"; port 0 when absent.
func splitHostPort(s string) (string, int) {
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, _ := strconv.Atoi(p)
		return h, n
	}
	return strings.Trim(s, "[]"), 0
}

// LogValue makes a Config safe to log: it holds only names of secrets, but say so explicitly.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("name", c.name()), slog.String("address", c.Address), slog.Int("port", c.Port),
		slog.String("user", c.User), slog.String("identityFile", c.IdentityFile),
		slog.Bool("agent", c.Agent), slog.String("sudo", string(c.Sudo)), slog.Int("bastions", len(c.Bastions)),
	)
}
