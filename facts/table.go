package facts

import (
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/scripts"
)

// A fact is one row of the facts table: the shell that prints some lines of the facts output
// and the Go that reads those lines back into Facts, side by side. Script is the rows'
// commands in order; Parse hands each line to the row that owns its key.
type fact struct {
	// keys are the lines command prints: "key=" for key=value lines, "key " for "key rest".
	keys []string
	// need are the keys without which the output is refused ("missing uid").
	need []string
	// command is the shell (inline, or a script of package scripts with its inputs); "" when
	// the options do not ask for this fact.
	command func(o Options) string
	// parse reads one line of the row's: its key (without = or blank) and the rest.
	parse func(p *parsing, key, v string) error
	// done, when set, finishes the fact once every line is read.
	done func(p *parsing) error
}

// parsing is Parse's state: the facts so far and what rows keep until done.
type parsing struct {
	f    *Facts
	seen map[string]bool
	line int    // the line being read, 1-based
	text string // and its text

	swapsKB uint64              // swap: the sizes /proc/swaps gives its areas
	mounts  []string            // cgroups: the cgroup mounts
	v2      map[string][]string // cgroups: cgroup.controllers by directory
	tcp     []numbered          // listeners: tcp and tcp6 lines, decoded once arch is known
	owners  map[uint64][2]string
	ctr     []string // runtime: ctr's output
	marker  []string // manifests: kforge's marker file, when it is there
}

func always(sh string) func(Options) string { return func(Options) string { return sh } }

func script(name string) func(Options) string { return always(scripts.Command(name)) }

// whenAsked runs script name with its one input set to value, when the options ask for it
// (value is not empty).
func whenAsked(name, input string, value func(Options) string) func(Options) string {
	return func(o Options) string {
		if v := value(o); v != "" {
			return scripts.Command(name, input, v)
		}
		return ""
	}
}

