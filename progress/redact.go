package progress

import "regexp"

// Safety net behind the packages' own care: anything that looks like a bootstrap token or a
// PEM private key is redacted before it reaches a person, a log or a run record.
var (
	tokenRE = regexp.MustCompile(`\b[a-z0-9]{6}\.[a-z0-9]{16}\b`)
	pemRE   = regexp.MustCompile(`(?s)-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----`)
)

// Redact replaces bootstrap tokens and PEM private keys in s.
func Redact(s string) string {
	s = tokenRE.ReplaceAllString(s, "[redacted-token]")
	return pemRE.ReplaceAllString(s, "[redacted-private-key]")
}
