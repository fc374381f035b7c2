package release

import (
	"fmt"
	"regexp"
	"strconv"
)

// versionRE is a Kubernetes version: vMAJOR.MINOR.PATCH without leading zeros, with an
// optional pre-release suffix (v1.36.0-rc.1).
var versionRE = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?$`)

// version is a parsed Kubernetes version.
type version struct {
	major, minor int
}

// minorString is "v1.36" of v1.36.3.
func (v version) minorString() string { return fmt.Sprintf("v%d.%d", v.major, v.minor) }

func parse(s string) (version, error) {
	var v version
	m := versionRE.FindStringSubmatch(s)
	var err1, err2 error
	if m != nil {
		v.major, err1 = strconv.Atoi(m[1])
		v.minor, err2 = strconv.Atoi(m[2])
	}
	if m == nil || err1 != nil || err2 != nil { // Atoi fails only on numbers beyond an int
		return version{}, &VersionError{
			Version: s,
			Msg:     fmt.Sprintf("%q is not a Kubernetes version", s),
			Hint:    "write it as " + Default(),
		}
	}
	return v, nil
}
