package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/kforge/kforge/bundle/daemon"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mdlayher/arp"
	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Config is the runner's configuration file, written by kforge (JSON).
type Config struct {
	// Address is the virtual IP, an IPv4 address no host has (controlPlaneVIP).
	Address string `json:"address"`
	// Interface is where the address is held; empty means the interface with an IPv4 address
	// whose prefix contains Address.
	Interface string `json:"interface"`
	// Kubeconfig is the kubeconfig the runner elects with (it needs get, create and update on
	// the Lease). It must reach an API server directly, not through the virtual IP.
	Kubeconfig string `json:"kubeconfig"`
	// Identity names this runner in the Lease: the node name.
	Identity string `json:"identity"`
	// Namespace and Lease name the Lease; empty means kube-system and kforge-vip.
	Namespace string `json:"namespace"`
	Lease     string `json:"lease"`
}

// Defaults of Config.Namespace and Config.Lease.
const (
	DefaultNamespace = "kube-system"
	DefaultLease     = "kforge-vip"
)

// ReadConfig reads and checks a configuration file; it fills in the defaults.
func ReadConfig(file string) (Config, error) {
	var c Config
	if err := daemon.ReadJSON(file, &c); err != nil {
		return c, err
	}
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.Lease == "" {
		c.Lease = DefaultLease
	}
	if _, err := vipOf(c.Address); err != nil {
		return c, fmt.Errorf("%s: address: %w", file, err)
	}
	if c.Interface != "" && (len(c.Interface) > 15 || strings.ContainsAny(c.Interface, "/ \t\n:")) {
		return c, fmt.Errorf("%s: interface: %q is not an interface name", file, c.Interface)
	}
	if c.Kubeconfig == "" {
		return c, fmt.Errorf("%s: kubeconfig: missing", file)
	}
	if c.Identity == "" {
		return c, fmt.Errorf("%s: identity: missing", file)
	}
	if errs := validation.IsDNS1123Label(c.Namespace); len(errs) > 0 {
		return c, fmt.Errorf("%s: namespace: %q: %s", file, c.Namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(c.Lease); len(errs) > 0 {
		return c, fmt.Errorf("%s: lease: %q: %s", file, c.Lease, strings.Join(errs, "; "))
	}
	return c, nil
}

// vipOf parses a virtual IP: a unicast IPv4 address.
func vipOf(s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, errors.New("missing")
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return netip.Addr{}, fmt.Errorf("%q is not an IPv4 address", s)
	}
	if !a.IsGlobalUnicast() {
		return netip.Addr{}, fmt.Errorf("%s is not a unicast address", s)
	}
	return a, nil
}

// hostAddrs are the IPv4 prefixes of this host's interfaces but loopback, by interface name.
func hostAddrs() (map[string][]netip.Prefix, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	out := map[string][]netip.Prefix{}
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifi.Addrs()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ifi.Name, err)
		}
		out[ifi.Name] = nil
		for _, a := range addrs {
			p, err := netip.ParsePrefix(a.String())
			if err == nil && p.Addr().Is4() {
				out[ifi.Name] = append(out[ifi.Name], p)
			}
		}
	}
	return out, nil
}

// ChooseInterface returns the interface to hold vip on, given the host's IPv4 prefixes by
// interface: name when it is set (it must exist), else the one interface with a prefix that
// contains vip. vip must not already be an address of the host other than a /32 (the runner's
// own, left by an earlier run).
func ChooseInterface(vip netip.Addr, name string, addrs map[string][]netip.Prefix) (string, error) {
	var in []string
	for _, ifname := range slices.Sorted(maps.Keys(addrs)) {
		for _, p := range addrs[ifname] {
			if p.Addr() == vip && p.Bits() != 32 {
				return "", fmt.Errorf("%s is already an address of this host (%s on %s): the virtual IP must be an address no host has", vip, p, ifname)
			}
			if p.Bits() < 32 && p.Contains(vip) && !slices.Contains(in, ifname) {
				in = append(in, ifname)
			}
		}
	}
	if name != "" {
		if _, ok := addrs[name]; !ok {
			return "", fmt.Errorf("this host has no interface %s", name)
		}
		return name, nil
	}
	switch len(in) {
	case 0:
		return "", fmt.Errorf("no interface of this host is in the subnet of %s", vip)
	case 1:
		return in[0], nil
	}
	return "", fmt.Errorf("several interfaces of this host are in the subnet of %s (%s): name one in the configuration's interface", vip, strings.Join(in, ", "))
}

