package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// ensureBridge creates the lab bridge with the lab subnet's first address, after checking that
// nothing else on the machine routes or holds an address in the subnet. A bridge that exists
// must carry exactly the lab address. Called under the registry lock.
func ensureBridge(ctx context.Context) error {
	routes, err := ipJSON(ctx, "-4", "route", "show", "table", "all")
	if err != nil {
		return err
	}
	addrs, err := ipJSON(ctx, "-4", "addr", "show")
	if err != nil {
		return err
	}
	if err := checkSubnetFree(routes, addrs); err != nil {
		return err
	}
	if _, err := os.Stat("/sys/class/net/" + Bridge); err == nil {
		out, err := exec.CommandContext(ctx, "ip", "-4", "-o", "addr", "show", "dev", Bridge).Output()
		if err != nil {
			return fmt.Errorf("ip addr show dev %s: %w", Bridge, err)
		}
		want := fmt.Sprintf("%s/%d", BridgeAddr, prefixLen)
		if !strings.Contains(string(out), " "+want+" ") || strings.Count(string(out), "\n") != 1 {
			return fmt.Errorf("bridge %s exists but does not carry exactly %s (found: %q): delete it (ip link del %s) if no lab uses it", Bridge, want, strings.TrimSpace(string(out)), Bridge)
		}
		return runInput(ctx, fmt.Sprintf("addr replace %s/64 dev %s nodad\nlink set %s up\n", BridgeAddr6, Bridge, Bridge), "ip", "-batch", "-")
	}
	// The bridge carries the IPv6 lab network's address too, whether or not a lab uses it
	// (nodad: usable at once); it goes with the bridge.
	return runInput(ctx, fmt.Sprintf("link add %s type bridge\naddr add %s/%d dev %s\naddr add %s/64 dev %s nodad\nlink set %s up\n",
		Bridge, BridgeAddr, prefixLen, Bridge, BridgeAddr6, Bridge, Bridge), "ip", "-batch", "-")
}

// checkSubnetFree fails when a route or an address of the machine (`ip -j` output) overlaps
// the lab subnet on any interface but the lab bridge.
func checkSubnetFree(routes, addrs []map[string]any) error {
	lab := netip.MustParsePrefix(Subnet)
	for _, r := range routes {
		dst, _ := r["dst"].(string)
		dev, _ := r["dev"].(string)
		if dst == "" || dst == "default" || dev == Bridge {
			continue
		}
		p, err := netip.ParsePrefix(dst)
		if err != nil {
			a, aerr := netip.ParseAddr(dst)
			if aerr != nil {
				continue
			}
			p = netip.PrefixFrom(a, 32)
		}
		if p.Overlaps(lab) {
			return fmt.Errorf("the lab subnet %s is already routed on this machine (%s dev %s), not by kforge's lab bridge %s: remove that route or the interface holding it; kforge lab will not share the subnet", Subnet, dst, dev, Bridge)
		}
	}
	for _, l := range addrs {
		ifname, _ := l["ifname"].(string)
		infos, _ := l["addr_info"].([]any)
		for _, ai := range infos {
			m, _ := ai.(map[string]any)
			local, _ := m["local"].(string)
			a, err := netip.ParseAddr(local)
			if err == nil && lab.Contains(a) && ifname != Bridge {
				return fmt.Errorf("interface %s holds %s, inside the lab subnet %s: remove that address; kforge lab will not share the subnet", ifname, local, Subnet)
			}
		}
	}
	return nil
}

// deleteBridge removes the lab bridge; called under the registry lock when no lab is left.
func deleteBridge(ctx context.Context) error {
	return deleteLink(ctx, Bridge)
}

// deleteLink deletes a network interface of the root namespace if it exists.
func deleteLink(ctx context.Context, name string) error {
	if name == "" {
		return nil
	}
	if _, err := os.Stat("/sys/class/net/" + name); err != nil {
		return nil
	}
	if err := run(ctx, "ip", "link", "del", name); err != nil {
		if _, serr := os.Stat("/sys/class/net/" + name); serr != nil {
			return nil // gone meanwhile (its peer's namespace died)
		}
		return err
	}
	return nil
}

// wireHost connects the host's network namespace (held by its launcher, pid) to the bridge: a
// veth whose inside end is eth0 with the host's address (and its IPv6 address, usable at once:
// no duplicate address detection on the lab's own bridge), no default route.
func wireHost(ctx context.Context, h *hostState, pid int) error {
	_ = deleteLink(ctx, h.Veth) // a leftover of a killed host
	if err := runInput(ctx, fmt.Sprintf("link add %s type veth peer name eth0 netns %d\nlink set %s master %s up\n",
		h.Veth, pid, h.Veth, Bridge), "ip", "-batch", "-"); err != nil {
		return err
	}
	cmds := fmt.Sprintf("link set lo up\naddr add %s/%d dev eth0\n", h.Address, prefixLen)
	if h.Address6 != "" {
		cmds += fmt.Sprintf("addr add %s/64 dev eth0 nodad\n", h.Address6)
	}
	return runInput(ctx, cmds+"link set eth0 up\n", "nsenter", "-t", strconv.Itoa(pid), "-n", "ip", "-batch", "-")
}

func ipJSON(ctx context.Context, args ...string) ([]map[string]any, error) {
	out, err := exec.CommandContext(ctx, "ip", append([]string{"-j"}, args...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("ip %s: %w", strings.Join(args, " "), err)
	}
	var v []map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		return nil, fmt.Errorf("ip %s: %w", strings.Join(args, " "), err)
	}
	return v, nil
}
