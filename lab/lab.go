// Package lab runs a local fleet of real systemd hosts on one Linux machine, reachable over SSH
// like VMs: kforge's demo, test and benchmark bed (`kforge lab up|status|stop|start|down`).
//
// Each host is systemd-nspawn booting a per-host overlay of one cached, debootstrapped Debian 12
// rootfs, in its own network, mount, PID, UTS and IPC namespaces and its own cgroup in every
// hierarchy, with an address on the shared lab bridge (198.51.100.0/25), sshd with its own host
// key, containerd and runc. Hosts have no default route and there is no NAT.
//
// Typical use from a test:
//
//	l, err := lab.Up(ctx, lab.Options{Name: "mytest", Hosts: 3})
//	if err != nil { t.Fatal(err) }
//	t.Cleanup(func() { l.Down(context.Background()) })
//	// SSH to l.Hosts[i].Address:l.Hosts[i].Port as root with l.IdentityFile, checking host keys
//	// against l.KnownHostsFile; or read l.InventoryFile.
//	out, err := l.Exec(ctx, l.Hosts[0].Name, "systemctl", "is-system-running")
//
// Everything needs root on Linux with systemd-nspawn, iproute2, util-linux and (once, to build
// the rootfs) debootstrap. docs/lab.md has the details.
package lab

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kforge/kforge/internal/fsx"
	"github.com/kforge/kforge/progress"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	"golang.org/x/sync/errgroup"
)

// Role is what a lab host is for.
type Role string

const (
	RoleMaster       Role = "master"
	RoleWorker       Role = "worker"
	RoleLoadBalancer Role = "loadbalancer" // haproxy: TCP :6443 → the masters' :6443
)

// Host is one lab host as a client sees it.
type Host struct {
	Name    string `json:"name"`    // hostname and node name: <lab>-<n>, or <lab>-lb
	Address string `json:"address"` // IPv4 address on the lab bridge
	// IPv6 address on the lab bridge (Subnet6), in a lab with Options.IPv6: the last group is
	// the IPv4 address's last byte, in decimal digits (198.51.100.12: 2001:db8:100::12).
	Address6 string `json:"address6,omitempty"`
	Port     int    `json:"port"` // SSH port (22)
	Role     Role   `json:"role"`
	VM       bool   `json:"vm,omitempty"` // a QEMU virtual machine with its own kernel, not an nspawn host
}

// Options say what lab to bring up.
type Options struct {
	// Name is a DNS label of at most 20 characters; labs with different names coexist.
	// Default "kforge".
	Name string
	// Hosts is the number of cluster hosts (masters + workers); at least 1.
	Hosts int
	// Masters is how many of the hosts are masters in the inventory (the first ones). Default 1.
	Masters int
	// LoadBalancer adds one more host, <name>-lb, running haproxy in front of the masters'
	// :6443; the inventory's controlPlaneEndpoint points at it.
	LoadBalancer bool
	// VIP reserves one more address of the lab subnet, for the cluster's controlPlaneVIP (no
	// host has it; the masters take it in turn). The inventory skeleton names it when the lab
	// has several masters and no load balancer.
	VIP bool
	// CacheDir holds the base rootfs. Default $KFORGE_CACHE_DIR, else /var/cache/kforge.
	CacheDir string
	// Dir holds the lab's files (keys, inventory, host overlays). Default
	// $KFORGE_LAB_DIR/<name>, else /var/lib/kforge/lab/<name>. Must not be on overlayfs.
	Dir string
	// BootTimeout bounds the wait for every sshd to answer. Default 60s + 1s per host.
	BootTimeout time.Duration
	// Bare gives the cluster hosts no container runtime: containerd and runc, which the base
	// rootfs carries, are hidden from them (overlay whiteouts of every file of those packages),
	// so that an install of the runtime is proven on them.
	Bare bool
	// VMs is how many of the cluster hosts (the last ones: workers first) are QEMU virtual
	// machines with their own kernel instead of nspawn hosts (vm.go). VM hosts have no container
	// runtime, like Bare ones.
	VMs int
	// VMSuite is the Debian release of the VM hosts: one of VMSuites. Default Suite.
	VMSuite string
	// IPv6 gives every host an IPv6 address on the lab bridge too (Host.Address6), and the
	// inventory skeleton a dual-stack cluster (SkeletonPodSubnets, SkeletonServiceSubnets). Not
	// with VM hosts.
	IPv6 bool
	// Report hears what Up does, for people: a task per stage — the hosts' base rootfs (with a
	// heartbeat while debootstrap builds it), starting the hosts, waiting for them to boot —
	// with a line per host, and the teardown of a failed Up. Down reports through it too.
	// Default: discard.
	Report progress.Reporter
	// Logger receives debug records. Default: discard.
	Logger *slog.Logger
}

