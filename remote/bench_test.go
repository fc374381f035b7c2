package remote

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sync/errgroup"
)

// The fan-out benchmark: 50 simulated hosts, each a network namespace on a bridge running
// Debian's sshd (no systemd), 198.51.100.128/26 only (bridge .129, hosts from .130). Per host:
// connect, run 5 commands, upload 30 files (~200 KB in all). kforge's remote (one connection
// per host, sessions and one SFTP stream on it) against OpenSSH's ssh and scp driven by
// xargs -P 50 (a new connection per command, one scp for the 30 files), in the same run.
//
//	go test -run '^$' -bench Fanout50 -benchtime 3x ./remote/

const (
	benchHosts    = 50
	benchFiles    = 30
	benchBridge   = "kfr-br"
	benchBridgeIP = "198.51.100.129"
)

var benchCommands = []string{"uname -a", "cat /etc/os-release", "mkdir -p %s", "test -d %s", "df -P %s"}

type benchLab struct {
	dir, key, knownHosts, files string
	addrs                       []string
}

func startBenchLab(b *testing.B) *benchLab {
	requireTools(b, "sshd", "ssh", "scp", "xargs", "unshare", "ip")
	dir, err := os.MkdirTemp("", "kfr-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	lab := &benchLab{dir: dir, key: filepath.Join(dir, "id_ed25519"), knownHosts: filepath.Join(dir, "known_hosts"), files: filepath.Join(dir, "files")}
	run(b, "", "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", lab.key)
	os.MkdirAll(filepath.Join(dir, "ak"), 0o755)
	pub, _ := os.ReadFile(lab.key + ".pub")
	os.WriteFile(filepath.Join(dir, "ak", "root"), pub, 0o644)

	// A bridge of our own; stale ones from a killed run are ours (kfr- prefix) and go first.
	exec.Command("ip", "link", "del", benchBridge).Run()
	run(b, "", "ip", "link", "add", benchBridge, "type", "bridge")
	b.Cleanup(func() { exec.Command("ip", "link", "del", benchBridge).Run() })
	run(b, "", "ip", "addr", "add", benchBridgeIP+"/26", "dev", benchBridge)
	run(b, "", "ip", "link", "set", benchBridge, "up")

	var kh bytes.Buffer
	var batch strings.Builder
	var goOns []func()
	for i := range benchHosts {
		ip := fmt.Sprintf("198.51.100.%d", 130+i)
		name := fmt.Sprintf("h%02d", i)
		_, priv, _ := ed25519.GenerateKey(rand.Reader)
		blk, _ := ssh.MarshalPrivateKey(priv, "")
		os.WriteFile(filepath.Join(dir, name+"_host"), pem.EncodeToMemory(blk), 0o600)
		hk, _ := ssh.NewPublicKey(priv.Public())
		fmt.Fprintf(&kh, "%s %s", ip, ssh.MarshalAuthorizedKey(hk))
		cfg := filepath.Join(dir, name+"_sshd_config")
		os.WriteFile(cfg, []byte(fmt.Sprintf(`ListenAddress %s
HostKey %s/%s_host
PidFile none
UsePAM no
PermitRootLogin prohibit-password
AuthorizedKeysFile %s/ak/%%u
StrictModes no
Subsystem sftp /usr/lib/openssh/sftp-server
PrintMotd no
PrintLastLog no
LogLevel ERROR
`, ip, dir, name, dir)), 0o644)
		pid, goOn, _ := startNS(b, dir, name, cfg, false, fmt.Sprintf("ip link set lo up; ip addr add %s/26 dev eth0; ip link set eth0 up", ip))
		goOns = append(goOns, goOn)
		veth := fmt.Sprintf("kfr-h%02d", i)
		fmt.Fprintf(&batch, "link add %s master %s type veth peer name eth0 netns %d\nlink set %s up\n", veth, benchBridge, pid, veth)
		lab.addrs = append(lab.addrs, ip)
	}
	// Host-side veths go with their namespaces; deleting them is for a failed start.
	b.Cleanup(func() {
		for i := range benchHosts {
			exec.Command("ip", "link", "del", fmt.Sprintf("kfr-h%02d", i)).Run()
		}
	})
	run(b, batch.String(), "ip", "-batch", "-")
	for _, g := range goOns {
		g()
	}
	os.WriteFile(lab.knownHosts, kh.Bytes(), 0o600)
	// Wait until every sshd accepts connections (not part of the measurement).
	err = Each(context.Background(), lab.hosts(), Limits{Hosts: benchHosts}, func(ctx context.Context, a benchAddr) error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		h, err := Dial(ctx, lab.config(string(a)), lab.options())
		if err != nil {
			return err
		}
		return h.Close()
	})
	if err != nil {
		b.Fatal(err)
	}
	return lab
}

