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

// Parse reads the output of Script. It is strict about what it knows — a missing end marker
// (output cut short), a missing required fact or an unreadable value is a *ParseError — and
// ignores lines it does not know, so newer scripts stay readable. Text before the header (a
// login shell's greeting) is skipped.
func Parse(out []byte) (*Facts, error) {
	lines := strings.Split(string(out), "\n")
	start := slices.Index(lines, header)
	if start < 0 {
		return nil, &ParseError{Err: fmt.Sprintf("no %q header: the facts script did not run (output begins %q)", header, head(string(out)))}
	}
	f := &Facts{Sysctls: map[string]string{}, Modules: map[string]string{}, Binaries: map[string]Binary{}, Files: map[string]string{}}
	var (
		tcp       []numbered // tcp/tcp6 lines, decoded once arch is known
		mounts    []string
		swapsKB   uint64 // the sizes /proc/swaps gives its areas
		v2        = map[string][]string{}
		owners    = map[uint64][2]string{} // inode -> pid, comm
		ctrOut    []string
		seen      = map[string]bool{}
		ended     bool
		marker    []string
		hasMarker bool
	)
	for i := start + 1; i < len(lines); i++ {
		n, l := i+1, strings.TrimSuffix(lines[i], "\r")
		bad := func(why string) error { return &ParseError{Line: n, Text: l, Err: why} }
		if l == trailer {
			ended = true
			break
		}
		if k, v, ok := strings.Cut(l, "="); ok && !strings.Contains(k, " ") {
			seen[k] = true
			var err error
			switch k {
			case "clock":
				f.Clock, err = parseClock(v)
			case "uid":
				f.UID, err = strconv.Atoi(v)
			case "hostname":
				f.Hostname = v
			case "arch":
				f.Arch = v
			case "kernel":
				f.Kernel = v
			case "machineid":
				f.MachineID = v
			case "systemd":
				f.Systemd = v == "1"
			case "cpus":
				f.CPUs, err = strconv.Atoi(v)
				if err == nil && f.CPUs < 1 {
					err = fmt.Errorf("want a positive count")
				}
			case "capeff":
				f.CapEff, err = strconv.ParseUint(v, 16, 64)
			case "kubeletdropin":
				f.KubeletDropIn = v == "1"
			case "svcroute":
				f.ServiceRoute = Route(v)
			case "viphere":
				f.VIP.Here = v == "1"
			case "vipdev":
				f.VIP.Device = v
			case "vipmac":
				f.VIP.Neighbour = v
			}
			if err != nil {
				return nil, bad(err.Error())
			}
			continue
		}
		sec, rest, _ := strings.Cut(l, " ")
		switch sec {
		case "os":
			k, v, ok := strings.Cut(rest, "=")
			if !ok {
				continue // comments and blank lines of os-release
			}
			v = unquoteOSRelease(v)
			switch k {
			case "ID":
				f.OS.ID = v
			case "VERSION_ID":
				f.OS.VersionID = v
			case "PRETTY_NAME":
				f.OS.PrettyName = v
			}
		case "meminfo":
			fs := strings.Fields(rest)
			if len(fs) != 2 {
				return nil, bad("want \"meminfo KEY: KB\"")
			}
			kb, err := strconv.ParseUint(fs[1], 10, 64)
			if err != nil {
				return nil, bad("size is not a number of kB")
			}
			switch fs[0] {
			case "MemTotal:":
				f.MemoryBytes = kb * 1024
				seen["memtotal"] = true
			case "SwapTotal:":
				f.Swap.TotalBytes = kb * 1024
			}
		case "swap": // "swap DEVICE SIZE_KB" (/proc/swaps; older kforge: no size)
			fs := strings.Fields(rest)
			if len(fs) == 0 {
				return nil, bad("want \"swap DEVICE SIZE_KB\"")
			}
			f.Swap.Devices = append(f.Swap.Devices, fs[0])
			if len(fs) > 1 {
				kb, err := strconv.ParseUint(fs[1], 10, 64)
				if err != nil {
					return nil, bad("swap size is not a number of kB")
				}
				swapsKB += kb
			}
		case "mount":
			mounts = append(mounts, rest)
		case "cgroup2":
			dir, ctl, _ := strings.Cut(rest, " ")
			v2[dir] = strings.Fields(ctl)
		case "kmod":
			name, state, ok := strings.Cut(rest, " ")
			if !ok || (state != "loaded" && state != "loadable" && state != "missing") {
				return nil, bad("want \"kmod NAME loaded|loadable|missing\"")
			}
			f.Modules[name] = state
		case "sysctl":
			k, v, ok := strings.Cut(rest, " ")
			if !ok {
				return nil, bad("want \"sysctl KEY VALUE\"")
			}
			f.Sysctls[strings.ReplaceAll(k, "/", ".")] = v
		case "tcp", "tcp6":
			tcp = append(tcp, numbered{n, l})
		case "sock":
			fs := strings.SplitN(rest, " ", 3)
			if len(fs) < 2 {
				return nil, bad("want \"sock INODE PID COMM\"")
			}
			ino, err := strconv.ParseUint(fs[0], 10, 64)
			if err != nil {
				return nil, bad("inode is not a number")
			}
			if _, err := strconv.Atoi(fs[1]); err != nil {
				return nil, bad("PID is not a number")
			}
			comm := ""
			if len(fs) == 3 {
				comm = fs[2]
			}
			if _, dup := owners[ino]; !dup { // the first holder is enough for a message
				owners[ino] = [2]string{fs[1], comm}
			}
		case "bin":
			name, path, ok := strings.Cut(rest, " ")
			if !ok || !strings.HasPrefix(path, "/") {
				return nil, bad("want \"bin NAME /PATH\"")
			}
			b := f.Binaries[name]
			b.Path = path
			f.Binaries[name] = b
		case "ver":
			name, text, _ := strings.Cut(rest, " ")
			b, ok := f.Binaries[name]
			if !ok {
				return nil, bad("version of a binary not reported found")
			}
			if b.Output != "" {
				b.Output += "\n"
			}
			b.Output += text
			if b.Version == "" {
				b.Version = versionRE.FindString(text)
			}
			f.Binaries[name] = b
		case "runtime":
			what, arg, _ := strings.Cut(rest, " ")
			switch what {
			case "socket":
				f.Runtime.Socket = arg
			case "exists":
				f.Runtime.SocketExists = true
			case "answering":
				f.Runtime.Answering = true
			}
		case "ctr":
			ctrOut = append(ctrOut, rest)
		case "manifests":
			f.Manifests.Exists = true
		case "manifest":
			if rest == "" || strings.Contains(rest, "/") {
				return nil, bad("want \"manifest NAME\"")
			}
			if !strings.HasPrefix(rest, ".") {
				f.Manifests.Entries = append(f.Manifests.Entries, rest)
			}
		case "marker":
			hasMarker = true
			marker = append(marker, rest)
		case "dir":
			if !strings.HasPrefix(rest, "/") {
				return nil, bad("want \"dir /PATH\"")
			}
			f.Dirs = append(f.Dirs, rest)
		case "etcd":
			f.EtcdDataDir = append(f.EtcdDataDir, rest)
		case "sum":
			sum, path, ok := strings.Cut(rest, " ")
			if strings.HasPrefix(sum, `\`) {
				continue // sha256sum escaped a name with a backslash or newline: not a path kforge installs
			}
			if b, err := hex.DecodeString(sum); !ok || err != nil || len(b) != 32 || !strings.HasPrefix(path, "/") {
				return nil, bad("want \"sum SHA256 /PATH\"")
			}
			f.Files[path] = sum
		}
	}
	if !ended {
		return nil, &ParseError{Err: fmt.Sprintf("no %q line: the output was cut short (the script was killed or the connection dropped)", trailer)}
	}
	var missing []string
	for _, k := range []string{"clock", "uid", "hostname", "arch", "kernel", "cpus", "memtotal", "capeff"} {
		if !seen[k] {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, &ParseError{Err: "missing " + strings.Join(missing, ", ")}
	}

	be := slices.Contains(bigEndian, f.Arch)
	for _, t := range tcp {
		l, err := parseTCP(t.text, be)
		if err != nil {
			return nil, &ParseError{Line: t.n, Text: t.text, Err: err.Error()}
		}
		if o, ok := owners[l.Inode]; ok {
			l.PID, _ = strconv.Atoi(o[0])
			l.Command = o[1]
		}
		f.Listeners = append(f.Listeners, l)
	}
	sort.SliceStable(f.Listeners, func(i, j int) bool {
		a, b := f.Listeners[i], f.Listeners[j]
		if a.Port != b.Port {
			return a.Port < b.Port
		}
		return a.Addr.Less(b.Addr)
	})
	f.Cgroup = parseCgroups(mounts, v2)
	f.Swap.On = len(f.Swap.Devices) > 0
	// /proc/meminfo may show a container's view (SwapTotal 0) while /proc/swaps lists the
	// machine's areas: the larger of the two is the swap kubelet would see.
	f.Swap.TotalBytes = max(f.Swap.TotalBytes, swapsKB*1024)
	f.Runtime.Version, f.Runtime.Error = parseCtr(ctrOut, f.Runtime.Answering)
	sort.Strings(f.Manifests.Entries)
	if hasMarker {
		f.Manifests.Marker = parseMarker(marker)
	}
	return f, nil
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