// Lab is a running (or partly torn down) lab.
type Lab struct {
	Name string
	Dir  string
	// Hosts are the cluster hosts, masters first.
	Hosts []Host
	// LoadBalancer is the haproxy host, or nil.
	LoadBalancer *Host
	// VIP is the address reserved for the cluster's controlPlaneVIP (Options.VIP), or "".
	VIP string
	// IdentityFile is the private key (ed25519, OpenSSH format) root's authorized_keys accepts on
	// every host. KnownHostsFile lists every host's key by address.
	IdentityFile   string
	KnownHostsFile string
	// InventoryFile is a kforge inventory skeleton for the hosts.
	InventoryFile string

	log    *slog.Logger
	report progress.Reporter
	mu     sync.Mutex // guards st
	st     state
	nodes  map[string]*hostState
}

// state is what the registry keeps about a lab, enough for another process to tear it down.
type state struct {
	Name    string       `json:"name"`
	Dir     string       `json:"dir"`
	Rootfs  string       `json:"rootfs"`
	Bare    bool         `json:"bare,omitempty"`    // cluster hosts without containerd and runc
	VMImage string       `json:"vmImage,omitempty"` // the VM hosts' image directory
	Created time.Time    `json:"created"`
	Hosts   []*hostState `json:"hosts"` // cluster hosts then the load balancer
	VIP     string       `json:"vip,omitempty"`
}

type hostState struct {
	Host
	Dir     string   `json:"dir"`
	Veth    string   `json:"veth"`    // root-side veth on the lab bridge (a VM: its tap)
	Cgroups []string `json:"cgroups"` // one directory per cgroup hierarchy
	// The launcher (the host's process outside the container) identified by PID and start time.
	LauncherPID   int    `json:"launcherPID,omitempty"`
	LauncherStart uint64 `json:"launcherStart,omitempty"`
}

// Network: one bridge shared by all labs, one address pool guarded by the registry lock.
const (
	Bridge = "kforgelab0"
	Subnet = "198.51.100.0/25"
	// BridgeAddr is this machine's own address on the lab bridge: the hosts reach services a
	// test runs for them (a registry) there.
	BridgeAddr = "198.51.100.1"
	// Subnet6 and BridgeAddr6 are the bridge's IPv6 network (of the documentation prefix
	// 2001:db8::/32) and this machine's address on it, for labs with Options.IPv6.
	Subnet6       = "2001:db8:100::/64"
	BridgeAddr6   = "2001:db8:100::1"
	subnet6Prefix = "2001:db8:100::"
	prefixLen     = 25
	firstHostOct  = 2
	lastHostOct   = 126
	subnetPrefix  = "198.51.100."
	defaultLabDir = "/var/lib/kforge/lab"
	// RegistryDir is machine-wide: one JSON file per lab under labs/, and the lock that
	// serializes address allocation, the bridge and the inotify limit between labs.
	RegistryDir = "/run/kforge/lab"
)

// heartbeat is how often a stage that says nothing for long (debootstrap, booting) says it runs.
const heartbeat = 8 * time.Second

