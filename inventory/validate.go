package inventory

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/release"
)

var (
	dnsLabelRE          = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	hostLabelRE         = regexp.MustCompile(`^(?i)[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	labelNameRE         = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	flagNameRE          = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	unixUserRE          = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*\$?$`)
	keyAlgorithms       = []string{"ecdsa-p256", "ecdsa-p384", "rsa-2048", "rsa-3072", "rsa-4096"}
	sudoModes           = []string{"auto", "none", "passwordless", "password"}
	proxyModes          = []string{ProxyModeAuto, ProxyModeIptables, ProxyModeNftables}
	firewallModes       = []string{FirewallCheck, FirewallOpen}
	encryptionProviders = []string{EncryptionSecretbox, EncryptionAESCBC, EncryptionNone}
	podSecurityLevels   = []string{"privileged", "baseline", "restricted"}
	taintEffects        = []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}
	cgroupDrivers       = []string{"systemd", "cgroupfs"}
	networkPlugins      = []string{"flannel", "none"}
	networkPolicies     = []string{NetworkPolicyEnforce, NetworkPolicyOff}
)

// validator collects problems with the field path they belong to.
type validator struct {
	c         *Cluster
	lookupEnv func(string) (string, bool)
	errs      Errors
}

func (v *validator) add(path, hint, format string, args ...any) {
	v.errs = append(v.errs, v.c.errorAt(path, fmt.Sprintf(format, args...), hint))
}

// Validate checks a defaulted inventory and keeps its version's release row (Release); Parse
// and Load call it. lookupEnv tells whether the environment variables the inventory names are
// set.
func (c *Cluster) validate(lookupEnv func(string) (string, bool)) Errors {
	v := &validator{c: c, lookupEnv: lookupEnv}
	v.header()
	c.rel = v.version()
	v.networking()
	v.pki()
	v.ssh("ssh", &c.SSH, true)
	v.hosts()
	v.etcdGroup()
	v.endpoint()
	v.kubelet()
	v.security()
	if !strings.HasPrefix(c.ContainerRuntime.Endpoint, "unix://") {
		v.add("containerRuntime.endpoint", "write unix:///path/to/containerd.sock", "%q is not a unix socket URL", c.ContainerRuntime.Endpoint)
	}
	switch c.ContainerRuntime.Install {
	case RuntimeFromHost:
	case RuntimeFromBundle:
		if c.Bundle == "" {
			v.add("containerRuntime.install", "set bundle (kforge bundle build -o DIR builds one), or install: host to use the hosts' own containerd", "the runtime comes from the bundle, but no bundle is set")
		}
	default:
		v.add("containerRuntime.install", "use bundle or host", "unknown runtime source %q", c.ContainerRuntime.Install)
	}
	v.registries()
	v.etcdSnapshots()
	v.localVolumes()
	for i, a := range c.Addons {
		if a.Path == "" {
			v.add(fmt.Sprintf("addons[%d].path", i), "give the manifest file", "path is required")
		}
	}
	return v.errs
}

// Warnings are what Load accepts but a person should hear before the cluster depends on it,
// each at the file:line of its field, with why and what to do: today an even number of masters
// (EtcdQuorumWarning). `kforge inventory validate` prints them; preflight repeats each as a
// WARNING of apply and plan.
func (c *Cluster) Warnings() []*Error {
	var ws []*Error
	if w := c.EtcdQuorumWarning(); w != nil {
		ws = append(ws, w)
	}
	return ws
}

// EtcdQuorumWarning is the warning of an even number of masters (2, 4, …), or nil. Their
// stacked etcd members need a majority to work: N members tolerate (N-1)/2 failures, rounded
// down, so 2 tolerate none, as 1 does, and lose quorum when either fails; 4 tolerate 1, as 3 do.
// An even number adds a host that can fail and no tolerance.
func (c *Cluster) EtcdQuorumWarning() *Error {
	m := len(c.Masters)
	if m < 2 || m%2 != 0 || c.ExternalEtcd() {
		return nil
	}
	tolerate, as, lose := "none", "as 1 does", "either master fails"
	if m > 2 {
		tolerate, as, lose = fmt.Sprint((m-1)/2), fmt.Sprintf("as %d do", m-1), fmt.Sprintf("%d masters fail", (m-1)/2+1)
	}
	msg := fmt.Sprintf("%d masters run %d stacked etcd members, and N members tolerate (N-1)/2 failures, rounded down: %d tolerate %s, %s, and lose quorum when %s", m, m, m, tolerate, as, lose)
	const hint = "use an odd number: 1, 3 or 5 masters"
	if c.src == nil { // not loaded from a file: no position to name
		return &Error{Field: "masters", Msg: msg, Hint: hint}
	}
	return c.errorAt("masters", msg, hint)
}

