package inventory

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/invopop/jsonschema"
	"gopkg.in/yaml.v3"
)

const hour = time.Hour

// Duration is a time span written as a Go duration ("8760h", "90m") or in whole days ("365d").
type Duration time.Duration

// ParseDuration reads "365d", "8760h" or any Go duration; it must be positive.
func ParseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%q is not a whole, positive number of days", s)
		}
		return Duration(time.Duration(n) * 24 * time.Hour), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration like 365d or 8760h", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q must be positive", s)
	}
	return Duration(d), nil
}

// String prints whole days as "Nd" and anything else as a Go duration.
func (d Duration) String() string {
	td := time.Duration(d)
	if td > 0 && td%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", td/(24*time.Hour))
	}
	s := td.String() // without Go's zero tails: "12h", "12h15m", "1m", not "12h0m0s"
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a duration like 365d or 8760h")
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// JSONSchema describes Duration for `kforge inventory schema`.
func (Duration) JSONSchema() *jsonschema.Schema {
	return &jsonschema.Schema{
		Type:    "string",
		Pattern: `^([1-9][0-9]*d|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$`,
	}
}