var nameRE = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,18}[a-z0-9])?$`)

// ErrNotFound is returned by Open for a lab that does not exist.
var ErrNotFound = errors.New("no such lab")

// ErrInvalidOptions matches (errors.Is) the errors Up returns for invalid Options: nothing was
// changed.
var ErrInvalidOptions = errors.New("invalid lab options")

type invalidOptions struct{ error }

func (invalidOptions) Is(target error) bool { return target == ErrInvalidOptions }

func invalidf(format string, args ...any) error { return invalidOptions{fmt.Errorf(format, args...)} }

// DefaultCacheDir is $KFORGE_CACHE_DIR, else /var/cache/kforge.
func DefaultCacheDir() string {
	if d := os.Getenv("KFORGE_CACHE_DIR"); d != "" {
		return d
	}
	return "/var/cache/kforge"
}

func defaultDir(name string) string {
	if d := os.Getenv("KFORGE_LAB_DIR"); d != "" {
		return filepath.Join(d, name)
	}
	return filepath.Join(defaultLabDir, name)
}

func (o *Options) setDefaults() error {
	if o.Name == "" {
		o.Name = "kforge"
	}
	if !nameRE.MatchString(o.Name) {
		return invalidf("lab name %q: use 1-20 lowercase letters, digits and '-', starting with a letter", o.Name)
	}
	if o.Hosts < 1 {
		return invalidf("lab %s: --hosts must be at least 1, got %d", o.Name, o.Hosts)
	}
	if o.Masters == 0 {
		o.Masters = 1
	}
	if o.Masters < 1 || o.Masters > o.Hosts {
		return invalidf("lab %s: masters must be between 1 and the number of hosts (%d), got %d", o.Name, o.Hosts, o.Masters)
	}
	if o.VMs < 0 || o.VMs > o.Hosts {
		return invalidf("lab %s: VMs must be between 0 and the number of hosts (%d), got %d", o.Name, o.Hosts, o.VMs)
	}
	if o.IPv6 && o.VMs > 0 {
		return invalidf("lab %s: IPv6 addresses are for nspawn hosts only: take no VM hosts with IPv6", o.Name)
	}
	if o.VMSuite == "" {
		o.VMSuite = VMSuites[0]
	}
	if !slices.Contains(VMSuites, o.VMSuite) {
		return invalidf("lab %s: VM hosts run one of %s, not %q", o.Name, strings.Join(VMSuites, ", "), o.VMSuite)
	}
	if o.CacheDir == "" {
		o.CacheDir = DefaultCacheDir()
	}
	if o.Dir == "" {
		o.Dir = defaultDir(o.Name)
	}
	if o.BootTimeout == 0 {
		o.BootTimeout = 60*time.Second + time.Duration(o.Hosts)*time.Second
		if o.VMs > 0 { // emulated VMs boot in about 20 s alone, 70 s three together
			o.BootTimeout += 2*time.Minute + time.Duration(o.VMs)*time.Minute
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Report == nil {
		o.Report = progress.Discard
	}
	return nil
}

// Prerequisites reports what this machine lacks to run a lab, or nil. Tests call it to decide
// whether to skip.
func Prerequisites() error {
	if os.Geteuid() != 0 {
		return errors.New("kforge lab needs root (network namespaces, mounts, cgroups)")
	}
	var missing []string
	for _, t := range []string{"systemd-nspawn", "ip", "unshare", "nsenter", "mount"} {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("kforge lab needs %s on PATH: apt-get install systemd-container iproute2 util-linux mount (or run hack/deps.sh)", strings.Join(missing, ", "))
	}
	if !rootfsReady(filepath.Join(DefaultCacheDir(), "lab", "rootfs-"+RootfsHash())) {
		if _, err := exec.LookPath("debootstrap"); err != nil {
			return errors.New("kforge lab builds its hosts' root file system with debootstrap, which is not on PATH: apt-get install debootstrap (or run hack/deps.sh)")
		}
	}
	return nil
}

// Up brings up a lab and returns once every host's sshd answers and its systemd reports
// "running" (so containerd is up too). An existing lab of that name with the same shape and all
// hosts running is returned as is; any other existing lab of that name is an error. A failed Up
// tears down what it created.
func Up(ctx context.Context, o Options) (_ *Lab, err error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	if err := Prerequisites(); err != nil {
		return nil, err
	}
	if o.VMs > 0 {
		if err := VMPrerequisites(); err != nil {
			return nil, err
		}
	}
	log, r := o.Logger.With("lab", o.Name), o.Report
	n := o.Hosts
	hosts := fmt.Sprintf("%d hosts", n)
	if o.LoadBalancer {
		n++
		hosts += " and a load balancer"
	}
	if old, err := Open(o.Name); err == nil {
		old.log, old.report = log, r
		if len(old.st.Hosts) == n && (old.LoadBalancer != nil) == o.LoadBalancer && (old.VIP != "") == o.VIP && old.vms() == o.VMs && old.allRunning() {
			r(progress.Event{Kind: progress.Info, Task: "lab", Message: fmt.Sprintf("lab %s is already up with %s; nothing to do", o.Name, hosts)})
			return old, nil
		}
		return nil, fmt.Errorf("lab %s already exists with another shape or stopped hosts (see `kforge lab status --name %s`): boot a stopped host with `kforge lab start --name %s HOST`, or run `kforge lab down --name %s` first", o.Name, o.Name, o.Name, o.Name)
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	if err := checkDirFS(filepath.Dir(o.Dir)); err != nil {
		return nil, err
	}
	// The nspawn hosts' rootfs (none when every host is a VM). debootstrap says nothing for a
	// minute or more: a heartbeat says it runs.
	var rootfs string
	if o.VMs < o.Hosts || o.LoadBalancer {
		what := "Debian " + Suite + " from the cache"
		if !rootfsReady(rootfsDir(o.CacheDir)) {
			what = "Debian " + Suite + ", not in the cache: building it with debootstrap (once; a minute or more)"
		}
		if err := progress.Task(r, "rootfs", what, func(r progress.Reporter) error {
			defer progress.Every(r, heartbeat, func(el time.Duration) progress.Event {
				return progress.Event{Kind: progress.Info, Duration: el, Message: fmt.Sprintf("building the hosts' base rootfs with debootstrap: %s so far; left: start %s, wait for them to boot",
					progress.Round(el), hosts)}
			})()
			var err error
			rootfs, err = EnsureRootfs(ctx, o.CacheDir, r)
			return err
		}); err != nil {
			return nil, err
		}
	}
	var img vmImage
	if o.VMs > 0 {
		_, why := vmAccel()
		if err := progress.Task(r, "vm-image", "the VM hosts' image, Debian "+o.VMSuite+"; they run under "+why, func(r progress.Reporter) error {
			defer progress.Every(r, heartbeat, func(el time.Duration) progress.Event {
				return progress.Event{Kind: progress.Info, Duration: el, Message: fmt.Sprintf("the VM image: %s so far", progress.Round(el))}
			})()
			var err error
			img, err = ensureVMImage(ctx, o.CacheDir, o.VMSuite, r)
			return err
		}); err != nil {
			return nil, err
		}
	}
	hier, err := cgroupHierarchies()
	if err != nil {
		return nil, err
	}

	l := &Lab{Name: o.Name, Dir: o.Dir, log: log, report: r}
	l.st = state{Name: o.Name, Dir: o.Dir, Rootfs: rootfs, Bare: o.Bare, Created: time.Now().UTC()}
	if o.VMs > 0 {
		l.st.VMImage = filepath.Dir(img.Root)
	}
	if err := l.register(ctx, o); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			r(progress.Event{Kind: progress.Info, Task: "lab", Message: fmt.Sprintf("lab %s did not come up; tearing down what it created", o.Name)})
			if derr := l.Down(context.WithoutCancel(ctx)); derr != nil {
				err = errors.Join(err, fmt.Errorf("and tearing down lab %s failed too (run `kforge lab down --name %s`): %w", o.Name, o.Name, derr))
			}
		}
	}()
	if err := progress.Task(r, "hosts", fmt.Sprintf("start lab %s: %s", o.Name, hosts), func(r progress.Reporter) error {
		if err := l.writeFiles(); err != nil {
			return err
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(8)
		for _, h := range l.st.Hosts {
			g.Go(func() error {
				start := time.Now()
				// The registry learns each cgroup and PID as soon as they exist, so that Down
				// (from this process or another) finds them even if this one dies half-way.
				err := l.prepareHost(h, hier)
				if err == nil && h.VM {
					err = prepareVM(gctx, h, vmImageAt(l.st.VMImage))
				}
				if serr := l.save(); err == nil {
					err = serr
				}
				if err == nil {
					err = l.startHost(gctx, h)
					if serr := l.save(); err == nil {
						err = serr
					}
				}
				if err != nil {
					return fmt.Errorf("lab host %s: %w", h.Name, err)
				}
				r(progress.Event{Kind: progress.HostDone, Host: h.Name, Message: "started", Duration: time.Since(start)})
				return nil
			})
		}
		return g.Wait()
	}); err != nil {
		return nil, err
	}
	if err := progress.Task(r, "boot", fmt.Sprintf("wait until sshd answers and systemd runs on every host (timeout %s)", o.BootTimeout), func(r progress.Reporter) error {
		var running atomic.Int64
		defer progress.Every(r, heartbeat, func(el time.Duration) progress.Event {
			return progress.Event{Kind: progress.Info, Duration: el, Message: fmt.Sprintf("waiting for %s to boot: %s so far; %d of %d running",
				hosts, progress.Round(el), running.Load(), n)}
		})()
		if err := l.waitSSH(ctx, o.BootTimeout, l.st.Hosts); err != nil {
			return err
		}
		return l.waitRunning(ctx, o.BootTimeout, l.st.Hosts, func(e progress.Event) {
			if e.Kind == progress.HostDone {
				running.Add(1)
			}
			r(e)
		})
	}); err != nil {
		return nil, err
	}
	return l, nil
}

// Open returns the lab called name as registered on this machine, or ErrNotFound.
func Open(name string) (*Lab, error) {
	if !nameRE.MatchString(name) {
		return nil, fmt.Errorf("lab name %q: use 1-20 lowercase letters, digits and '-', starting with a letter", name)
	}
	b, err := os.ReadFile(registryFile(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("lab %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("lab %s: %w", name, err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("lab %s: reading %s: %w", name, registryFile(name), err)
	}
	l := &Lab{Name: st.Name, Dir: st.Dir, st: st, log: slog.New(slog.DiscardHandler), report: progress.Discard}
	l.index()
	return l, nil
}

// lockRegistry takes the registry lock (creating the registry when needed); the caller
// releases it with the returned function.
func lockRegistry(ctx context.Context) (func(), error) {
	if err := os.MkdirAll(filepath.Join(RegistryDir, "labs"), 0o755); err != nil {
		return nil, err
	}
	return fsx.Lock(ctx, filepath.Join(RegistryDir, ".lock"))
}

// registryFile is where the lab called name is registered.
func registryFile(name string) string { return filepath.Join(RegistryDir, "labs", name+".json") }

// List returns the names of the labs registered on this machine.
func List() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(RegistryDir, "labs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok && nameRE.MatchString(n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, nil
}

// Down tears down the lab called name if it exists; a missing lab is not an error.
func Down(ctx context.Context, name string, log *slog.Logger) error {
	l, err := Open(name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if log != nil {
		l.SetLogger(log)
	}
	return l.Down(ctx)
}

// SetLogger sets where an opened lab logs debug records.
func (l *Lab) SetLogger(log *slog.Logger) { l.log = log.With("lab", l.Name) }

// SetReport sets who hears what an opened lab does (Down); nil: nobody.
func (l *Lab) SetReport(r progress.Reporter) {
	if r == nil {
		r = progress.Discard
	}
	l.report = r
}

// index fills the public fields and the name index from st.
func (l *Lab) index() {
	l.Hosts, l.LoadBalancer, l.VIP = nil, nil, l.st.VIP
	l.nodes = map[string]*hostState{}
	for _, h := range l.st.Hosts {
		l.nodes[h.Name] = h
		if h.Role == RoleLoadBalancer {
			lb := h.Host
			l.LoadBalancer = &lb
		} else {
			l.Hosts = append(l.Hosts, h.Host)
		}
	}
	l.IdentityFile = filepath.Join(l.Dir, "id_ed25519")
	l.KnownHostsFile = filepath.Join(l.Dir, "known_hosts")
	l.InventoryFile = filepath.Join(l.Dir, "inventory.yaml")
}

func (l *Lab) host(name string) (*hostState, error) {
	h, ok := l.nodes[name]
	if !ok {
		var names []string
		for _, h := range l.st.Hosts {
			names = append(names, h.Name)
		}
		return nil, fmt.Errorf("lab %s has no host %q (hosts: %s)", l.Name, name, strings.Join(names, ", "))
	}
	return h, nil
}

// register allocates addresses under the registry lock, checks and creates the bridge, raises
// the inotify limit when needed and writes the lab's registry entry.
func (l *Lab) register(ctx context.Context, o Options) error {
	unlock, err := lockRegistry(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := os.Stat(registryFile(o.Name)); err == nil {
		return fmt.Errorf("lab %s was created concurrently by another process", o.Name)
	}
	if _, err := os.Stat(o.Dir); err == nil {
		return fmt.Errorf("lab %s: %s exists but no lab of that name is registered (left over from a reboot or a crash?): remove it, or choose another --name", o.Name, o.Dir)
	}
	others, err := l.otherLabs()
	if err != nil {
		return err
	}
	used := map[string]string{}
	otherHosts := 0
	for _, st := range others {
		for _, h := range st.Hosts {
			used[h.Address] = st.Name
			otherHosts++
		}
		if st.VIP != "" {
			used[st.VIP] = st.Name
		}
	}
	n := o.Hosts
	if o.LoadBalancer {
		n++
	}
	want := n
	if o.VIP {
		want++
	}
	var addrs []string
	for oct := firstHostOct; oct <= lastHostOct && len(addrs) < want; oct++ {
		if a := fmt.Sprintf("%s%d", subnetPrefix, oct); used[a] == "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) < want {
		return fmt.Errorf("lab %s: %d addresses wanted but only %d addresses of %s are free (%d used by labs %s): take fewer hosts or bring another lab down", o.Name, n, len(addrs), Subnet, len(used), labNames(others))
	}
	if err := ensureBridge(ctx); err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		h := &hostState{Host: Host{Name: fmt.Sprintf("%s-%d", o.Name, i+1), Address: addrs[i], Port: 22, Role: RoleWorker}}
		switch {
		case i == o.Hosts:
			h.Name, h.Role = o.Name+"-lb", RoleLoadBalancer
		case i < o.Masters:
			h.Role = RoleMaster
		}
		h.Dir = filepath.Join(o.Dir, "hosts", h.Name)
		h.VM = i < o.Hosts && i >= o.Hosts-o.VMs
		h.Veth = "kflab" + strings.TrimPrefix(h.Address, subnetPrefix)
		if o.IPv6 {
			h.Address6 = subnet6Prefix + strings.TrimPrefix(h.Address, subnetPrefix)
		}
		l.st.Hosts = append(l.st.Hosts, h)
	}
	if o.VIP {
		l.st.VIP = addrs[n]
	}
	l.index()
	if err := raiseInotify(otherHosts+n, l.report); err != nil {
		return err
	}
	return l.saveLocked()
}

func labNames(sts []state) string {
	var n []string
	for _, s := range sts {
		n = append(n, s.Name)
	}
	if len(n) == 0 {
		return "(none)"
	}
	return strings.Join(n, ", ")
}

// otherLabs reads every registry entry but this lab's.
func (l *Lab) otherLabs() ([]state, error) {
	names, err := List()
	if err != nil {
		return nil, err
	}
	var out []state
	for _, n := range names {
		if n == l.Name {
			continue
		}
		o, err := Open(n)
		if err != nil {
			return nil, err
		}
		out = append(out, o.st)
	}
	return out, nil
}

// save writes the registry entry atomically.
func (l *Lab) save() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.saveLocked()
}

func (l *Lab) saveLocked() error {
	b, err := json.MarshalIndent(l.st, "", "  ")
	if err != nil {
		return err
	}
	return fsx.WriteFile(registryFile(l.Name), b, 0o644)
}

// checkDirFS refuses lab directories on overlayfs: containerd's overlay snapshotter needs
// /var/lib/containerd on a real filesystem, and host overlays cannot stack on overlays.
func checkDirFS(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var st statfs
	if err := statFS(dir, &st); err != nil {
		return err
	}
	if st.isOverlay() {
		return fmt.Errorf("lab directory %s is on overlayfs; host overlays and containerd need a real filesystem: set KFORGE_LAB_DIR (or --dir) to a directory on ext4/xfs/btrfs/tmpfs", dir)
	}
	return nil
}

// writeFiles writes the lab's SSH key, known_hosts and inventory skeleton. Host keys are made
// here too, so known_hosts is complete before any host boots.
func (l *Lab) writeFiles() error {
	if err := os.MkdirAll(l.Dir, 0o700); err != nil {
		return err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	blk, err := ssh.MarshalPrivateKey(priv, "kforge-lab-"+l.Name)
	if err != nil {
		return err
	}
	if err := fsx.WriteFile(l.IdentityFile, pem.EncodeToMemory(blk), 0o600); err != nil {
		return err
	}
	spub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return err
	}
	authorized := ssh.MarshalAuthorizedKey(spub)
	if err := fsx.WriteFile(l.IdentityFile+".pub", authorized, 0o644); err != nil {
		return err
	}
	var kh strings.Builder
	for _, h := range l.st.Hosts {
		hpub, hpriv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return err
		}
		hblk, err := ssh.MarshalPrivateKey(hpriv, "root@"+h.Name)
		if err != nil {
			return err
		}
		hs, _ := ssh.NewPublicKey(hpub)
		etc := filepath.Join(h.Dir, "upper", "etc")
		if err := os.MkdirAll(filepath.Join(etc, "ssh"), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(etc, "ssh", "ssh_host_ed25519_key"), pem.EncodeToMemory(hblk), 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(etc, "ssh", "ssh_host_ed25519_key.pub"), ssh.MarshalAuthorizedKey(hs), 0o644); err != nil {
			return err
		}
		sshDir := filepath.Join(h.Dir, "upper", "root", ".ssh")
		if err := os.MkdirAll(sshDir, 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(sshDir, "authorized_keys"), authorized, 0o600); err != nil {
			return err
		}
		kh.WriteString(knownhosts.Line([]string{knownhosts.Normalize(fmt.Sprintf("%s:%d", h.Address, h.Port))}, hs) + "\n")
	}
	if err := fsx.WriteFile(l.KnownHostsFile, []byte(kh.String()), 0o644); err != nil {
		return err
	}
	inv, err := l.inventory()
	if err != nil {
		return err
	}
	return fsx.WriteFile(l.InventoryFile, inv, 0o644)
}

// vms counts the lab's VM hosts.
func (l *Lab) vms() int {
	n := 0
	for _, h := range l.st.Hosts {
		if h.VM {
			n++
		}
	}
	return n
}

// allRunning says whether every host's launcher is alive.
func (l *Lab) allRunning() bool {
	for _, h := range l.st.Hosts {
		if !alive(h.LauncherPID, h.LauncherStart) {
			return false
		}
	}
	return true
}

// Running says whether the host's processes run (it may still be booting).
func (l *Lab) Running(host string) bool {
	h, err := l.host(host)
	if err != nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return alive(h.LauncherPID, h.LauncherStart)
}

// Down stops every host (a clean shutdown, SIGKILL after 10 s) and removes everything the lab
// created: processes, cgroups, veths, the host overlays and files, the registry entry; the
// bridge and the raised inotify limit go with the last lab. A host whose processes cannot be
// ended keeps its files, and Down returns an error; running it again retries. It is reported as
// the task "down", with a line per host.
func (l *Lab) Down(ctx context.Context) error {
	return progress.Task(l.report, "down", fmt.Sprintf("stop lab %s's %d hosts and remove everything it created", l.Name, len(l.st.Hosts)),
		func(r progress.Reporter) error { return l.down(ctx, r) })
}

func (l *Lab) down(ctx context.Context, r progress.Reporter) error {
	start := time.Now()
	deadline := start.Add(10 * time.Second)
	var errs []error
	var emu sync.Mutex
	var wg sync.WaitGroup
	for _, h := range l.st.Hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.removeHost(ctx, h, deadline, r); err != nil {
				emu.Lock()
				errs = append(errs, fmt.Errorf("lab host %s: %w", h.Name, err))
				emu.Unlock()
				return
			}
			r(progress.Event{Kind: progress.HostDone, Host: h.Name, Message: "stopped and removed", Duration: time.Since(start)})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("lab %s: teardown incomplete (run `kforge lab down --name %s` again): %w", l.Name, l.Name, err)
	}
	if l.Dir != "" {
		if err := removeUnmounted(l.Dir); err != nil {
			return fmt.Errorf("lab %s: %w", l.Name, err)
		}
	}
	unlock, err := lockRegistry(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.Remove(registryFile(l.Name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	others, err := l.otherLabs()
	if err != nil {
		return err
	}
	if len(others) == 0 {
		if err := deleteBridge(ctx); err != nil {
			return err
		}
		if err := restoreInotify(r); err != nil {
			return err
		}
	}
	return nil
}