func (v *validator) header() {
	c := v.c
	switch c.APIVersion {
	case APIVersion:
	case "":
		v.add("apiVersion", "add apiVersion: "+APIVersion+" as the first line", "apiVersion is required")
	default:
		v.add("apiVersion", "this kforge reads "+APIVersion, "unsupported apiVersion %q", c.APIVersion)
	}
	switch c.Kind {
	case Kind:
	case "":
		v.add("kind", "add kind: "+Kind, "kind is required")
	default:
		v.add("kind", "the inventory's kind is "+Kind, "unsupported kind %q", c.Kind)
	}
	if c.Name == "" {
		v.add("name", "add name: my-cluster", "the cluster name is required")
	} else if !isDNSLabel(c.Name) {
		v.add("name", "use lowercase letters, digits and '-', at most 63 characters, starting and ending with a letter or digit", "%q is not a valid cluster name", c.Name)
	}
}

// version checks that this kforge installs the Kubernetes version and returns its row of the
// release catalogue (release.For).
func (v *validator) version() release.Release {
	r, err := release.For(v.c.KubernetesVersion)
	var ve *release.VersionError
	switch {
	case errors.As(err, &ve):
		v.add("kubernetesVersion", ve.Hint, "%s", ve.Msg)
	case err != nil:
		v.add("kubernetesVersion", "", "%v", err)
	}
	return r
}