// Address is the virtual IP on this host.
type Address interface {
	// Has says whether the host holds the address.
	Has() (bool, error)
	// Add makes the host hold it; holding it already is no error.
	Add() error
	// Remove stops holding it; not holding it is no error.
	Remove() error
	// Announce tells the link's neighbours that the host holds it (a gratuitous ARP).
	Announce() error
	// Disconnect resets every TCP connection made to it and says how many it reset.
	Disconnect() (int, error)
}

// HostAddress is the virtual IP as a /32 address of a network interface, announced by
// gratuitous ARP on that interface.
type HostAddress struct {
	Interface string
	VIP       netip.Addr
}

func (h HostAddress) addr() *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: h.VIP.AsSlice(), Mask: net.CIDRMask(32, 32)}}
}

func (h HostAddress) link() (netlink.Link, error) {
	l, err := netlink.LinkByName(h.Interface)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", h.Interface, err)
	}
	return l, nil
}

// Has says whether VIP/32 is an address of the interface.
func (h HostAddress) Has() (bool, error) {
	l, err := h.link()
	if err != nil {
		return false, err
	}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return false, fmt.Errorf("addresses of %s: %w", h.Interface, err)
	}
	for _, a := range addrs {
		if ones, _ := a.Mask.Size(); ones == 32 && a.IP.Equal(h.VIP.AsSlice()) {
			return true, nil
		}
	}
	return false, nil
}

// Add adds VIP/32 to the interface.
func (h HostAddress) Add() error {
	l, err := h.link()
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(l, h.addr()); err != nil && !errors.Is(err, syscall.EEXIST) {
		return fmt.Errorf("add %s/32 to %s: %w", h.VIP, h.Interface, err)
	}
	return nil
}

// Remove removes VIP/32 from the interface.
func (h HostAddress) Remove() error {
	l, err := h.link()
	if err != nil {
		return err
	}
	if err := netlink.AddrDel(l, h.addr()); err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) {
		return fmt.Errorf("remove %s/32 from %s: %w", h.VIP, h.Interface, err)
	}
	return nil
}

// Disconnect resets (SOCK_DESTROY, as `ss -K` does) every TCP connection whose local address is
// VIP, the address still held: the kernel sends each peer a reset from it.
func (h HostAddress) Disconnect() (int, error) {
	socks, err := netlink.SocketDiagTCP(syscall.AF_INET)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return 0, fmt.Errorf("TCP connections to %s: %w", h.VIP, err)
	}
	n := 0
	for _, s := range socks {
		if !s.ID.Source.Equal(h.VIP.AsSlice()) || s.State == netlink.TCP_LISTEN || s.State == netlink.TCP_TIME_WAIT || s.State == netlink.TCP_CLOSE {
			continue
		}
		local := &net.TCPAddr{IP: s.ID.Source, Port: int(s.ID.SourcePort)}
		remote := &net.TCPAddr{IP: s.ID.Destination, Port: int(s.ID.DestinationPort)}
		switch err := netlink.SocketDestroy(local, remote); {
		case err == nil:
			n++
		case errors.Is(err, syscall.ENOENT): // closed meanwhile
		case errors.Is(err, syscall.EOPNOTSUPP):
			return n, fmt.Errorf("cannot reset the connections to %s: this kernel cannot close sockets (CONFIG_INET_DIAG_DESTROY); their peers wait until their own timeouts", h.VIP)
		default:
			return n, fmt.Errorf("reset %s->%s: %w", local, remote, err)
		}
	}
	return n, nil
}

// broadcast is the Ethernet broadcast address.
var broadcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// Announce broadcasts one gratuitous ARP on the interface: a request whose sender and target IP
// are both VIP and whose sender hardware address is the interface's (RFC 5227's ARP
// Announcement, as keepalived and arping -U send), so that the neighbours' caches point VIP at
// this host.
func (h HostAddress) Announce() error {
	ifi, err := net.InterfaceByName(h.Interface)
	if err != nil {
		return fmt.Errorf("interface %s: %w", h.Interface, err)
	}
	c, err := arp.Dial(ifi)
	if err != nil {
		return fmt.Errorf("ARP on %s: %w", h.Interface, err)
	}
	defer c.Close()
	p, err := arp.NewPacket(arp.OperationRequest, ifi.HardwareAddr, h.VIP, broadcast, h.VIP)
	if err != nil {
		return fmt.Errorf("ARP on %s: %w", h.Interface, err)
	}
	if err := c.WriteTo(p, broadcast); err != nil {
		return fmt.Errorf("ARP on %s: %w", h.Interface, err)
	}
	return nil
}