// benchAddr names a host by its address, for Each.
type benchAddr string

func (a benchAddr) Name() string { return string(a) }

func (l *benchLab) hosts() []benchAddr {
	hs := make([]benchAddr, len(l.addrs))
	for i, a := range l.addrs {
		hs[i] = benchAddr(a)
	}
	return hs
}

func (l *benchLab) config(ip string) Config {
	return Config{Name: ip, Address: ip, User: "root", IdentityFile: l.key, KnownHostsFile: l.knownHosts, Sudo: SudoNone, DialRetry: 20 * time.Second, KeepAlive: -1}
}

func (l *benchLab) options() Options {
	return Options{Getenv: func(string) string { return "" }, SSHConfigFile: "none"}
}

// kforge: one connection per host, the 5 commands in order, the 30 uploads 8 at a time.
func (l *benchLab) runKforge(ctx context.Context, round string) error {
	return Each(ctx, l.hosts(), Limits{Hosts: benchHosts}, func(ctx context.Context, a benchAddr) error {
		ip := string(a)
		h, err := Dial(ctx, l.config(ip), l.options())
		if err != nil {
			return err
		}
		defer h.Close()
		target := filepath.Join(l.dir, "out", round, "kforge", ip)
		for _, c := range benchCommands {
			if strings.Contains(c, "%s") {
				c = fmt.Sprintf(c, Quote(target))
			}
			if err := h.Run(ctx, Cmd{Command: c}); err != nil {
				return err
			}
		}
		var g errgroup.Group
		g.SetLimit(8)
		for i := range benchFiles {
			g.Go(func() error {
				name := fmt.Sprintf("file-%02d", i)
				f, closer, err := LocalFile(filepath.Join(l.files, name), filepath.Join(target, name), 0o644)
				if err != nil {
					return err
				}
				defer closer.Close()
				return h.Upload(ctx, f)
			})
		}
		return g.Wait()
	})
}