func (v *validator) networking() {
	n := v.c.Networking
	pods, podOK := v.subnets("networking.podSubnet", n.PodSubnet, "10.244.0.0/16,fd00:10:244::/56")
	svcs, svcOK := v.subnets("networking.serviceSubnet", n.ServiceSubnet, "10.96.0.0/12,fd00:10:96::/112")
	if podOK && svcOK {
		switch {
		case len(pods) != len(svcs):
			which, other, example := "podSubnet", "serviceSubnet", "fd00:10:96::/112"
			if len(svcs) == 2 {
				which, other, example = "serviceSubnet", "podSubnet", "fd00:10:244::/56"
			}
			v.add("networking."+other, fmt.Sprintf("add an IPv6 range after a comma, e.g. %s, or make %s IPv4 only", example, which), "%s is dual-stack (IPv4 and IPv6) but %s has only %s", which, other, family(pods[0]))
		case pods[0].Addr().Is4() != svcs[0].Addr().Is4():
			v.add("networking.serviceSubnet", "use the same IP family for both, or list an IPv4 and an IPv6 range in each for dual-stack", "serviceSubnet %s and podSubnet %s are different IP families", svcs[0], pods[0])
		default:
			for i := range pods {
				if pods[i].Overlaps(svcs[i]) {
					v.add("networking.serviceSubnet", "pick ranges that do not overlap, e.g. podSubnet 10.244.0.0/16 and serviceSubnet 10.96.0.0/12", "serviceSubnet %s overlaps podSubnet %s", svcs[i], pods[i])
				}
			}
		}
	}
	if svcOK {
		const maxHostBits = 20 // kube-apiserver: at most /12 for IPv4, /108 for IPv6
		for _, svc := range svcs {
			if hostBits := svc.Addr().BitLen() - svc.Bits(); hostBits > maxHostBits {
				v.add("networking.serviceSubnet", fmt.Sprintf("use a /%d or smaller range", svc.Addr().BitLen()-maxHostBits), "serviceSubnet %s is too large for kube-apiserver", svc)
			} else if hostBits < 2 {
				v.add("networking.serviceSubnet", "use a larger range, e.g. 10.96.0.0/12", "serviceSubnet %s has no room for Services", svc)
			}
		}
	}
	if podOK {
		fields := []string{"networking.nodeCIDRMaskSize", "networking.nodeCIDRMaskSizeIPv6"}
		for i, mask := range n.NodeCIDRMaskSizes()[:len(pods)] {
			pod, bits := pods[i], pods[i].Bits()
			switch {
			case mask <= bits || mask > pod.Addr().BitLen()-2:
				v.add(fields[i], fmt.Sprintf("use a value between %d and %d", bits+1, pod.Addr().BitLen()-2), "node CIDR mask /%d does not fit podSubnet %s", mask, pod)
			case mask-bits > 16:
				v.add(fields[i], fmt.Sprintf("use at most /%d, or a smaller podSubnet", bits+16), "node CIDR mask /%d would split podSubnet %s into more than 65536 node ranges (kube-controller-manager's limit)", mask, pod)
			}
		}
	}
	if !isDNSName(n.DNSDomain) {
		v.add("networking.dnsDomain", "use a DNS name such as cluster.local", "%q is not a valid DNS domain", n.DNSDomain)
	}
	if !slices.Contains(networkPlugins, n.Plugin) {
		v.add("networking.plugin", "use one of: "+strings.Join(networkPlugins, ", "), "unknown pod network plugin %q", n.Plugin)
	}
	if !slices.Contains(networkPolicies, n.NetworkPolicy) {
		v.add("networking.networkPolicy", "use one of: "+strings.Join(networkPolicies, ", "), "unknown NetworkPolicy setting %q", n.NetworkPolicy)
	}
	if n.AdminNetworkPolicy && n.NetworkPolicy == NetworkPolicyOff {
		v.add("networking.adminNetworkPolicy", "set networking.networkPolicy: enforce, or leave adminNetworkPolicy out", "AdminNetworkPolicy needs the NetworkPolicy agent, which networking.networkPolicy: off removes")
	}
	dual := podOK && len(pods) == 2
	// Node networks: a host inside the pod or service range is unreachable once routes are set.
	for _, h := range v.allHosts() {
		field := h.path + ".address"
		if h.host.InternalAddress != "" {
			field = h.path + ".internalAddress"
		}
		v6 := h.path + ".ipv6Address"
		switch {
		case h.role == RoleEtcd && h.host.IPv6Address != "":
			v.add(v6, "remove it: etcd's members talk over IPv4 (the host's address)", "an etcd host needs no IPv6 address")
		case h.role == RoleEtcd:
		case dual && h.host.IPv6Address == "":
			v.add(v6, "give every host its IPv6 address inside the cluster: the cluster is dual-stack", "ipv6Address is required (networking.podSubnet is dual-stack)")
		case !dual && h.host.IPv6Address != "":
			v.add(v6, "remove it, or make networking.podSubnet and serviceSubnet dual-stack (an IPv4 and an IPv6 range each)", "ipv6Address is set but the cluster is not dual-stack")
		}
		ips := [][2]string{{field, h.host.NodeIP()}}
		if h.host.IPv6Address != "" {
			ips = append(ips, [2]string{v6, h.host.IPv6Address})
			if ip, err := netip.ParseAddr(h.host.IPv6Address); err != nil || !ip.Is6() || ip.Is4In6() {
				v.add(v6, "write the node's IPv6 address, e.g. 2001:db8::10", "%q is not an IPv6 address", h.host.IPv6Address)
			}
		}
		if ip, err := netip.ParseAddr(h.host.NodeIP()); err == nil && dual && !ip.Is4() {
			v.add(field, "a dual-stack cluster's hosts have an IPv4 address here and their IPv6 one in ipv6Address", "node address %s is not IPv4", ip)
		}
		for _, fs := range ips {
			f := fs[0]
			ip, err := netip.ParseAddr(fs[1])
			if err != nil {
				continue
			}
			for _, pod := range pods {
				if podOK && pod.Contains(ip) {
					v.add(f, "choose a podSubnet that does not contain your hosts' addresses", "node address %s lies inside podSubnet %s", ip, pod)
				}
			}
			for _, svc := range svcs {
				if svcOK && svc.Contains(ip) {
					v.add(f, "choose a serviceSubnet that does not contain your hosts' addresses", "node address %s lies inside serviceSubnet %s", ip, svc)
				}
			}
		}
	}
}

// subnets checks a subnet setting: one CIDR, or an IPv4 and an IPv6 one separated by a comma
// (dual-stack).
func (v *validator) subnets(path, s, dualExample string) ([]netip.Prefix, bool) {
	var ps []netip.Prefix
	parts := splitList(s)
	if len(parts) > 2 {
		v.add(path, "write one CIDR, or for dual-stack an IPv4 and an IPv6 one, e.g. "+dualExample, "%d ranges: at most two (one per IP family)", len(parts))
		return nil, false
	}
	for _, part := range parts {
		p, ok := v.cidr(path, part)
		if !ok {
			return nil, false
		}
		ps = append(ps, p)
	}
	if len(ps) == 2 && !(ps[0].Addr().Is4() && ps[1].Addr().Is6()) {
		v.add(path, "list an IPv4 range, then an IPv6 one, e.g. "+dualExample, "%s: a dual-stack setting is one IPv4 range followed by one IPv6 range", s)
		return nil, false
	}
	return ps, true
}

