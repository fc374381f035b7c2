package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
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

// helperPort is where the "serve" helper listens and the "ask" helper connects.
const helperPort = "7443"

// netnsHelper holds ("add") or releases ("remove", "release") vip as the runner does, on the
// interface it chooses itself, and prints the interface; or it serves ("serve": every
// connection's line is answered after a second and a half by the namespace's name, on all
// addresses, as kube-apiserver listens) or asks ("ask": one line to vip, printing the answer
// or the error and how long it took).
func netnsHelper(op, vipText string) error {
	vip, err := vipOf(vipText)
	if err != nil {
		return err
	}
	switch op {
	case "serve":
		return serve(os.Getenv("KFORGE_VIP_TEST_NAME"))
	case "ask":
		start := time.Now()
		answer, err := ask(net.JoinHostPort(vip.String(), helperPort))
		if err != nil {
			fmt.Printf("%s error: %v\n", time.Since(start).Round(10*time.Millisecond), err)
		} else {
			fmt.Printf("%s answered by %s\n", time.Since(start).Round(10*time.Millisecond), answer)
		}
		return nil
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
	case "release": // as the runner does when it stops leading
		n, resetErr, err := release(a)
		if err = errors.Join(resetErr, err); err != nil {
			return err
		}
		fmt.Printf("reset %d\n", n)
	default:
		return fmt.Errorf("unknown helper operation %q", op)
	}
	return nil
}

// serve answers each connection's first line with name, a second and a half later (a request
// in flight while the address moves); it prints "listening" once it listens.
func serve(name string) error {
	l, err := net.Listen("tcp4", ":"+helperPort)
	if err != nil {
		return err
	}
	fmt.Println("listening")
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
				return
			}
			time.Sleep(1500 * time.Millisecond)
			fmt.Fprintln(c, name)
		}()
	}
}

// ask sends one line to addr and returns the answer; it gives up on connecting after 2 s and
// on the answer after 8 s, as the e2e's API probes do (a new connection each).
func ask(addr string) (string, error) {
	c, err := net.DialTimeout("tcp4", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(8 * time.Second)); err != nil {
		return "", err
	}
	if _, err := fmt.Fprintln(c, "who?"); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// TestHostAddressInNetns: in two network namespaces joined by a veth pair (198.51.100.201/24 and
// .202/24), the address (.203) is added to the first's veth, which the runner chooses itself;
// its gratuitous ARP puts the first veth's MAC in the second namespace's neighbour table; then
// it is removed. The namespaces, and so their interfaces and sysctls, are deleted afterwards;
// the root namespace is not touched.
func TestHostAddressInNetns(t *testing.T) {
	needNetns(t)
	pid := os.Getpid()
	nsA, nsB := fmt.Sprintf("kforge-vip-a-%d", pid), fmt.Sprintf("kforge-vip-b-%d", pid)
	vethA, vethB := fmt.Sprintf("kfva%d", pid), fmt.Sprintf("kfvb%d", pid)
	const vip = "198.51.100.203"

	run := func(args ...string) string { t.Helper(); return mustRun(t, args...) }
	addNetns(t, nsA, nsB)
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

	helper := func(op string) string { t.Helper(); return runHelper(t, nsA, op, vip) }
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

// needNetns skips a test that makes network namespaces where it cannot.
func needNetns(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("makes network namespaces")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2)")
	}
}

// mustRun runs a command, failing the test with its output if it fails.
func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// addNetns makes network namespaces, deleted (with their interfaces and sysctls) when the test
// ends.
func addNetns(t *testing.T, names ...string) {
	t.Helper()
	for _, ns := range names {
		mustRun(t, "ip", "netns", "add", ns)
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v\n%s", ns, err, out)
			}
		})
	}
}

// helperCmd is the test binary running netnsHelper's op inside network namespace ns.
func helperCmd(ns, op, vip string, env ...string) *exec.Cmd {
	cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+op, "KFORGE_VIP_TEST_VIP="+vip), env...)
	return cmd
}

