package remote

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/kevinburke/ssh_config"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// hop is one SSH connection in a chain: bastions first, the host last.
type hop struct {
	label        string // "bastion 10.0.0.1:22" or the address, for messages
	addr         string // host:port
	user         string
	identityFile string
	hostKey      string // pinned
}

// plan is a Config resolved against ~/.ssh/config and defaults.
type plan struct {
	name string
	hops []hop
}

// resolve applies ~/.ssh/config (HostName, Port, User, IdentityFile, ProxyJump) where cfg leaves
// a field empty, then defaults.
func resolve(cfg Config, o Options) (plan, error) {
	sc, err := loadSSHConfig(o)
	if err != nil {
		return plan{}, err
	}
	get := func(alias, key string) string {
		if sc == nil {
			return ""
		}
		v, _ := sc.Get(alias, key)
		return v
	}
	// resolve fills what the inventory left empty from ~/.ssh/config (by the written host as
	// alias), then from the defaults given.
	resolve := func(address string, port int, user, identity, defUser, defIdentity string) (addr, u, id, alias string) {
		host, p := splitHostPort(address)
		if port != 0 {
			p = port
		}
		alias = host
		if hn := get(alias, "HostName"); hn != "" {
			host = hn
		}
		if p == 0 {
			fmt.Sscan(get(alias, "Port"), &p)
		}
		if p == 0 {
			p = 22
		}
		if user == "" {
			user = get(alias, "User")
		}
		if user == "" {
			user = defUser
		}
		if identity == "" {
			identity = get(alias, "IdentityFile")
		}
		if identity == "" {
			identity = defIdentity
		}
		return net.JoinHostPort(host, fmt.Sprint(p)), user, identity, alias
	}
	target, user, identity, alias := resolve(cfg.Address, cfg.Port, cfg.User, cfg.IdentityFile, "root", "")
	p := plan{name: cfg.name()}
	bastions := cfg.Bastions
	if len(bastions) == 0 {
		if pj := get(alias, "ProxyJump"); pj != "" && pj != "none" {
			for _, j := range strings.Split(pj, ",") {
				b := Bastion{Address: strings.TrimPrefix(strings.TrimSpace(j), "ssh://")}
				if u, a, ok := strings.Cut(b.Address, "@"); ok {
					b.User, b.Address = u, a
				}
				bastions = append(bastions, b)
			}
		}
	}
	for _, b := range bastions {
		addr, bu, bi, _ := resolve(b.Address, b.Port, b.User, b.IdentityFile, user, identity)
		p.hops = append(p.hops, hop{label: "bastion " + addr, addr: addr, user: bu, identityFile: bi, hostKey: b.HostKey})
	}
	p.hops = append(p.hops, hop{label: target, addr: target, user: user, identityFile: identity, hostKey: cfg.HostKey})
	return p, nil
}