// family names p's IP family.
func family(p netip.Prefix) string {
	if p.Addr().Is4() {
		return "IPv4"
	}
	return "IPv6"
}

func (v *validator) cidr(path, s string) (netip.Prefix, bool) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		v.add(path, "write a CIDR such as 10.244.0.0/16", "%q is not a CIDR", s)
		return p, false
	}
	if p.Masked() != p {
		v.add(path, fmt.Sprintf("did you mean %s?", p.Masked()), "%s is not a network address (host bits are set)", s)
		return p, false
	}
	return p, true
}

func (v *validator) pki() {
	p := v.c.PKI
	if !slices.Contains(keyAlgorithms, p.KeyAlgorithm) {
		v.add("pki.keyAlgorithm", "use one of: "+strings.Join(keyAlgorithms, ", "), "unknown key algorithm %q", p.KeyAlgorithm)
	}
	if p.CertValidity > p.CAValidity {
		v.add("pki.certValidity", "shorten certValidity or lengthen caValidity", "certValidity %s exceeds caValidity %s: a certificate cannot outlive its CA", p.CertValidity, p.CAValidity)
	}
	for i, san := range p.APIServerCertSANs {
		if !isIPOrDNSName(strings.TrimPrefix(san, "*.")) {
			v.add(fmt.Sprintf("pki.apiServerCertSANs[%d]", i), "use an IP address or a DNS name (a leading *. is allowed)", "%q is not an IP address or DNS name", san)
		}
	}
	if ca := p.ExternalCA; ca != nil {
		if ca.Cert == "" {
			v.add("pki.externalCA.cert", "give the CA certificate's PEM file", "cert is required with externalCA")
		}
		if ca.Key == "" {
			v.add("pki.externalCA.key", "give the CA private key's PEM file", "key is required with externalCA")
		}
	}
}

// ssh checks an ssh block; top says whether it is the top-level one (where defaults apply).
func (v *validator) ssh(path string, s *SSH, top bool) {
	if s.User != "" && !unixUserRE.MatchString(s.User) {
		v.add(path+".user", "use a login name such as root or ubuntu", "%q is not a valid user name", s.User)
	}
	if s.Port < 0 || s.Port > 65535 || (top && s.Port == 0) {
		v.add(path+".port", "use a port between 1 and 65535", "port %d is out of range", s.Port)
	}
	for _, e := range []struct{ field, val string }{
		{"passphraseEnv", s.PassphraseEnv}, {"passwordEnv", s.PasswordEnv}, {"sudoPasswordEnv", s.SudoPasswordEnv},
	} {
		if e.val != "" && !validEnvName(e.val) {
			hint := "give the NAME of an environment variable (letters, digits, _), not the secret itself"
			v.add(path+"."+e.field, hint, "%q is not an environment variable name", e.val)
		}
	}
	if s.Sudo != "" && !slices.Contains(sudoModes, s.Sudo) {
		v.add(path+".sudo", "use one of: "+strings.Join(sudoModes, ", "), "unknown sudo mode %q", s.Sudo)
	}
	if s.Sudo == "password" && s.SudoPasswordEnv == "" {
		v.add(path+".sudoPasswordEnv", "name the environment variable holding the sudo password, e.g. sudoPasswordEnv: KFORGE_SUDO_PASSWORD", "sudo: password needs sudoPasswordEnv")
	}
	if s.HostKey != "" {
		v.hostKey(path+".hostKey", s.HostKey)
	}
	for i, b := range s.Bastions {
		bp := fmt.Sprintf("%s.bastions[%d]", path, i)
		if b.Address == "" {
			v.add(bp+".address", "give the jump host's address", "address is required")
		} else if !validHostPort(b.Address, true) {
			v.add(bp+".address", "write host or host:port, e.g. bastion.example.com:22", "%q is not a valid address", b.Address)
		}
		if b.User != "" && !unixUserRE.MatchString(b.User) {
			v.add(bp+".user", "use a login name such as root or ubuntu", "%q is not a valid user name", b.User)
		}
		if b.HostKey != "" {
			v.hostKey(bp+".hostKey", b.HostKey)
		}
	}
}

func (v *validator) hostKey(path, key string) {
	if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(key)); err != nil {
		v.add(path, `paste the host's public key line, e.g. the output of: ssh-keyscan -t ed25519 HOST | cut -d' ' -f2-`, "not an SSH public key (%v)", err)
	}
}

type placedHost struct {
	path string
	role Role
	host *Host
}

