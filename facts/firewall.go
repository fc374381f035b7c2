package facts

import (
	"slices"
	"strconv"
	"strings"
)

// Firewall is the host's firewall, when one runs, and what it lets in.
type Firewall struct {
	// Kind is "firewalld", "ufw" or "none"; "" when the host did not say.
	Kind string
	// Zone is firewalld's default zone; its "trusted" zone lets everything in.
	Zone string
	// Open are the ports it lets in: firewalld's ports and its services' ports in the default
	// zone, ufw's ALLOW rules ("Anywhere": every port).
	Open []PortRange
	// Sources are the addresses or subnets it lets in whatever the port: firewalld's trusted
	// zone's sources, ufw's "Anywhere ALLOW SOURCE" rules ("Anywhere": from everywhere).
	Sources []string
}

// Trusts says whether the firewall lets in everything from source (a subnet, as the inventory
// writes it).
func (fw Firewall) Trusts(source string) bool {
	if fw.Kind != "firewalld" && fw.Kind != "ufw" || fw.Kind == "firewalld" && fw.Zone == "trusted" {
		return true
	}
	return slices.Contains(fw.Sources, source) || fw.Kind == "ufw" && slices.Contains(fw.Sources, "Anywhere")
}

// PortRange is a protocol's ports From to To; Proto "" is tcp and udp; From 0 is every port.
type PortRange struct {
	Proto    string
	From, To int
}

// Allows says whether the firewall lets in every port of r (a range with one protocol).
func (fw Firewall) Allows(r PortRange) bool {
	if fw.Kind != "firewalld" && fw.Kind != "ufw" || fw.Kind == "firewalld" && fw.Zone == "trusted" {
		return true
	}
	for _, o := range fw.Open {
		if (o.Proto == "" || o.Proto == r.Proto) && (o.From == 0 || o.From <= r.From && r.To <= o.To) {
			return true
		}
	}
	return false
}

// parsePortRange reads "6443/tcp", "2379-2380/tcp" (sep "-": firewalld; ":" ufw) or "22" (both
// protocols).
func parsePortRange(s, sep string) ([]PortRange, bool) {
	ports, proto, _ := strings.Cut(s, "/")
	if proto != "" && proto != "tcp" && proto != "udp" {
		return nil, false
	}
	lo, hi, isRange := strings.Cut(ports, sep)
	from, err := strconv.Atoi(lo)
	if err != nil || from < 1 || from > 65535 {
		return nil, false
	}
	to := from
	if isRange {
		if to, err = strconv.Atoi(hi); err != nil || to < from || to > 65535 {
			return nil, false
		}
	}
	return []PortRange{{Proto: proto, From: from, To: to}}, true
}

// parseUFWRule reads one line of `ufw status`: "6443/tcp  ALLOW  Anywhere", "2379:2380/tcp
// ALLOW IN  198.51.100.0/24", "Anywhere  ALLOW  198.51.100.0/24" (every port from there: its
// source is returned too), and their "(v6)" twins; other lines (the status, the header, DENY
// rules, routed "ALLOW FWD" rules) give nothing.
func parseUFWRule(line string) (open []PortRange, source string) {
	f := slices.DeleteFunc(strings.Fields(line), func(w string) bool { return w == "(v6)" })
	if len(f) < 3 || f[1] != "ALLOW" || f[2] == "FWD" {
		return nil, ""
	}
	if f[0] == "Anywhere" {
		return []PortRange{{}}, f[len(f)-1]
	}
	r, _ := parsePortRange(f[0], ":")
	return r, ""
}
