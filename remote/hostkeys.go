package remote

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// knownHostsMu serialises appends to known_hosts files within the process (many hosts are
// accepted at once in a fan-out).
var knownHostsMu sync.Mutex

// hostKeyCheck returns the host key callback and the host key algorithms to ask for (those of
// the keys we know, so a server with several keys presents the one we can check).
func hostKeyCheck(name string, h hop, cfg Config, o Options) (ssh.HostKeyCallback, []string, error) {
	if h.hostKey != "" {
		pinned, _, _, _, err := ssh.ParseAuthorizedKey([]byte(h.hostKey))
		if err != nil {
			return nil, nil, fmt.Errorf("%s: pinned host key for %s (ssh.hostKey) does not parse: %v; use the \"ssh-ed25519 AAAA...\" form from the host's /etc/ssh/ssh_host_*_key.pub", name, h.label, err)
		}
		cb := func(_ string, _ net.Addr, key ssh.PublicKey) error {
			if bytes.Equal(key.Marshal(), pinned.Marshal()) {
				return nil
			}
			return &HostKeyError{Host: name, Addr: h.label, Got: fingerprint(key), Want: []string{fingerprint(pinned) + " (pinned in the inventory)"},
				Hint: "if the host was reinstalled, check its new key on the host itself (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub) and update ssh.hostKey in the inventory"}
		}
		return cb, algorithmsFor(pinned.Type()), nil
	}
	file := cfg.KnownHostsFile
	if file == "" {
		file = "~/.ssh/known_hosts"
	}
	file = o.expandHome(file)
	var db ssh.HostKeyCallback
	if _, err := os.Stat(file); err == nil {
		db, err = knownhosts.New(file)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: known_hosts file %s: %w", name, file, err)
		}
	} else if errors.Is(err, os.ErrNotExist) {
		db = func(string, net.Addr, ssh.PublicKey) error { return &knownhosts.KeyError{} }
	} else {
		return nil, nil, fmt.Errorf("%s: known_hosts file: %w", name, err)
	}
	host, port := splitHostPort(h.addr)
	cb := func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := db(hostname, remote, key)
		if err == nil {
			return nil
		}
		var ke *knownhosts.KeyError
		var re *knownhosts.RevokedError
		switch {
		case errors.As(err, &re):
			return &HostKeyError{Host: name, Addr: h.label, Revoked: true, Got: fingerprint(key), KnownHosts: file,
				Hint: fmt.Sprintf("the key is marked @revoked in %s:%d; the host must get a new host key", re.Revoked.Filename, re.Revoked.Line)}
		case errors.As(err, &ke) && len(ke.Want) == 0:
			if cfg.AcceptNewHostKeys {
				return appendKnownHost(file, hostname, key)
			}
			return &HostKeyError{Host: name, Addr: h.label, Unknown: true, Got: fingerprint(key), KnownHosts: file,
				Hint: fmt.Sprintf("compare the fingerprint with the host's own (ssh-keygen -lf /etc/ssh/ssh_host_%s_key.pub on its console), then re-run with --accept-new-host-keys to trust it and append it to %s, or add it yourself: ssh-keyscan -p %d -t %s %s >> %s",
					keyFileType(key), file, port, keyFileType(key), host, file)}
		case errors.As(err, &ke):
			var want []string
			for _, k := range ke.Want {
				want = append(want, fmt.Sprintf("%s (%s:%d)", fingerprint(k.Key), k.Filename, k.Line))
			}
			return &HostKeyError{Host: name, Addr: h.label, Got: fingerprint(key), Want: want, KnownHosts: file,
				Hint: fmt.Sprintf("if the host was reinstalled, check its new key on the host itself (ssh-keygen -lf /etc/ssh/ssh_host_%s_key.pub), then remove the old entry: ssh-keygen -f %s -R %s", keyFileType(key), file, knownhosts.Normalize(h.addr))}
		}
		// A certificate that no trusted CA signed, or that is invalid (principals, validity).
		hk := &HostKeyError{Host: name, Addr: h.label, Got: fingerprint(key), KnownHosts: file,
			Hint: fmt.Sprintf("the host's certificate was refused (%v); check its CA against the @cert-authority lines in %s and its principals and validity (ssh-keygen -L -f /etc/ssh/ssh_host_*_key-cert.pub on the host)", err, file)}
		if c, ok := key.(*ssh.Certificate); ok {
			hk.Got = fingerprint(c.Key) + " certified by " + fingerprint(c.SignatureKey)
			hk.Want = []string{"a host certificate signed by a CA in " + file}
		}
		return hk
	}
	algos := knownAlgorithms(db, h.addr)
	if hostHasCA(file, h.addr) {
		algos = nil // let the server present its certificate (x/crypto prefers certificate algorithms)
	}
	return cb, algos, nil
}