func (v *validator) allHosts() []placedHost {
	var hs []placedHost
	for i := range v.c.Masters {
		hs = append(hs, placedHost{fmt.Sprintf("masters[%d]", i), RoleMaster, &v.c.Masters[i]})
	}
	for i := range v.c.Workers {
		hs = append(hs, placedHost{fmt.Sprintf("workers[%d]", i), RoleWorker, &v.c.Workers[i]})
	}
	for i := range v.c.Etcd {
		hs = append(hs, placedHost{fmt.Sprintf("etcd[%d]", i), RoleEtcd, &v.c.Etcd[i]})
	}
	return hs
}

func (v *validator) hosts() {
	if len(v.c.Masters) == 0 {
		v.add("masters", "add at least one host under masters:", "the cluster needs at least one master")
	}
	names := map[string]placedHost{}
	addrs := map[string]placedHost{}
	nodeIPs := map[string]placedHost{}
	for _, ph := range v.allHosts() {
		h, p := ph.host, ph.path
		switch {
		case h.Name == "":
			v.add(p+".name", "give every host a name: its Kubernetes node name", "name is required")
		case !isDNSLabel(h.Name):
			v.add(p+".name", "use lowercase letters, digits and '-', at most 63 characters, starting and ending with a letter or digit", "%q is not a valid node name", h.Name)
		}
		switch {
		case h.Address == "":
			v.add(p+".address", "give the IP or DNS name kforge connects to over SSH", "address is required")
		case !isIPOrDNSName(h.Address):
			v.add(p+".address", "use an IP address or a DNS name", "%q is not a valid address", h.Address)
		}
		if h.InternalAddress != "" {
			if _, err := netip.ParseAddr(h.InternalAddress); err != nil {
				v.add(p+".internalAddress", "use the node's IP address inside the cluster network", "%q is not an IP address", h.InternalAddress)
			}
		} else if _, err := netip.ParseAddr(h.Address); err != nil && h.Address != "" && isIPOrDNSName(h.Address) {
			v.add(p+".internalAddress", "set internalAddress to the node's IP: kubelet, etcd and the API server need an IP", "address %q is a DNS name and no internalAddress is given", h.Address)
		}
		if h.SSH != nil {
			v.ssh(p+".ssh", h.SSH, false)
		}
		v.labels(p, h)

		// Uniqueness. The same name and address twice is the same host listed twice.
		if h.Name == "" {
			continue
		}
		eff := v.c.SSH.Merge(h.SSH)
		addrKey := net.JoinHostPort(h.Address, strconv.Itoa(eff.Port))
		if first, dup := names[h.Name]; dup {
			switch {
			case first.host.Address == h.Address && first.role == ph.role:
				v.add(p, "remove the second entry", "host %q is listed twice in %ss (first at %s)", h.Name, ph.role, v.c.Where(first.path))
			case first.host.Address == h.Address && ph.role == RoleEtcd:
				v.add(p, "an etcd host runs etcd alone: give the etcd group hosts of its own, or leave etcd out for stacked etcd on the masters", "host %q is listed both as a %s (%s) and as an etcd host", h.Name, first.role, v.c.Where(first.path))
			case first.host.Address == h.Address:
				v.add(p, "a host is either a master or a worker: remove it from workers (masters run workloads too when untainted)", "host %q is listed both as a master (%s) and as a worker", h.Name, v.c.Where(first.path))
			default:
				v.add(p+".name", "give every host its own name", "name %q is already used by %s (%s)", h.Name, first.path, v.c.Where(first.path))
			}
			continue
		}
		names[h.Name] = ph
		if h.Address != "" {
			if first, dup := addrs[addrKey]; dup {
				v.add(p+".address", "each host needs its own address (or its own ssh port behind one address)", "address %s is already used by %s (%s)", addrKey, first.host.Name, v.c.Where(first.path))
			} else {
				addrs[addrKey] = ph
			}
		}
		if ip := h.NodeIP(); h.InternalAddress != "" {
			if first, dup := nodeIPs[ip]; dup {
				v.add(p+".internalAddress", "each node needs its own IP inside the cluster", "internal address %s is already used by %s (%s)", ip, first.host.Name, v.c.Where(first.path))
			} else {
				nodeIPs[ip] = ph
			}
		}
		if ip := h.IPv6Address; ip != "" {
			if first, dup := nodeIPs[ip]; dup {
				v.add(p+".ipv6Address", "each node needs its own IPv6 address inside the cluster", "IPv6 address %s is already used by %s (%s)", ip, first.host.Name, v.c.Where(first.path))
			} else {
				nodeIPs[ip] = ph
			}
		}
	}
}