// table is the facts kforge gathers, in the order the script prints them (clock first).
var table = []fact{
	{keys: []string{"clock="}, need: []string{"clock"},
		command: always(`printf 'clock=%s\n' "$(date +%s%N)"`),
		parse: func(p *parsing, _, v string) (err error) {
			p.f.Clock, err = parseClock(v)
			return err
		}},
	{keys: []string{"uid=", "hostname=", "arch=", "kernel="}, need: []string{"uid", "hostname", "arch", "kernel"},
		command: script("facts-identity"),
		parse: func(p *parsing, k, v string) (err error) {
			switch k {
			case "uid":
				p.f.UID, err = strconv.Atoi(v)
			case "hostname":
				p.f.Hostname = v
			case "arch":
				p.f.Arch = v
			case "kernel":
				p.f.Kernel = v
			}
			return err
		}},
	{keys: []string{"machineid="},
		command: always(`l=; [ -r /etc/machine-id ] && { read -r l || [ -n "$l" ]; } </etc/machine-id && printf 'machineid=%s\n' "$l"`),
		parse:   func(p *parsing, _, v string) error { p.f.MachineID = v; return nil }},
	{keys: []string{"etcduser="},
		command: always(`l=$(getent passwd etcd 2>/dev/null) && printf 'etcduser=%s\n' "$l"`),
		parse: func(p *parsing, _, v string) error {
			u, err := ParsePasswd(v)
			p.f.EtcdUser = &u
			return err
		}},
	{keys: []string{"systemd="},
		command: always(`if [ -d /run/systemd/system ]; then echo systemd=1; else echo systemd=0; fi`),
		parse:   func(p *parsing, _, v string) error { p.f.Systemd = v == "1"; return nil }},
	{keys: []string{"os "},
		command: always(`osr=/etc/os-release; [ -r $osr ] || osr=/usr/lib/os-release
[ -r $osr ] && while IFS= read -r l || [ -n "$l" ]; do printf 'os %s\n' "$l"; done <$osr`),
		parse: func(p *parsing, _, rest string) error {
			k, v, ok := strings.Cut(rest, "=")
			if !ok {
				return nil // comments and blank lines of os-release
			}
			v = unquoteOSRelease(v)
			switch k {
			case "ID":
				p.f.OS.ID = v
			case "VERSION_ID":
				p.f.OS.VersionID = v
			case "PRETTY_NAME":
				p.f.OS.PrettyName = v
			}
			return nil
		}},
	{keys: []string{"resolved=", "resolv "},
		command: always(`if systemctl is-active -q systemd-resolved 2>/dev/null; then echo resolved=1; else echo resolved=0; fi
[ -r /etc/resolv.conf ] && while read -r k v _; do [ "$k" = nameserver ] && printf 'resolv nameserver %s\n' "$v"; done </etc/resolv.conf; true`),
		parse: func(p *parsing, k, v string) error {
			switch k {
			case "resolved":
				p.f.Resolver.Resolved = v == "1"
			case "resolv":
				if ns, ok := strings.CutPrefix(v, "nameserver "); ok {
					p.f.Resolver.Nameservers = append(p.f.Resolver.Nameservers, ns)
				}
			}
			return nil
		}},
	{keys: []string{"selinux=", "apparmor=", "apparmorparser="},
		command: always(`s=; [ -r /sys/fs/selinux/enforce ] && { read -r s || [ -n "$s" ]; } </sys/fs/selinux/enforce; printf 'selinux=%s\n' "$s"
a=; [ -r /sys/module/apparmor/parameters/enabled ] && { read -r a || [ -n "$a" ]; } </sys/module/apparmor/parameters/enabled; printf 'apparmor=%s\n' "$a"
if command -v apparmor_parser >/dev/null 2>&1; then echo apparmorparser=1; else echo apparmorparser=0; fi`),
		parse: func(p *parsing, k, v string) error {
			switch k {
			case "selinux":
				p.f.LSM.SELinux = map[string]string{"1": SELinuxEnforcing, "0": SELinuxPermissive}[v]
			case "apparmor":
				p.f.LSM.AppArmor = v == "Y"
			case "apparmorparser":
				p.f.LSM.AppArmorParser = v == "1"
			}
			return nil
		}},
	{keys: []string{"firewall=", "fwzone ", "fwopen ", "fwsource ", "ufw "},
		command: script("facts-firewall"),
		parse: func(p *parsing, k, v string) error {
			fw := &p.f.Firewall
			switch k {
			case "firewall":
				fw.Kind = v
			case "fwzone":
				fw.Zone = v
			case "fwopen":
				r, ok := parsePortRange(v, "-")
				if !ok {
					return fmt.Errorf("not a port: %q", v)
				}
				fw.Open = append(fw.Open, r...)
			case "fwsource":
				fw.Sources = append(fw.Sources, v)
			case "ufw":
				open, source := parseUFWRule(v)
				fw.Open = append(fw.Open, open...)
				if source != "" {
					fw.Sources = append(fw.Sources, source)
				}
			}
			return nil
		}},
	{keys: []string{"cpus="}, need: []string{"cpus"},
		command: always(`printf 'cpus=%s\n' "$(nproc 2>/dev/null || grep -c '^processor' /proc/cpuinfo)"`),
		parse: func(p *parsing, _, v string) (err error) {
			p.f.CPUs, err = strconv.Atoi(v)
			if err == nil && p.f.CPUs < 1 {
				err = fmt.Errorf("want a positive count")
			}
			return err
		}},
	{keys: []string{"meminfo "}, need: []string{"memtotal"},
		command: always(`while read -r k v _; do case $k in MemTotal:|SwapTotal:) printf 'meminfo %s %s\n' "$k" "$v";; esac; done </proc/meminfo`),
		parse: func(p *parsing, _, rest string) error {
			fs := strings.Fields(rest)
			if len(fs) != 2 {
				return fmt.Errorf("want \"meminfo KEY: KB\"")
			}
			kb, err := strconv.ParseUint(fs[1], 10, 64)
			if err != nil {
				return fmt.Errorf("size is not a number of kB")
			}
			switch fs[0] {
			case "MemTotal:":
				p.f.MemoryBytes = kb * 1024
				p.seen["memtotal"] = true
			case "SwapTotal:":
				p.f.Swap.TotalBytes = kb * 1024
			}
			return nil
		}},
	{keys: []string{"swap "}, // "swap DEVICE SIZE_KB" (/proc/swaps; older kforge: no size)
		command: always(`[ -r /proc/swaps ] && { read -r _; while read -r dev _ size _; do printf 'swap %s %s\n' "$dev" "$size"; done; } </proc/swaps`),
		parse: func(p *parsing, _, rest string) error {
			fs := strings.Fields(rest)
			if len(fs) == 0 {
				return fmt.Errorf("want \"swap DEVICE SIZE_KB\"")
			}
			p.f.Swap.Devices = append(p.f.Swap.Devices, fs[0])
			if len(fs) > 1 {
				kb, err := strconv.ParseUint(fs[1], 10, 64)
				if err != nil {
					return fmt.Errorf("swap size is not a number of kB")
				}
				p.swapsKB += kb
			}
			return nil
		},
		done: func(p *parsing) error {
			p.f.Swap.On = len(p.f.Swap.Devices) > 0
			// /proc/meminfo may show a container's view (SwapTotal 0) while /proc/swaps lists the
			// machine's areas: the larger of the two is the swap kubelet would see.
			p.f.Swap.TotalBytes = max(p.f.Swap.TotalBytes, p.swapsKB*1024)
			return nil
		}},
	{keys: []string{"capeff="}, need: []string{"capeff"},
		command: always(`while read -r k v; do [ "$k" = CapEff: ] && printf 'capeff=%s\n' "$v"; done </proc/self/status`),
		parse: func(p *parsing, _, v string) (err error) {
			p.f.CapEff, err = strconv.ParseUint(v, 16, 64)
			return err
		}},
	{keys: []string{"mount ", "cgroup2 "},
		command: always(`grep -E '^[^ ]+ [^ ]+ cgroup2? ' /proc/self/mounts | while IFS= read -r l; do printf 'mount %s\n' "$l"; done
for d in /sys/fs/cgroup /sys/fs/cgroup/unified; do [ -r $d/cgroup.controllers ] && { l=; read -r l <$d/cgroup.controllers; printf 'cgroup2 %s %s\n' $d "$l"; }; done`),
		parse: func(p *parsing, k, rest string) error {
			if k == "mount" {
				p.mounts = append(p.mounts, rest)
				return nil
			}
			dir, ctl, _ := strings.Cut(rest, " ")
			p.v2[dir] = strings.Fields(ctl)
			return nil
		},
		done: func(p *parsing) error { p.f.Cgroup = parseCgroups(p.mounts, p.v2); return nil }},
	{keys: []string{"kmod "},
		command: always(`km() { if eval "$2"; then echo "kmod $1 loaded"; elif modprobe -nq "$1" 2>/dev/null; then echo "kmod $1 loadable"; else echo "kmod $1 missing"; fi; }
km overlay 'grep -qw overlay /proc/filesystems'; km br_netfilter '[ -d /proc/sys/net/bridge ]'; km ip_tables '[ -e /proc/net/ip_tables_names ]'`),
		parse: func(p *parsing, _, rest string) error {
			name, state, ok := strings.Cut(rest, " ")
			if !ok || (state != "loaded" && state != "loadable" && state != "missing") {
				return fmt.Errorf("want \"kmod NAME loaded|loadable|missing\"")
			}
			p.f.Modules[name] = state
			return nil
		}},
	{keys: []string{"sysctl "},
		command: always(`for k in ` + strings.ReplaceAll(strings.Join(SysctlKeys, " "), ".", "/") + `; do [ -r /proc/sys/$k ] && { l=; read -r l || [ -n "$l" ]; } </proc/sys/$k && printf 'sysctl %s %s\n' $k "$l"; done`),
		parse: func(p *parsing, _, rest string) error {
			k, v, ok := strings.Cut(rest, " ")
			if !ok {
				return fmt.Errorf("want \"sysctl KEY VALUE\"")
			}
			p.f.Sysctls[strings.ReplaceAll(k, "/", ".")] = v
			return nil
		}},
	{keys: []string{"tcp ", "tcp6 ", "sock "},
		command: script("facts-listeners"),
		parse: func(p *parsing, k, rest string) error {
			if k != "sock" {
				p.tcp = append(p.tcp, numbered{p.line, p.text})
				return nil
			}
			fs := strings.SplitN(rest, " ", 3)
			if len(fs) < 2 {
				return fmt.Errorf("want \"sock INODE PID COMM\"")
			}
			ino, err := strconv.ParseUint(fs[0], 10, 64)
			if err != nil {
				return fmt.Errorf("inode is not a number")
			}
			if _, err := strconv.Atoi(fs[1]); err != nil {
				return fmt.Errorf("PID is not a number")
			}
			comm := ""
			if len(fs) == 3 {
				comm = fs[2]
			}
			if _, dup := p.owners[ino]; !dup { // the first holder is enough for a message
				p.owners[ino] = [2]string{fs[1], comm}
			}
			return nil
		},
		done: func(p *parsing) error {
			be := slices.Contains(bigEndian, p.f.Arch)
			for _, t := range p.tcp {
				l, err := parseTCP(t.text, be)
				if err != nil {
					return &ParseError{Line: t.n, Text: t.text, Err: err.Error()}
				}
				if o, ok := p.owners[l.Inode]; ok {
					l.PID, _ = strconv.Atoi(o[0])
					l.Command = o[1]
				}
				p.f.Listeners = append(p.f.Listeners, l)
			}
			sort.SliceStable(p.f.Listeners, func(i, j int) bool {
				a, b := p.f.Listeners[i], p.f.Listeners[j]
				if a.Port != b.Port {
					return a.Port < b.Port
				}
				return a.Addr.Less(b.Addr)
			})
			return nil
		}},
	{keys: []string{"bin ", "ver "},
		command: func(o Options) string {
			return scripts.Command("facts-binaries", "binaries", strings.Join(Binaries, " "), "cache", o.cacheDir())
		},
		parse: func(p *parsing, k, rest string) error {
			if k == "bin" {
				name, path, ok := strings.Cut(rest, " ")
				if !ok || !strings.HasPrefix(path, "/") {
					return fmt.Errorf("want \"bin NAME /PATH\"")
				}
				b := p.f.Binaries[name]
				b.Path = path
				p.f.Binaries[name] = b
				return nil
			}
			name, text, _ := strings.Cut(rest, " ")
			b, ok := p.f.Binaries[name]
			if !ok {
				return fmt.Errorf("version of a binary not reported found")
			}
			if b.Output != "" {
				b.Output += "\n"
			}
			b.Output += text
			if b.Version == "" {
				b.Version = versionRE.FindString(text)
			}
			p.f.Binaries[name] = b
			return nil
		}},
	{keys: []string{"runtime ", "ctr "},
		command: func(o Options) string { return scripts.Command("facts-runtime", "socket", o.socket()) },
		parse: func(p *parsing, k, rest string) error {
			if k == "ctr" {
				p.ctr = append(p.ctr, rest)
				return nil
			}
			what, arg, _ := strings.Cut(rest, " ")
			switch what {
			case "socket":
				p.f.Runtime.Socket = arg
			case "exists":
				p.f.Runtime.SocketExists = true
			case "answering":
				p.f.Runtime.Answering = true
			}
			return nil
		},
		done: func(p *parsing) error {
			p.f.Runtime.Version, p.f.Runtime.Error = parseCtr(p.ctr, p.f.Runtime.Answering)
			return nil
		}},
	{keys: []string{"manifests ", "manifest ", "marker "},
		command: always(scripts.Command("facts-manifests", "manifests_dir", hostpath.ManifestsDir, "marker", hostpath.ManifestsMarkerPath)),
		parse: func(p *parsing, k, rest string) error {
			switch k {
			case "manifests":
				p.f.Manifests.Exists = true
			case "manifest":
				if rest == "" || strings.Contains(rest, "/") {
					return fmt.Errorf("want \"manifest NAME\"")
				}
				if !strings.HasPrefix(rest, ".") {
					p.f.Manifests.Entries = append(p.f.Manifests.Entries, rest)
				}
			case "marker":
				p.marker = append(p.marker, rest)
			}
			return nil
		},
		done: func(p *parsing) error {
			sort.Strings(p.f.Manifests.Entries)
			if p.seen["marker"] {
				p.f.Manifests.Marker = parseMarker(p.marker)
			}
			return nil
		}},
	{keys: []string{"etcd "},
		command: always(`d=` + remote.Quote(hostpath.EtcdDataDir) + `
# shellcheck disable=SC2012 # up to five names, hidden ones included
[ -d "$d" ] && ls -A "$d" | head -n 5 | while IFS= read -r e; do printf 'etcd %s\n' "$e"; done`),
		parse: func(p *parsing, _, rest string) error { p.f.EtcdDataDir = append(p.f.EtcdDataDir, rest); return nil }},
	{keys: []string{"kubeletdropin="},
		command: always(`[ -f ` + remote.Quote(hostpath.KubeletDropInPath) + ` ] && echo kubeletdropin=1`),
		parse:   func(p *parsing, _, v string) error { p.f.KubeletDropIn = v == "1"; return nil }},
	{keys: []string{"addrs=", "addr ", "nodeip="},
		command: always(scripts.Command("facts-addrs", "kubelet_flags", hostpath.KubeletFlagsEnvPath)),
		parse: func(p *parsing, k, v string) error {
			if k == "nodeip" {
				p.f.KubeletNodeIP = v
				return nil
			}
			if p.f.Addrs == nil { // "addrs=1": ip listed them, perhaps none
				p.f.Addrs = map[string]string{}
			}
			if k == "addrs" {
				return nil
			}
			ip, dev, ok := strings.Cut(v, " ")
			if !ok {
				return fmt.Errorf("addr line %q: want IP DEVICE", v)
			}
			p.f.Addrs[ip] = dev
			return nil
		}},
	{keys: []string{"svcroute="},
		command: func(o Options) string {
			if o.ServiceAddress == "" {
				return ""
			}
			return "if ip route get " + remote.Quote(o.ServiceAddress) + " >/dev/null 2>&1; then echo svcroute=" + string(RouteCovered) + "; else echo svcroute=" + string(RouteMissing) + "; fi"
		},
		parse: func(p *parsing, _, v string) error { p.f.ServiceRoute = Route(v); return nil }},
	{keys: []string{"viphere=", "vipdev=", "vipmac="},
		command: whenAsked("facts-vip", "vip", func(o Options) string { return o.VIP }),
		parse: func(p *parsing, k, v string) error {
			switch k {
			case "viphere":
				p.f.VIP.Here = v == "1"
			case "vipdev":
				p.f.VIP.Device = v
			case "vipmac":
				p.f.VIP.Neighbour = v
			}
			return nil
		}},
	{keys: []string{"dir "},
		command: whenAsked("facts-dirs", "dirs", func(o Options) string { return scripts.Lines(o.Dirs) }),
		parse: func(p *parsing, _, rest string) error {
			if !strings.HasPrefix(rest, "/") {
				return fmt.Errorf("want \"dir /PATH\"")
			}
			p.f.Dirs = append(p.f.Dirs, rest)
			return nil
		}},
	{keys: []string{"sum "},
		command: whenAsked("facts-sums", "paths", func(o Options) string { return scripts.Lines(o.Hash) }),
		parse: func(p *parsing, _, rest string) error {
			sum, path, ok := strings.Cut(rest, " ")
			if strings.HasPrefix(sum, `\`) {
				return nil // sha256sum escaped a name with a backslash or newline: not a path kforge installs
			}
			if b, err := hex.DecodeString(sum); !ok || err != nil || len(b) != 32 || !strings.HasPrefix(path, "/") {
				return fmt.Errorf("want \"sum SHA256 /PATH\"")
			}
			p.f.Files[path] = sum
			return nil
		}},
}

// byKey is the row of each line key ("uid=", "tcp ").
var byKey = func() map[string]*fact {
	m := map[string]*fact{}
	for i := range table {
		for _, k := range table[i].keys {
			if _, dup := m[k]; dup {
				panic("facts: two rows print " + k)
			}
			m[k] = &table[i]
		}
	}
	return m
}()