func loadSSHConfig(o Options) (*ssh_config.Config, error) {
	path := o.SSHConfigFile
	if path == "none" {
		return nil, nil
	}
	if path == "" {
		path = o.expandHome("~/.ssh/config")
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && o.SSHConfigFile == "" {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read SSH client config: %w", err)
	}
	sc, err := ssh_config.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return sc, nil
}

// credentials are the auth methods for one hop and a description of what they offer (no secrets).
type credentials struct {
	methods []ssh.AuthMethod
	offered []string
	agent   net.Conn // closed after the handshake
	problem string   // why a configured credential could not be used, for the hint
}

func (c *credentials) close() {
	if c.agent != nil {
		c.agent.Close()
	}
}

// authFor builds the auth methods for hop h: the identity file (and its certificate), the agent
// (only the identity file's key when one is given), then a password.
func authFor(h hop, cfg Config, o Options) (*credentials, error) {
	cr := &credentials{}
	var signers []ssh.Signer
	var want ssh.PublicKey // the identity file's public key, to filter the agent
	files := []string{}
	if h.identityFile != "" {
		files = append(files, o.expandHome(h.identityFile))
	}
	for _, f := range files {
		s, pub, err := loadKey(f, cfg.PassphraseEnv, o)
		if err != nil {
			return nil, err
		}
		want = pub
		if cert := loadCert(f, pub); cert != nil && s != nil {
			if cs, err := ssh.NewCertSigner(cert, s); err == nil {
				signers = append(signers, cs)
				cr.offered = append(cr.offered, "certificate "+f+"-cert.pub")
			}
		}
		if s != nil {
			signers = append(signers, s)
			cr.offered = append(cr.offered, "key "+f)
		} else {
			cr.problem = fmt.Sprintf("%s is encrypted and %s", f, passphraseHint(cfg.PassphraseEnv))
		}
	}
	if cfg.Agent {
		if sock := o.getenv("SSH_AUTH_SOCK"); sock != "" {
			conn, err := net.Dial("unix", sock)
			if err == nil {
				cr.agent = conn
				ag := agent.NewClient(conn)
				all, err := ag.Signers()
				if err == nil {
					n := 0
					for _, s := range all {
						k := s.PublicKey()
						if c, ok := k.(*ssh.Certificate); ok {
							k = c.Key
						}
						if want != nil && !bytes.Equal(k.Marshal(), want.Marshal()) {
							continue
						}
						signers = append(signers, s)
						n++
					}
					if n > 0 || want == nil {
						cr.offered = append(cr.offered, fmt.Sprintf("agent (%d keys)", n))
					}
				}
			}
		}
	}
	if h.identityFile == "" && !hasAgentKeys(cr) {
		for _, name := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			f := o.expandHome("~/.ssh/" + name)
			if _, err := os.Stat(f); err != nil {
				continue
			}
			if s, _, err := loadKey(f, cfg.PassphraseEnv, o); err == nil && s != nil {
				signers = append(signers, s)
				cr.offered = append(cr.offered, "key "+f)
			}
		}
	}
	if len(signers) > 0 {
		cr.methods = append(cr.methods, ssh.PublicKeys(signers...))
	}
	if cfg.PasswordEnv != "" {
		pw := Secret(o.getenv(cfg.PasswordEnv))
		if pw == "" {
			cr.problem = "$" + cfg.PasswordEnv + " (ssh.passwordEnv) is empty or unset"
		} else {
			cr.methods = append(cr.methods, ssh.Password(pw.Reveal()),
				ssh.KeyboardInteractive(func(_, _ string, qs []string, _ []bool) ([]string, error) {
					a := make([]string, len(qs))
					for i := range a {
						a[i] = pw.Reveal()
					}
					return a, nil
				}))
			cr.offered = append(cr.offered, "password from $"+cfg.PasswordEnv)
		}
	}
	return cr, nil
}

func hasAgentKeys(cr *credentials) bool {
	for _, o := range cr.offered {
		if strings.HasPrefix(o, "agent (") && o != "agent (0 keys)" {
			return true
		}
	}
	return false
}

func passphraseHint(env string) string {
	if env == "" {
		return "no passphrase is configured: set ssh.passphraseEnv to the name of an environment variable holding it, or load the key into ssh-agent (ssh-add)"
	}
	return "$" + env + " (ssh.passphraseEnv) is empty or unset: export it, or load the key into ssh-agent (ssh-add)"
}

// loadKey reads a private key. An encrypted key without a passphrase yields a nil signer and its
// public key (when the file format carries it, or from file.pub), so the agent can still be used.
func loadKey(path, passEnv string, o Options) (ssh.Signer, ssh.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read SSH identity file: %w", err)
	}
	s, err := ssh.ParsePrivateKey(data)
	if err == nil {
		return s, s.PublicKey(), nil
	}
	var pm *ssh.PassphraseMissingError
	if !errors.As(err, &pm) {
		return nil, nil, fmt.Errorf("SSH identity file %s: %w", path, err)
	}
	pub := pm.PublicKey
	if pub == nil {
		if b, err := os.ReadFile(path + ".pub"); err == nil {
			pub, _, _, _, _ = ssh.ParseAuthorizedKey(b)
		}
	}
	pass := ""
	if passEnv != "" {
		pass = o.getenv(passEnv)
	}
	if pass == "" {
		return nil, pub, nil
	}
	s, err = ssh.ParsePrivateKeyWithPassphrase(data, []byte(pass))
	if err != nil {
		if errors.Is(err, x509.IncorrectPasswordError) {
			return nil, nil, fmt.Errorf("SSH identity file %s: the passphrase in $%s is wrong", path, passEnv)
		}
		return nil, nil, fmt.Errorf("SSH identity file %s: %w", path, err)
	}
	return s, s.PublicKey(), nil
}

// loadCert reads path-cert.pub when it exists and certifies pub.
func loadCert(path string, pub ssh.PublicKey) *ssh.Certificate {
	b, err := os.ReadFile(path + "-cert.pub")
	if err != nil || pub == nil {
		return nil
	}
	k, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		return nil
	}
	c, ok := k.(*ssh.Certificate)
	if !ok || !bytes.Equal(c.Key.Marshal(), pub.Marshal()) {
		return nil
	}
	return c
}
