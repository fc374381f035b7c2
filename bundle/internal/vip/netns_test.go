package main

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// helperEnv makes the test binary run netnsHelper instead of the tests: the integration test
// runs it inside a network namespace with `ip netns exec`, so that nothing of this process (nor
// of its threads) ever changes the root namespace.
const helperEnv = "KFORGE_VIP_TEST_HELPER"

func TestMain(m *testing.M) {
	if op := os.Getenv(helperEnv); op != "" {
		if err := netnsHelper(op, os.Getenv("KFORGE_VIP_TEST_VIP")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// netnsHelper holds ("add") or releases ("remove") vip as the runner does, on the interface it
// chooses itself; it prints the interface.
func netnsHelper(op, vipText string) error {
	vip, err := vipOf(vipText)
	if err != nil {
		return err
	}
	addrs, err := hostAddrs()
	if err != nil {
		return err
	}
	ifname, err := ChooseInterface(vip, "", addrs)
	if err != nil {
		return err
	}
	fmt.Println(ifname)
	a := HostAddress{Interface: ifname, VIP: vip}
	switch op {
	case "add":
		for range 2 { // holding it already is no error
			if err := a.Add(); err != nil {
				return err
			}
		}
		if has, err := a.Has(); err != nil || !has {
			return fmt.Errorf("after Add, Has: %v, %v", has, err)
		}
		for i := range DefaultTiming.AnnounceBurst {
			if i > 0 {
				time.Sleep(DefaultTiming.AnnounceGap)
			}
			if err := a.Announce(); err != nil {
				return err
			}
		}
	case "remove":
		for range 2 { // not holding it is no error
			if err := a.Remove(); err != nil {
				return err
			}
		}
		if has, err := a.Has(); err != nil || has {
			return fmt.Errorf("after Remove, Has: %v, %v", has, err)
		}
	default:
		return fmt.Errorf("unknown helper operation %q", op)
	}
	return nil
}

// TestHostAddressInNetns: in two network namespaces joined by a veth pair (198.51.100.201/24 and
// .202/24), the address (.203) is added to the first's veth, which the runner chooses itself;
// its gratuitous ARP puts the first veth's MAC in the second namespace's neighbour table; then
// it is removed. The namespaces, and so their interfaces and sysctls, are deleted afterwards;
// the root namespace is not touched.
func TestHostAddressInNetns(t *testing.T) {
	if testing.Short() {
		t.Skip("makes network namespaces")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2)")
	}
	pid := os.Getpid()
	nsA, nsB := fmt.Sprintf("kforge-vip-a-%d", pid), fmt.Sprintf("kforge-vip-b-%d", pid)
	vethA, vethB := fmt.Sprintf("kfva%d", pid), fmt.Sprintf("kfvb%d", pid)
	const vip = "198.51.100.203"

	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	for _, ns := range []string{nsA, nsB} {
		run("ip", "netns", "add", ns)
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v\n%s", ns, err, out)
			}
		})
	}
	// The pair is made inside nsA, its peer moved straight into nsB.
	run("ip", "-n", nsA, "link", "add", vethA, "type", "veth", "peer", "name", vethB, "netns", nsB)
	run("ip", "-n", nsA, "addr", "add", "198.51.100.201/24", "dev", vethA)
	run("ip", "-n", nsB, "addr", "add", "198.51.100.202/24", "dev", vethB)
	// nsB takes unsolicited ARP into its neighbour table (a switch or router does, one way or
	// another); set inside nsB, deleted with it.
	run("ip", "netns", "exec", nsB, "sysctl", "-qw", "net.ipv4.conf."+vethB+".arp_accept=1")
	run("ip", "-n", nsA, "link", "set", vethA, "up")
	run("ip", "-n", nsB, "link", "set", vethB, "up")
	m := regexp.MustCompile(`link/ether ([0-9a-f:]{17})`).FindStringSubmatch(run("ip", "-n", nsA, "-o", "link", "show", vethA))
	if m == nil {
		t.Fatalf("no MAC address for %s", vethA)
	}
	macA := m[1]

	helper := func(op string) string {
		t.Helper()
		cmd := exec.Command("ip", "netns", "exec", nsA, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+op, "KFORGE_VIP_TEST_VIP="+vip)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper %s in %s: %v\n%s", op, nsA, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if ifname := helper("add"); ifname != vethA {
		t.Fatalf("helper chose interface %q, want %s", ifname, vethA)
	}
	if out := run("ip", "-n", nsA, "-o", "-4", "addr", "show", "dev", vethA); !strings.Contains(out, " "+vip+"/32 ") {
		t.Errorf("%s has no %s/32:\n%s", vethA, vip, out)
	}
	var neigh string
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if neigh = run("ip", "netns", "exec", nsB, "ip", "neigh", "show", vip); strings.Contains(neigh, "lladdr "+macA) {
			break
		}
	}
	if !strings.Contains(neigh, "lladdr "+macA) {
		t.Errorf("%s's neighbour table after the gratuitous ARP: %q; want %s at %s", nsB, neigh, vip, macA)
	}
	t.Logf("%s: %s", nsB, strings.TrimSpace(neigh))

	helper("remove")
	if out := run("ip", "-n", nsA, "-o", "-4", "addr", "show", "dev", vethA); strings.Contains(out, vip+"/") {
		t.Errorf("%s still has %s:\n%s", vethA, vip, out)
	} else if !strings.Contains(out, "198.51.100.201/24") {
		t.Errorf("%s lost its own address:\n%s", vethA, out)
	}
}
