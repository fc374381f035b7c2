package facts

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ParseError is output Parse cannot read: which line (1-based, 0 for the output as a whole),
// what it held and what was wrong.
type ParseError struct {
	Line int
	Text string
	Err  string
}

func (e *ParseError) Error() string {
	if e.Line == 0 {
		return "facts output: " + e.Err
	}
	return fmt.Sprintf("facts output line %d %q: %s", e.Line, e.Text, e.Err)
}

// v1Controllers are the cgroup v1 controller names (mount options naming one are controllers).
var v1Controllers = []string{"blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "hugetlb", "memory", "misc", "net_cls", "net_prio", "perf_event", "pids", "rdma"}

// bigEndian are the `uname -m` values of big-endian machines, where /proc/net/tcp prints
// addresses in network order.
var bigEndian = []string{"s390x", "ppc64", "ppc", "mips", "mips64", "sparc64", "m68k"}

var versionRE = regexp.MustCompile(`\d+\.\d+(?:\.\d+)*`)

// Parse reads the output of Script, each line by the facts table's row that owns its key. It
// is strict about what it knows — a missing end marker (output cut short), a missing required
// fact or an unreadable value is a *ParseError — and ignores lines it does not know, so newer
// scripts stay readable. Text before the header (a login shell's greeting) is skipped.
func Parse(out []byte) (*Facts, error) {
	lines := strings.Split(string(out), "\n")
	start := slices.Index(lines, header)
	if start < 0 {
		return nil, &ParseError{Err: fmt.Sprintf("no %q header: the facts script did not run (output begins %q)", header, head(string(out)))}
	}
	p := &parsing{
		f:    &Facts{Sysctls: map[string]string{}, Modules: map[string]string{}, Binaries: map[string]Binary{}, Files: map[string]string{}},
		seen: map[string]bool{}, v2: map[string][]string{}, owners: map[uint64][2]string{},
	}
	ended := false
	for i := start + 1; i < len(lines); i++ {
		p.line, p.text = i+1, strings.TrimSuffix(lines[i], "\r")
		if p.text == trailer {
			ended = true
			break
		}
		key, v, sep := split(p.text)
		row, ok := byKey[key+sep]
		if !ok {
			continue
		}
		p.seen[key] = true
		if err := row.parse(p, key, v); err != nil {
			return nil, &ParseError{Line: p.line, Text: p.text, Err: err.Error()}
		}
	}
	if !ended {
		return nil, &ParseError{Err: fmt.Sprintf("no %q line: the output was cut short (the script was killed or the connection dropped)", trailer)}
	}
	var missing []string
	for _, r := range table {
		for _, k := range r.need {
			if !p.seen[k] {
				missing = append(missing, k)
			}
		}
	}
	if len(missing) > 0 {
		return nil, &ParseError{Err: "missing " + strings.Join(missing, ", ")}
	}
	for _, r := range table {
		if r.done == nil {
			continue
		}
		if err := r.done(p); err != nil {
			return nil, err
		}
	}
	return p.f, nil
}

// split cuts a line into its key, the rest, and the separator: "=" for key=value (a key without
// blanks), else " " for "key rest".
func split(l string) (key, rest, sep string) {
	if k, v, ok := strings.Cut(l, "="); ok && !strings.Contains(k, " ") {
		return k, v, "="
	}
	k, v, _ := strings.Cut(l, " ")
	return k, v, " "
}

type numbered struct {
	n    int
	text string
}

func head(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

// parseClock reads `date +%s%N`: nanoseconds, or seconds where %N is not supported (busybox
// prints it literally or drops it).
func parseClock(v string) (time.Time, error) {
	digits := v
	if i := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		digits = v[:i]
	}
	if digits == "" {
		return time.Time{}, fmt.Errorf("clock is not a number")
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("clock: %v", err)
	}
	if len(digits) <= 11 { // seconds (until the year 5138)
		return time.Unix(n, 0).UTC(), nil
	}
	if len(digits) != 19 || digits != v {
		return time.Time{}, fmt.Errorf("clock is neither seconds nor nanoseconds since 1970")
	}
	return time.Unix(0, n).UTC(), nil
}

func unquoteOSRelease(v string) string {
	if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
		v = v[1 : len(v)-1]
		v = strings.NewReplacer(`\"`, `"`, `\\`, `\`, `\$`, `$`, "\\`", "`").Replace(v)
	}
	return v
}

// parseTCP reads one line of /proc/net/tcp or tcp6 as printed by the script ("tcp  0: ...").
func parseTCP(line string, bigEndian bool) (Listener, error) {
	fs := strings.Fields(line)
	if len(fs) < 11 {
		return Listener{}, fmt.Errorf("want at least 10 fields of /proc/net/%s", fs[0])
	}
	local, st, inode := fs[2], fs[4], fs[10]
	if st != "0A" {
		return Listener{}, fmt.Errorf("state %s is not LISTEN (0A)", st)
	}
	hexAddr, hexPort, ok := strings.Cut(local, ":")
	if !ok {
		return Listener{}, fmt.Errorf("local address %q has no port", local)
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return Listener{}, fmt.Errorf("port %q: %v", hexPort, err)
	}
	raw, err := hex.DecodeString(hexAddr)
	if err != nil || (fs[0] == "tcp" && len(raw) != 4) || (fs[0] == "tcp6" && len(raw) != 16) {
		return Listener{}, fmt.Errorf("address %q is not %s hex", hexAddr, fs[0])
	}
	if !bigEndian { // each 32-bit word is printed in host order
		for w := 0; w < len(raw); w += 4 {
			raw[w], raw[w+1], raw[w+2], raw[w+3] = raw[w+3], raw[w+2], raw[w+1], raw[w]
		}
	}
	addr, _ := netip.AddrFromSlice(raw)
	ino, err := strconv.ParseUint(inode, 10, 64)
	if err != nil {
		return Listener{}, fmt.Errorf("inode %q is not a number", inode)
	}
	return Listener{Addr: addr, Port: int(port), Inode: ino}, nil
}

// parseCgroups decides the cgroup layout from the cgroup mounts (device mountpoint fstype
// options ...) and the cgroup.controllers files read.
func parseCgroups(mounts []string, v2 map[string][]string) Cgroup {
	var c Cgroup
	var v1, unified bool
	unifiedAt := ""
	ctl := map[string]bool{}
	for _, m := range mounts {
		fs := strings.Fields(m)
		if len(fs) < 4 {
			continue
		}
		switch fs[2] {
		case "cgroup2":
			if fs[1] == "/sys/fs/cgroup" {
				c.Version = CgroupV2
			}
			unified, unifiedAt = true, fs[1]
		case "cgroup":
			v1 = true
			for _, o := range strings.Split(fs[3], ",") {
				if slices.Contains(v1Controllers, o) {
					ctl[o] = true
				}
			}
		}
	}
	switch {
	case c.Version == CgroupV2:
		c.V2Controllers = append(slices.Clone(v2["/sys/fs/cgroup"]), "devices", "freezer")
	case v1 && unified:
		c.Version = CgroupHybrid
		c.V2Controllers = slices.Clone(v2[unifiedAt])
	case v1:
		c.Version = CgroupV1
	}
	if c.Version != CgroupV2 {
		for k := range ctl {
			c.V1Controllers = append(c.V1Controllers, k)
		}
	}
	sort.Strings(c.V1Controllers)
	sort.Strings(c.V2Controllers)
	c.V2Controllers = slices.Compact(c.V2Controllers)
	return c
}

// parseCtr reads `ctr version`: the server's version when it answered, else the output's tail.
func parseCtr(out []string, answering bool) (version, errText string) {
	if !answering {
		return "", strings.TrimSpace(strings.Join(out, "\n"))
	}
	server := false
	for _, l := range out {
		t := strings.TrimSpace(l)
		if t == "Server:" {
			server = true
			continue
		}
		if v, ok := strings.CutPrefix(t, "Version:"); ok && server {
			return strings.TrimSpace(v), ""
		}
	}
	return "", ""
}

func parseMarker(lines []string) *Marker {
	m := &Marker{}
	for _, l := range lines {
		k, v, _ := strings.Cut(strings.TrimSpace(l), " ")
		switch k {
		case "cluster":
			m.Cluster = v
		case "file":
			m.Files = append(m.Files, v)
		}
	}
	return m
}
