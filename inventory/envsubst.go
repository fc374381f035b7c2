package inventory

import (
	"fmt"
	"strings"
)

// expandEnv replaces ${VAR} and ${VAR:-default} in s with values from lookup; "$$" stands for
// a literal "$". A bare "$" not followed by "{" or "$" is kept as is. ${VAR:-default} uses the
// default when VAR is unset or empty, as the shell does.
func expandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '$' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '{':
		default:
			b.WriteByte(c)
			continue
		}
		end := strings.IndexByte(s[i+2:], '}')
		if end < 0 {
			return "", fmt.Errorf("unclosed %q: write ${NAME} or ${NAME:-default}, or $$ for a literal $", s[i:])
		}
		expr := s[i+2 : i+2+end]
		name, def, hasDef := strings.Cut(expr, ":-")
		if !validEnvName(name) {
			return "", fmt.Errorf("${%s}: %q is not an environment variable name (letters, digits, _; not starting with a digit)", expr, name)
		}
		v, ok := lookup(name)
		switch {
		case ok && (v != "" || !hasDef):
			b.WriteString(v)
		case hasDef:
			b.WriteString(def)
		default:
			return "", fmt.Errorf("environment variable %s is not set: export it, or write ${%s:-default}", name, name)
		}
		i += 2 + end
	}
	return b.String(), nil
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