// etcdGroup checks the etcd group (external etcd): an odd number of members, 3 to 7, and no
// node settings on hosts that are no nodes.
func (v *validator) etcdGroup() {
	n := len(v.c.Etcd)
	switch {
	case n == 0:
	case n == 1:
		v.add("etcd", "list 3 or 5 etcd hosts, or leave etcd out: the masters then run etcd themselves", "one external etcd member tolerates no failure and can be replaced only by a restore")
	case n%2 == 0:
		v.add("etcd", fmt.Sprintf("list %d or %d etcd hosts", n-1, n+1), "%d etcd members tolerate (N-1)/2 = %d failures, as %d do: an even number adds a host that can fail and no tolerance", n, (n-1)/2, n-1)
	case n > 7:
		v.add("etcd", "list 3, 5 or 7 etcd hosts", "%d etcd members: every write waits on a majority of them; etcd advises at most 7", n)
	}
	for i, h := range v.c.Etcd {
		p := fmt.Sprintf("etcd[%d]", i)
		if len(h.Labels) > 0 {
			v.add(p+".labels", "remove them: an etcd host is no Kubernetes node", "labels on an etcd host")
		}
		if len(h.Taints) > 0 {
			v.add(p+".taints", "remove them: an etcd host is no Kubernetes node", "taints on an etcd host")
		}
	}
}

func (v *validator) labels(p string, h *Host) {
	for k, val := range h.Labels {
		lp := p + ".labels." + k
		if msg := checkQualifiedName(k); msg != "" {
			v.add(lp, "label keys look like name or prefix.example.com/name", "label key %q %s", k, msg)
		}
		if val != "" && (len(val) > 63 || !labelNameRE.MatchString(val)) {
			v.add(lp, "label values are at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", "label value %q is not valid", val)
		}
	}
	for i, t := range h.Taints {
		tp := fmt.Sprintf("%s.taints[%d]", p, i)
		if t.Key == "" {
			v.add(tp+".key", "give the taint a key", "key is required")
		} else if msg := checkQualifiedName(t.Key); msg != "" {
			v.add(tp+".key", "taint keys look like name or prefix.example.com/name", "taint key %q %s", t.Key, msg)
		}
		if t.Value != "" && (len(t.Value) > 63 || !labelNameRE.MatchString(t.Value)) {
			v.add(tp+".value", "taint values are at most 63 letters, digits, '-', '_' or '.'", "taint value %q is not valid", t.Value)
		}
		if !slices.Contains(taintEffects, t.Effect) {
			v.add(tp+".effect", "use one of: "+strings.Join(taintEffects, ", "), "unknown taint effect %q", t.Effect)
		}
	}
}

func (v *validator) endpoint() {
	if p := v.c.APIProxy.Port; p < 1 || p > 65535 || p == 6443 {
		v.add("apiProxy.port", "use a free port between 1 and 65535 other than the API server's 6443; the default is 6444", "port %d cannot be used", p)
	}
	v.vip()
	ep := v.c.ControlPlaneEndpoint
	if ep == "" {
		return
	}
	if !validHostPort(ep, false) {
		v.add("controlPlaneEndpoint", "write host:port, e.g. lb.example.com:6443 or [fd00::1]:6443", "%q is not a valid host:port", ep)
	}
}

// vip checks controlPlaneVIP against the inventory alone; preflight checks on the masters
// that it is in their subnet and that nothing else answers for it.
func (v *validator) vip() {
	vip := v.c.ControlPlaneVIP
	if vip == "" {
		return
	}
	ip, err := netip.ParseAddr(vip)
	switch {
	case err != nil || !ip.Is4():
		v.add("controlPlaneVIP", "write a free IPv4 address of the masters' subnet, e.g. 192.168.1.250: the address is announced by ARP, which IPv6 does not have", "%q is not an IPv4 address", vip)
		return
	case v.c.ControlPlaneEndpoint != "":
		v.add("controlPlaneVIP", "remove controlPlaneEndpoint to let the masters hold the virtual IP, or remove controlPlaneVIP to keep the load balancer", "a cluster has a load balancer (controlPlaneEndpoint %s) or a virtual IP, not both", v.c.ControlPlaneEndpoint)
	case len(v.c.Masters) < 2:
		v.add("controlPlaneVIP", "list at least two masters, or remove controlPlaneVIP: with one master, its address is the endpoint", "a virtual IP moves between masters; the inventory lists %d", len(v.c.Masters))
	}
	for _, h := range v.allHosts() {
		if h.host.Address == vip || h.host.InternalAddress == vip {
			v.add("controlPlaneVIP", "choose an address no host has: the masters take it in turn", "%s is the address of host %s", vip, h.host.Name)
		}
	}
}

