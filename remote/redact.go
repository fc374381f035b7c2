package remote

import (
	"log/slog"
	"strings"
)

// Secret is a string that never shows itself: printing or logging it yields "[redacted]".
type Secret string

func (Secret) String() string               { return "[redacted]" }
func (Secret) GoString() string             { return "[redacted]" }
func (Secret) LogValue() slog.Value         { return slog.StringValue("[redacted]") }
func (Secret) MarshalText() ([]byte, error) { return []byte("[redacted]"), nil }

// Reveal returns the secret's value, for the one place that must send it.
func (s Secret) Reveal() string { return string(s) }

// Redact replaces every occurrence of each non-empty secret in s with "[redacted]".
func Redact(s string, secrets ...string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "[redacted]")
		}
	}
	return s
}