// OpenSSH: for each host (xargs -P 50), one ssh per command and one scp for the 30 files. With
// mux, the ssh and scp of a host share one ControlMaster connection (as Ansible does).
func (l *benchLab) runOpenSSH(round string, mux bool) error {
	opts := fmt.Sprintf("-F /dev/null -i %s -o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes -o BatchMode=yes -o LogLevel=ERROR", l.key, l.knownHosts)
	side := "openssh"
	if mux {
		side = "openssh-mux"
		opts += fmt.Sprintf(" -o ControlMaster=auto -o ControlPath=%s/cm-%%C -o ControlPersist=60", l.dir)
	}
	var script strings.Builder
	fmt.Fprintf(&script, "set -e\nh=$1\nt=%s/out/%s/%s/$h\n", l.dir, round, side)
	for _, c := range benchCommands {
		if strings.Contains(c, "%s") {
			c = fmt.Sprintf(c, `'$t'`)
		}
		fmt.Fprintf(&script, "ssh %s root@$h \"%s\" >/dev/null\n", opts, c)
	}
	fmt.Fprintf(&script, "scp -q %s %s/* root@$h:\"$t\"/\n", opts, l.files)
	if mux {
		// Not timed separately: ending the master is part of the job.
		fmt.Fprintf(&script, "ssh %s -O exit root@$h 2>/dev/null\n", opts)
	}
	cmd := exec.Command("xargs", "-P", strconv.Itoa(benchHosts), "-n", "1", "sh", "-c", script.String(), "openssh")
	cmd.Stdin = strings.NewReader(strings.Join(l.addrs, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("openssh run: %v\n%s", err, out)
	}
	return nil
}

// useFiles makes (once) and selects the set of benchFiles files of size bytes each.
func (l *benchLab) useFiles(size int) {
	l.files = filepath.Join(l.dir, fmt.Sprintf("files-%d", size))
	if _, err := os.Stat(l.files); err == nil {
		return
	}
	os.MkdirAll(l.files, 0o755)
	for i := range benchFiles {
		data := make([]byte, size)
		rand.Read(data)
		os.WriteFile(filepath.Join(l.files, fmt.Sprintf("file-%02d", i)), data, 0o644)
	}
}

func (l *benchLab) verify(b *testing.B, round, side string) {
	for _, ip := range l.addrs {
		ents, err := os.ReadDir(filepath.Join(l.dir, "out", round, side, ip))
		if err != nil || len(ents) != benchFiles {
			b.Fatalf("%s round %s host %s: %d files, %v", side, round, ip, len(ents), err)
		}
	}
}

// BenchmarkFanout50Hosts: 30 files of ~6.8 KB (~200 KB per host, the figure) and,
// for bulk transfer, 30 files of 200 KB (6 MB per host).
func BenchmarkFanout50Hosts(b *testing.B) {
	lab := startBenchLab(b)
	for _, size := range []int{200 << 10 / benchFiles, 200 << 10} {
		b.Run(fmt.Sprintf("files=%dx%.1fKB", benchFiles, float64(size)/1024), func(b *testing.B) {
			lab.useFiles(size)
			benchFanout(b, lab, size)
		})
	}
}

func benchFanout(b *testing.B, lab *benchLab, size int) {
	names := []string{"kforge", "openssh", "openssh-mux"}
	total := make([]time.Duration, len(names))
	sides := []func(round string) error{
		func(round string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			return lab.runKforge(ctx, round)
		},
		func(round string) error { return lab.runOpenSSH(round, false) },
		func(round string) error { return lab.runOpenSSH(round, true) },
	}
	b.ResetTimer()
	for i := range b.N {
		round := fmt.Sprintf("%d-%d", size, i)
		// Rotate which side goes first, so none always meets warm caches.
		for k := range sides {
			j := (i + k) % len(sides)
			start := time.Now()
			if err := sides[j](round); err != nil {
				b.Fatal(err)
			}
			total[j] += time.Since(start)
		}
		b.StopTimer()
		for _, n := range names {
			lab.verify(b, round, n)
		}
		os.RemoveAll(filepath.Join(lab.dir, "out", round))
		b.StartTimer()
	}
	n := float64(b.N)
	k, o, m := total[0].Seconds()/n, total[1].Seconds()/n, total[2].Seconds()/n
	b.ReportMetric(k, "kforge-s/op")
	b.ReportMetric(o, "openssh-s/op")
	b.ReportMetric(m, "openssh-mux-s/op")
	b.ReportMetric(o/k, "speedup-x")
	b.ReportMetric(m/k, "speedup-vs-mux-x")
	load, _ := os.ReadFile("/proc/loadavg")
	b.Logf("%d hosts, 5 commands + %d files (%d KB) each, mean of %d rounds: kforge %.2fs; OpenSSH ssh/scp, xargs -P %d: %.2fs (kforge %.1fx faster); same with ControlMaster: %.2fs (kforge %.1fx faster); load average %s",
		benchHosts, benchFiles, benchFiles*size>>10, b.N, k, benchHosts, o, o/k, m, m/k, strings.Fields(string(load))[0])
}
