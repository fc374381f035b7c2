package release

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
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

// Compare orders two Kubernetes versions: -1 when a is older than b, 0 when equal, +1 when
// newer. A pre-release is older than its release (v1.37.0-rc.1 < v1.37.0); pre-releases of one
// patch compare as text. Versions that do not parse sort after those that do, as text.
func Compare(a, b string) int {
	ka, okA := parseSemver(a)
	kb, okB := parseSemver(b)
	switch {
	case !okA && !okB:
		return strings.Compare(a, b)
	case !okA:
		return 1
	case !okB:
		return -1
	}
	if c := cmp.Or(cmp.Compare(ka.Major, kb.Major), cmp.Compare(ka.Minor, kb.Minor), cmp.Compare(ka.Patch, kb.Patch)); c != 0 {
		return c
	}
	switch {
	case ka.Pre == kb.Pre:
		return 0
	case ka.Pre == "":
		return 1
	case kb.Pre == "":
		return -1
	}
	return strings.Compare(ka.Pre, kb.Pre)
}

// Semver is a Kubernetes version as numbers: v1.37.0-rc.1 is {1, 37, 0, "rc.1"}.
type Semver struct {
	Major, Minor, Patch int
	Pre                 string // the pre-release, without its '-'; "" for a release
}

// parseSemver reads a Kubernetes version (versionRE) into its numbers.
func parseSemver(s string) (Semver, bool) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return Semver{}, false
	}
	var n [3]int
	for i := range n {
		v, err := strconv.Atoi(m[i+1])
		if err != nil {
			return Semver{}, false
		}
		n[i] = v
	}
	return Semver{Major: n[0], Minor: n[1], Patch: n[2], Pre: strings.TrimPrefix(m[4], "-")}, true
}

// SortVersions returns Kubernetes versions oldest first (Compare), each once.
func SortVersions(vs []string) []string {
	out := slices.Clone(vs)
	slices.SortFunc(out, Compare)
	return slices.Compact(out)
}