func (v *validator) kubelet() {
	k := v.c.Kubelet
	if !slices.Contains(cgroupDrivers, k.CgroupDriver) {
		v.add("kubelet.cgroupDriver", "use systemd or cgroupfs", "unknown cgroup driver %q", k.CgroupDriver)
	}
	if m := v.c.Firewall; !slices.Contains(firewallModes, m) {
		v.add("firewall", "use one of: "+strings.Join(firewallModes, ", "), "unknown firewall setting %q", m)
	}
	if m := v.c.KubeProxy.Mode; !slices.Contains(proxyModes, m) {
		v.add("kubeProxy.mode", "use one of: "+strings.Join(proxyModes, ", "), "unknown kube-proxy mode %q", m)
	}
	if p := v.c.KubeProxy.ConntrackMaxPerCore; p != nil && *p < 0 {
		v.add("kubeProxy.conntrackMaxPerCore", "use 0 to leave the conntrack table alone, or a positive number of connections per core", "%d is negative", *p)
	}
	for name := range k.ExtraArgs {
		p := "kubelet.extraArgs." + name
		if strings.HasPrefix(name, "-") {
			v.add(p, fmt.Sprintf("write %s without the dashes", strings.TrimLeft(name, "-")), "flag %q has leading dashes", name)
		} else if !flagNameRE.MatchString(name) {
			v.add(p, "kubelet flag names are lowercase words joined by '-'", "%q is not a kubelet flag name", name)
		}
	}
}

func (v *validator) security() {
	s := v.c.Security
	if !slices.Contains(encryptionProviders, s.EncryptionAtRest) {
		v.add("security.encryptionAtRest", "use one of: "+strings.Join(encryptionProviders, ", "), "unknown provider %q", s.EncryptionAtRest)
	}
	for p, n := range map[string]int{"maxAge": s.Audit.MaxAge, "maxBackups": s.Audit.MaxBackups, "maxSize": s.Audit.MaxSize} {
		if n < 0 {
			v.add("security.audit."+p, "use a positive number, or leave it out for the default", "%d is negative", n)
		}
	}
	ps := s.PodSecurity
	for p, l := range map[string]string{"enforce": ps.Enforce, "warn": ps.Warn, "audit": ps.Audit} {
		if !slices.Contains(podSecurityLevels, l) {
			v.add("security.podSecurity."+p, "use one of: "+strings.Join(podSecurityLevels, ", "), "unknown Pod Security level %q", l)
		}
	}
	for i, ns := range ps.ExemptNamespaces {
		if !isDNSLabel(ns) {
			v.add(fmt.Sprintf("security.podSecurity.exemptNamespaces[%d]", i), "a namespace name is a DNS label: lowercase letters, digits and '-'", "%q is not a namespace name", ns)
		}
	}
}

func (v *validator) etcdSnapshots() {
	e := v.c.EtcdSnapshots
	if e.Every < MinEtcdSnapshotsEvery {
		v.add("etcdSnapshots.every", "take them at most once a minute (every: 1m or more)", "%s is too often: each snapshot is a full copy of etcd's database", e.Every)
	}
	if e.Keep < 0 {
		v.add("etcdSnapshots.keep", "keep at least 1, or leave it out for the default", "%d is negative", e.Keep)
	}
	if e.Enabled != nil && *e.Enabled && v.c.Bundle == "" {
		v.add("etcdSnapshots.enabled", "set bundle (kforge bundle build -o DIR builds one), or enabled: false", "scheduled snapshots are taken by kforge-etcd-snapshot from the bundle, but no bundle is set")
	}
}

// ResetDirs are the directories kforge reset removes from a node (with what they hold): the
// local volumes' data cannot live there.
var ResetDirs = []string{hostpath.KubernetesDir, hostpath.KubeletDir, hostpath.EtcdDataDir, hostpath.RegistryDir,
	path.Dir(hostpath.APIProxyState), path.Dir(hostpath.VIPState)}

func (v *validator) localVolumes() {
	l := v.c.LocalVolumes
	if l.On() && v.c.Bundle == "" {
		v.add("localVolumes.enabled", "set bundle (kforge bundle build -o DIR builds one), or enabled: false", "local volumes are made and removed by kforge's helper image, which only the bundle has, but no bundle is set")
	}
	switch p := l.Path; {
	case !path.IsAbs(p):
		v.add("localVolumes.path", "write an absolute path, e.g. "+DefaultLocalVolumesPath, "%q is not an absolute path", p)
	case path.Clean(p) != p:
		v.add("localVolumes.path", "write it as "+path.Clean(p), "%q is not a clean path", p)
	case p == "/":
		v.add("localVolumes.path", "give the volumes a directory of their own, e.g. "+DefaultLocalVolumesPath, "the volumes cannot be / itself")
	default:
		for _, d := range ResetDirs {
			if p == d || strings.HasPrefix(p, d+"/") {
				v.add("localVolumes.path", "choose a directory outside "+d+", e.g. "+DefaultLocalVolumesPath, "%s is kforge's: kforge reset removes %s, and the volumes' data would go with it", p, d)
			}
		}
	}
}