// Timing is the leader election's and the announcements' timing.
type Timing struct {
	LeaseDuration time.Duration // how long a lease not renewed stays its holder's
	RenewDeadline time.Duration // how long the leader tries to renew before it gives up
	RetryPeriod   time.Duration // between tries to acquire or renew
	AnnounceBurst int           // gratuitous ARPs sent on taking the address,
	AnnounceGap   time.Duration // this far apart,
	AnnounceEvery time.Duration // then one this often while leading
}

// DefaultTiming is kube-vip's. A leader that cannot renew removes the address at most 4 s
// (RetryPeriod+RenewDeadline) after its last renewal; another master takes the lease 5 s
// (LeaseDuration) after it saw that renewal, so a second later, or within a RetryPeriod when the
// leader releases the lease on stopping. The margin relies on RetryPeriod being at least a
// second: a Lease's times count whole seconds, and renewals within one second look alike to
// the other masters.
var DefaultTiming = Timing{
	LeaseDuration: 5 * time.Second,
	RenewDeadline: 3 * time.Second,
	RetryPeriod:   time.Second,
	AnnounceBurst: 3,
	AnnounceGap:   200 * time.Millisecond,
	AnnounceEvery: 3 * time.Second,
}

// State is the state file's content.
type State struct {
	Address   string `json:"address"`
	Interface string `json:"interface"`
	Holder    string `json:"holder"`  // the leader's identity last seen; empty when none
	Leading   bool   `json:"leading"` // whether this host holds the address
}

// Runner holds the address while it holds the Lease: one election after another until its
// context ends.
type Runner struct {
	Config  Config // Interface is the chosen one
	Leases  coordinationv1.LeasesGetter
	Address Address
	Timing  Timing
	State   string // the state file; empty for none
	Logf    func(format string, args ...any)

	mu        sync.Mutex
	held      bool // the address is on the interface
	leading   bool
	holder    string
	gaveUp    bool // the last round could not hold the address
	written   []byte
	announced error // the last announcement's outcome, to log its changes only
}

// Run removes the address if an earlier run left it, then takes part in elections until ctx
// ends; then it releases the lease, removes the address and returns nil. It returns an error
// only when it cannot start.
func (r *Runner) Run(ctx context.Context) error {
	has, err := r.Address.Has()
	if err != nil {
		return err
	}
	if has {
		n, resetErr, err := release(r.Address)
		if err != nil {
			return err
		}
		r.Logf("removed %s from %s, left by an earlier run (%d connections to it reset)%s", r.Config.Address, r.Config.Interface, n, orNot(resetErr))
	}
	r.mu.Lock()
	r.writeState()
	r.mu.Unlock()
	for ctx.Err() == nil {
		if err := r.elect(ctx); err != nil {
			return err
		}
		r.mu.Lock()
		wait := r.Timing.RetryPeriod
		if r.gaveUp { // let another master take it
			wait, r.gaveUp = r.Timing.LeaseDuration, false
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	r.mu.Lock()
	held := r.held
	r.mu.Unlock()
	if held { // stopping while leading: the lease is released, the address still held
		r.awaitSuccessor()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drop()
	if r.held { // could not remove it when leading stopped: once more
		n, resetErr, err := release(r.Address)
		if err != nil {
			return err
		}
		r.held = false
		r.Logf("released %s (%d connections to it reset)%s", r.Config.Address, n, orNot(resetErr))
	}
	if r.holder == r.Config.Identity {
		r.holder = ""
	}
	r.writeState()
	return nil
}

// elect runs one election: it returns when ctx ends or when this runner stops leading.
func (r *Runner) elect(ctx context.Context) error {
	round, cancel := context.WithCancel(ctx)
	defer cancel()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: r.Config.Namespace, Name: r.Config.Lease},
			Client:     r.Leases,
			LockConfig: resourcelock.ResourceLockConfig{Identity: r.Config.Identity},
		},
		LeaseDuration:   r.Timing.LeaseDuration,
		RenewDeadline:   r.Timing.RenewDeadline,
		RetryPeriod:     r.Timing.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            r.Config.Lease,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) { r.lead(lctx, ctx, cancel) },
			OnStoppedLeading: func() {
				r.mu.Lock()
				defer r.mu.Unlock()
				if ctx.Err() == nil { // lost, not stopping (Run hands the address over then)
					r.drop()
				}
			},
			OnNewLeader: func(id string) {
				r.mu.Lock()
				defer r.mu.Unlock()
				if r.holder != id && id != "" && id != r.Config.Identity {
					r.Logf("%s holds the lease", id)
				}
				r.holder = id
				r.writeState()
			},
		},
	})
	if err != nil {
		return err
	}
	le.Run(round)
	return nil
}