// hostHasCA reports whether an @cert-authority line of file covers addr. knownhosts does not
// say which of its lines are CAs, so the CA lines alone are loaded and asked.
func hostHasCA(file, addr string) bool {
	data, err := os.ReadFile(file)
	if err != nil || !bytes.Contains(data, []byte("@cert-authority")) {
		return false
	}
	var ca bytes.Buffer
	for _, line := range bytes.Split(data, []byte("\n")) {
		if f := bytes.Fields(line); len(f) > 0 && string(f[0]) == "@cert-authority" {
			ca.Write(line)
			ca.WriteByte('\n')
		}
	}
	tmp, err := os.CreateTemp("", "kforge-known-cas-")
	if err != nil {
		return false
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(ca.Bytes())
	tmp.Close()
	if err != nil {
		return false
	}
	db, err := knownhosts.New(tmp.Name())
	if err != nil {
		return false
	}
	return knownAlgorithms(db, addr) != nil
}

// knownAlgorithms asks the database which keys it holds for addr by offering a key it cannot
// hold, and returns the matching host key algorithms (nil: let the server choose).
func knownAlgorithms(db ssh.HostKeyCallback, addr string) []string {
	probe := probeKey()
	err := db(addr, &net.TCPAddr{IP: net.IPv4zero}, probe)
	var ke *knownhosts.KeyError
	if !errors.As(err, &ke) || len(ke.Want) == 0 {
		return nil
	}
	var algos []string
	seen := map[string]bool{}
	for _, k := range ke.Want {
		for _, a := range algorithmsFor(k.Key.Type()) {
			if !seen[a] {
				seen[a] = true
				algos = append(algos, a)
			}
		}
	}
	return algos
}

var probe = sync.OnceValue(func() ssh.PublicKey {
	// The all-zero ed25519 key: well-formed, and in nobody's known_hosts.
	k, _ := ssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))
	return k
})

func probeKey() ssh.PublicKey { return probe() }

func algorithmsFor(keyType string) []string {
	switch keyType {
	case ssh.KeyAlgoRSA:
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	case ssh.CertAlgoRSAv01:
		return []string{ssh.CertAlgoRSASHA512v01, ssh.CertAlgoRSASHA256v01, ssh.CertAlgoRSAv01}
	}
	return []string{keyType}
}

// keyFileType is the name OpenSSH uses in /etc/ssh/ssh_host_<type>_key.
func keyFileType(k ssh.PublicKey) string {
	switch t := k.Type(); {
	case strings.Contains(t, "ed25519"):
		return "ed25519"
	case strings.Contains(t, "ecdsa"):
		return "ecdsa"
	case strings.Contains(t, "rsa"):
		return "rsa"
	default:
		return t
	}
}

func fingerprint(k ssh.PublicKey) string {
	return k.Type() + " " + ssh.FingerprintSHA256(k)
}

// appendKnownHost adds hostname's key to file in OpenSSH format (trust on first use).
func appendKnownHost(file, hostname string, key ssh.PublicKey) error {
	knownHostsMu.Lock()
	defer knownHostsMu.Unlock()
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("accept new host key: %w", err)
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("accept new host key: %w", err)
	}
	line := knownhosts.Line([]string{knownhosts.Normalize(hostname)}, key) + "\n"
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return fmt.Errorf("accept new host key: append to %s: %w", file, err)
	}
	return f.Close()
}