// runHelper runs netnsHelper's op inside ns and returns what it printed.
func runHelper(t *testing.T, ns, op, vip string) string {
	t.Helper()
	out, err := helperCmd(ns, op, vip).CombinedOutput()
	if err != nil {
		t.Fatalf("helper %s in %s: %v\n%s", op, ns, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestHandOverResetsConnections: a master that stops holding the address resets the
// connections made to it, so that a client waiting on one learns at once, and its next
// connection reaches the new holder. Three network namespaces on one bridge (in the client's,
// as the lab's hosts are): masters a (198.51.100.201) and b (.202), each serving on all
// addresses as kube-apiserver does, and a client (.204). The address (.203) is on a; a request
// is sent to it that a answers only after 1.5 s; meanwhile b takes the address and a releases
// it, as the runners hand it over. Without the reset the client waits for an answer that a can no longer
// send (its source address is gone), until its own timeout: the 10 s API probe seen in CI
// during a CA rotation.
func TestHandOverResetsConnections(t *testing.T) {
	needNetns(t)
	pid := os.Getpid()
	nsA, nsB, nsC := fmt.Sprintf("kforge-vip-a-%d", pid), fmt.Sprintf("kforge-vip-b-%d", pid), fmt.Sprintf("kforge-vip-c-%d", pid)
	br := fmt.Sprintf("kfvbr%d", pid)
	const vip = "198.51.100.203"
	addNetns(t, nsA, nsB, nsC)
	mustRun(t, "ip", "-n", nsC, "link", "add", br, "type", "bridge")
	mustRun(t, "ip", "-n", nsC, "addr", "add", "198.51.100.204/24", "dev", br)
	mustRun(t, "ip", "netns", "exec", nsC, "sysctl", "-qw", "net.ipv4.conf."+br+".arp_accept=1")
	mustRun(t, "ip", "-n", nsC, "link", "set", br, "up")
	for i, ns := range []string{nsA, nsB} {
		host, port := fmt.Sprintf("kfvh%c%d", 'a'+i, pid), fmt.Sprintf("kfvp%c%d", 'a'+i, pid)
		mustRun(t, "ip", "-n", ns, "link", "add", host, "type", "veth", "peer", "name", port, "netns", nsC)
		mustRun(t, "ip", "-n", ns, "addr", "add", fmt.Sprintf("198.51.100.%d/24", 201+i), "dev", host)
		mustRun(t, "ip", "-n", ns, "link", "set", host, "up")
		mustRun(t, "ip", "-n", nsC, "link", "set", port, "master", br, "up")
	}
	for _, ns := range []string{nsA, nsB} {
		cmd := helperCmd(ns, "serve", vip, "KFORGE_VIP_TEST_NAME="+ns)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) // by its PID
		if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "listening\n" {
			t.Fatalf("server in %s: %q, %v", ns, line, err)
		}
	}

	runHelper(t, nsA, "add", vip)
	if got := runHelper(t, nsC, "ask", vip); !strings.HasSuffix(got, " answered by "+nsA) {
		t.Fatalf("before the hand-over, through %s: %s; want %s's answer", vip, got, nsA)
	}
	inFlight := helperCmd(nsC, "ask", vip)
	var answer strings.Builder
	inFlight.Stdout, inFlight.Stderr = &answer, &answer
	if err := inFlight.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // connected, its request waiting for a's answer
	// The runners' hand-over: the new holder first, then the old one releases it.
	runHelper(t, nsB, "add", vip)
	released := runHelper(t, nsA, "release", vip)
	if err := inFlight.Wait(); err != nil {
		t.Fatalf("ask: %v\n%s", err, answer.String())
	}
	got := strings.TrimSpace(answer.String())
	t.Logf("a request in flight while %s released the address (%s): %s", nsA, strings.ReplaceAll(released, "\n", ", "), got)
	if !strings.HasSuffix(released, "reset 1") {
		t.Errorf("%s released the address saying %q; want the one connection in flight reset", nsA, released)
	}
	took, err := time.ParseDuration(strings.Fields(got + " x")[0])
	if err != nil || took > 3*time.Second {
		t.Errorf("a request in flight on %s when it released the address: %q; want an error (or an answer) within 3 s, not a wait until the client's own timeout", nsA, got)
	}
	if got := runHelper(t, nsC, "ask", vip); !strings.HasSuffix(got, " answered by "+nsB) {
		t.Errorf("after the hand-over, through %s: %s; want %s's answer", vip, got, nsB)
	}
}
