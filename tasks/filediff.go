package tasks

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/pmezard/go-difflib/difflib"
)

// How plan shows a file it would write, without ever printing key material:
//   - a private key (*.key) is never read from the host nor shown: "private key, not shown";
//   - a certificate (*.crt) is described (subject, issuer, SANs, validity, serial) and the
//     descriptions are diffed, which shows why it changes (a new SAN, a renewal, a new CA);
//   - any other file is diffed line by line, with the values of secret fields (kubeconfig
//     client keys, tokens, passwords, registry Authorization, the encryption keys of the API
//     servers' EncryptionConfiguration) replaced by a tag: the same value
//     gets the same tag within one plan, so a changed secret shows as a changed tag, and a tag
//     is an HMAC under a key made for this plan alone, so it says nothing about the value.

// secretField matches a line whose value is a secret, in YAML (kubeconfigs), TOML (containerd's
// hosts.toml) or INI-like files; group 1 is everything up to the value.
var secretField = regexp.MustCompile(`(?i)^(\s*(?:- )?"?(?:client-key-data|token|password|authorization|auth|private-key|secret)"?\s*[:=]\s*)(\S.*)$`)

// blobField matches a line holding a base64 certificate (public, but unreadable in a diff).
var blobField = regexp.MustCompile(`^(\s*(?:client-certificate-data|certificate-authority-data)\s*:\s*)(\S+)$`)

// redactor tags secret values with an HMAC under a key of its own.
type redactor struct{ key []byte }

func newRedactor(random io.Reader) *redactor {
	key := make([]byte, 32)
	if _, err := io.ReadFull(random, key); err != nil {
		panic(err) // crypto/rand does not fail
	}
	return &redactor{key: key}
}

func (r *redactor) tag(v string) string {
	m := hmac.New(sha256.New, r.key)
	m.Write([]byte(v))
	return hex.EncodeToString(m.Sum(nil))[:8]
}

// redact replaces secret values in text by tags.
func (r *redactor) redact(text string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if m := secretField.FindStringSubmatch(l); m != nil {
			lines[i] = m[1] + "<secret " + r.tag(m[2]) + ">"
		} else if m := blobField.FindStringSubmatch(l); m != nil {
			sum := sha256.Sum256([]byte(m[2]))
			lines[i] = m[1] + "<certificate sha256:" + hex.EncodeToString(sum[:])[:12] + ">"
		}
	}
	return strings.Join(lines, "\n")
}

func isPrivateKey(p string) bool { return strings.HasSuffix(p, ".key") }

// fileDiff is how plan shows a file going from old to new (old is nil for a new file): a unified
// diff, or a note saying why there is none.
func (r *redactor) fileDiff(p string, old, new []byte, created bool) (diff, note string) {
	switch {
	case isPrivateKey(p):
		return "", "private key, not shown"
	case strings.HasSuffix(p, ".crt"):
		if created {
			return "", "certificate " + strings.ReplaceAll(describeCerts(new), "\n", "; ")
		}
		return unified(p, describeCerts(old), describeCerts(new)), ""
	case !utf8.Valid(new) || (old != nil && !utf8.Valid(old)):
		return "", fmt.Sprintf("binary, %d bytes", len(new))
	case created:
		return "", fmt.Sprintf("%d lines", strings.Count(string(new), "\n"))
	}
	return unified(p, r.redact(string(old)), r.redact(string(new))), ""
}

// unified is a unified diff of two texts with three lines of context.
func unified(p, a, b string) string {
	d, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(a), B: difflib.SplitLines(b),
		FromFile: "host:" + p, ToFile: "apply:" + p, Context: 3,
	})
	if err != nil {
		return ""
	}
	return d
}

// describeCerts describes each certificate in PEM data, one field per line, for a diff.
func describeCerts(data []byte) string {
	var b strings.Builder
	for {
		var blk *pem.Block
		blk, data = pem.Decode(data)
		if blk == nil {
			break
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			fmt.Fprintf(&b, "unparseable certificate: %v\n", err)
			continue
		}
		fmt.Fprintf(&b, "subject: %s\nissuer: %s\n", c.Subject, c.Issuer)
		var sans []string
		sans = append(sans, c.DNSNames...)
		for _, ip := range c.IPAddresses {
			sans = append(sans, ip.String())
		}
		if len(sans) > 0 {
			fmt.Fprintf(&b, "SANs: %s\n", strings.Join(sans, ", "))
		}
		fmt.Fprintf(&b, "valid: %s to %s\nserial: %x\n", c.NotBefore.UTC().Format("2006-01-02 15:04"), c.NotAfter.UTC().Format("2006-01-02 15:04"), c.SerialNumber)
	}
	return b.String()
}