func isDNSLabel(s string) bool { return len(s) <= 63 && dnsLabelRE.MatchString(s) }

// isDNSName accepts an RFC 1123 DNS name (letters are case-insensitive).
func isDNSName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if len(l) > 63 || !hostLabelRE.MatchString(l) {
			return false
		}
	}
	return true
}

func isIPOrDNSName(s string) bool {
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	// A dotted quad that failed to parse as an IP is a typo, not a host name.
	if allNumericLabels(s) {
		return false
	}
	return isDNSName(s)
}

func allNumericLabels(s string) bool {
	for _, l := range strings.Split(s, ".") {
		if _, err := strconv.Atoi(l); err != nil {
			return false
		}
	}
	return true
}

// validHostPort checks host:port (or just host when portOptional).
func validHostPort(s string, portOptional bool) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return portOptional && !strings.Contains(s, ":") && isIPOrDNSName(s)
	}
	n, err := strconv.Atoi(port)
	return err == nil && n > 0 && n < 65536 && isIPOrDNSName(host)
}

// checkQualifiedName checks a Kubernetes label or taint key; it returns "" or what is wrong.
func checkQualifiedName(k string) string {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	}
	if hasPrefix && (prefix == "" || !isDNSName(prefix) || strings.ToLower(prefix) != prefix) {
		return "has an invalid prefix (it must be a lowercase DNS name)"
	}
	if name == "" || len(name) > 63 || !labelNameRE.MatchString(name) {
		return "has an invalid name part (at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
	}
	return ""
}

// registries checks containerRuntime.registries: a host each, https mirrors, a CA file that
// exists (relative to the inventory), credentials whose variables are set (their values are
// read only when the file is rendered, and never shown).
func (v *validator) registries() {
	rs := v.c.ContainerRuntime.Registries
	if len(rs) > 0 && v.c.ContainerRuntime.Install != RuntimeFromBundle {
		v.add("containerRuntime.registries", "use containerRuntime.install: bundle (kforge then writes containerd's registry configuration), or configure the hosts' own containerd yourself", "registries are configured for the containerd kforge installs")
	}
	seen := map[string]bool{}
	for i, r := range rs {
		path := fmt.Sprintf("containerRuntime.registries[%d]", i)
		if r.Host == "" || strings.ContainsAny(r.Host, "/ ") {
			v.add(path+".host", "write the registry's host as images name it, e.g. registry.k8s.io or docker.io", "%q is not a registry host", r.Host)
		}
		if seen[r.Host] {
			v.add(path+".host", "list each registry once", "registry %s is listed twice", r.Host)
		}
		seen[r.Host] = true
		for j, m := range r.Mirrors {
			if u, err := url.Parse(m); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				v.add(fmt.Sprintf("%s.mirrors[%d]", path, j), "write a URL, e.g. https://mirror.example:5000", "%q is not a mirror URL", m)
			}
		}
		if r.CAFile != "" {
			if _, err := os.Stat(v.c.Path(r.CAFile)); err != nil {
				v.add(path+".caFile", "give the path of the CA certificate (PEM), relative to this file", "cannot read %s: %v", r.CAFile, errors.Unwrap(err))
			}
		}
		if (r.UsernameEnv == "") != (r.PasswordEnv == "") {
			v.add(path+".passwordEnv", "give both usernameEnv and passwordEnv, or neither", "credentials need a user name and a password")
		}
		for _, e := range []struct{ field, name string }{{"usernameEnv", r.UsernameEnv}, {"passwordEnv", r.PasswordEnv}} {
			switch {
			case e.name == "":
			case !validEnvName(e.name):
				v.add(path+"."+e.field, "give the NAME of an environment variable (letters, digits, _), not the secret itself", "%q is not an environment variable name", e.name)
			case v.lookupEnv != nil:
				if _, ok := v.lookupEnv(e.name); !ok {
					v.add(path+"."+e.field, "export "+e.name+" before running kforge", "environment variable %s is not set", e.name)
				}
			}
		}
	}
}