// lead holds and announces the address until ctx (the leadership) ends, then removes it, unless
// the runner is stopping (stop has ended): Run then hands the address over. If it cannot add
// the address it gives the lease up (giveUp ends the round, which releases it).
func (r *Runner) lead(ctx, stop context.Context, giveUp context.CancelFunc) {
	r.mu.Lock()
	if ctx.Err() != nil { // already stopped leading: OnStoppedLeading has run or will
		r.mu.Unlock()
		return
	}
	if err := r.Address.Add(); err != nil {
		r.gaveUp = true
		r.mu.Unlock()
		r.Logf("cannot hold %s, giving the lease up: %v", r.Config.Address, err)
		giveUp()
		return
	}
	r.held, r.leading, r.holder, r.announced = true, true, r.Config.Identity, nil
	r.writeState()
	r.mu.Unlock()
	r.Logf("holding %s on %s", r.Config.Address, r.Config.Interface)

	for i := 0; ; i++ {
		r.announce(ctx)
		wait := r.Timing.AnnounceEvery
		if i+1 < r.Timing.AnnounceBurst {
			wait = r.Timing.AnnounceGap
		}
		select {
		case <-ctx.Done():
			if stop.Err() != nil {
				return
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			r.drop()
			return
		case <-time.After(wait):
		}
	}
}

// awaitSuccessor is a stopping leader's hand-over, make before break: its lease released, it
// keeps the address until another master holds the lease (a new leader adds the address and
// announces it at once), and a moment for that announcement, at most LeaseDuration. Until
// then new connections still reach this host, whose API server still serves; after it the
// neighbours send them to the new holder, and drop resets what is left here. Breaking first
// left a gap in which a connection could land here as the address went, and wait for an
// answer this host could no longer send.
func (r *Runner) awaitSuccessor() {
	ctx, cancel := context.WithTimeout(context.Background(), r.Timing.LeaseDuration)
	defer cancel()
	for {
		l, err := r.Leases.Leases(r.Config.Namespace).Get(ctx, r.Config.Lease, metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" && *l.Spec.HolderIdentity != r.Config.Identity {
			r.Logf("%s holds the lease: releasing %s once it has announced it", *l.Spec.HolderIdentity, r.Config.Address)
			time.Sleep(2 * r.Timing.AnnounceGap)
			return
		}
		select {
		case <-ctx.Done():
			r.Logf("no other master took the lease within %s of its release: releasing %s", r.Timing.LeaseDuration, r.Config.Address)
			return
		case <-time.After(r.Timing.RetryPeriod / 10):
		}
	}
}

// announce sends one announcement unless leadership ended; it logs failures when they start
// and stop.
func (r *Runner) announce(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ctx.Err() != nil || !r.held {
		return
	}
	err := r.Address.Announce()
	switch {
	case err != nil && (r.announced == nil || r.announced.Error() != err.Error()):
		r.Logf("cannot announce %s: %v", r.Config.Address, err)
	case err == nil && r.announced != nil:
		r.Logf("announcing %s again", r.Config.Address)
	}
	r.announced = err
}

// drop removes the address if it is held and records that this runner does not lead; r.mu is
// held.
func (r *Runner) drop() {
	if r.held {
		if n, resetErr, err := release(r.Address); err != nil {
			r.Logf("cannot remove %s: %v", r.Config.Address, err)
		} else {
			r.held = false
			r.Logf("released %s (%d connections to it reset)%s", r.Config.Address, n, orNot(resetErr))
		}
	}
	r.leading = false
	r.writeState()
}

// writeState writes the state file when it changes, atomically; r.mu is held.
func (r *Runner) writeState() {
	if r.State == "" {
		return
	}
	data, err := json.Marshal(State{Address: r.Config.Address, Interface: r.Config.Interface, Holder: r.holder, Leading: r.leading})
	if err != nil || bytes.Equal(data, r.written) {
		return
	}
	if err := daemon.WriteAtomic(r.State, data); err != nil {
		r.Logf("state: %v", err)
		return
	}
	r.written = data
}

// release resets the connections made to the address, then removes it: a peer waiting on such
// a connection for an answer would otherwise wait until its own timeout (its host can no
// longer send from an address it lost, and the peer sends nothing the new holder could
// refuse); reset, it connects again, to the new holder. A kernel that cannot reset them
// (without CONFIG_INET_DIAG_DESTROY) still has the address removed: resetErr says why not, err
// is the removal's.
func release(a Address) (n int, resetErr, err error) {
	n, resetErr = a.Disconnect()
	return n, resetErr, a.Remove()
}

// orNot is what a log line adds for the connections that could not be reset.
func orNot(resetErr error) string {
	if resetErr == nil {
		return ""
	}
	return "; not all reset: " + resetErr.Error()
}
