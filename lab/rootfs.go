package lab

import (
	"bufio"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kforge/kforge/internal/fsx"
	"github.com/kforge/kforge/progress"
)

// Packages is what the base rootfs holds on top of debootstrap's minbase: systemd as init, sshd,
// containerd and runc, the tools kubeadm's preflight checks look for, curl, with which nodes
// take the bundle from the masters' registries, and nft, with which reset deletes nftables
// tables. systemd-resolved, firewalld (with the logind its polkitd needs), ufw and sudo are
// there for the traits of users' hosts (traits.go), disabled until a test gives a host one. Changing the list (or the files in files/) changes
// the rootfs hash, so a new rootfs is built beside the old one.
var Packages = []string{
	"systemd", "systemd-sysv", "dbus", "openssh-server",
	"iproute2", "iptables", "conntrack", "socat", "ebtables", "ethtool", "kmod", "procps",
	"containerd", "runc", "iputils-ping", "haproxy", "less", "curl",
	"systemd-resolved", "firewalld", "libpam-systemd", "ufw", "sudo", "nftables",
}

// Suite is the Debian release the hosts run.
const Suite = "bookworm"

//go:embed files
var files embed.FS

// sysctlDir is where, inside a host, the files holding the values kubelet wants for machine-wide
// sysctls live; each is bind-mounted read-only over its /proc/sys entry.
const sysctlDir = "/etc/kforge-lab/sysctl"

// rootfsRecipe is hashed into the rootfs directory name: bump it when build steps change.
const rootfsRecipe = "kforge-lab-rootfs/3"

// RootfsHash names the base rootfs: a hash of the suite, the package list and the files the
// build adds.
func RootfsHash() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n", rootfsRecipe, Suite, strings.Join(Packages, ","))
	_ = fs.WalkDir(files, "files", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := files.ReadFile(p)
		fmt.Fprintf(h, "%s %x\n", p, sha256.Sum256(b))
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// EnsureRootfs returns the path of the base rootfs under cacheDir/lab, building it first when it
// is missing. The build goes to a temporary directory renamed into place at the end, so an
// interrupted build is never used; concurrent callers wait on a lock and reuse one build. r hears
// what it does (nil: nothing).
func EnsureRootfs(ctx context.Context, cacheDir string, r progress.Reporter) (string, error) {
	return ensureTree(ctx, debianTree{
		name: "rootfs", dir: rootfsDir(cacheDir), suite: Suite, packages: Packages,
		customize: customizeRootfs, ready: rootfsReady,
	}, r)
}

// EnsureDebianTree returns cacheDir/lab/<name>-<hash>: a Debian tree of Suite, debootstrap's
// minbase with packages, then changed by customize (nil: unchanged). It is built once, like the
// lab's rootfs, and rebuilt beside the old one when recipe, the suite or packages change.
// Test images start from one (package conformance).
func EnsureDebianTree(ctx context.Context, cacheDir, name, recipe string, packages []string, customize func(dir string) error, r progress.Reporter) (string, error) {
	return ensureSuiteTree(ctx, cacheDir, Suite, name, recipe, packages, customize, r)
}

// ensureSuiteTree is EnsureDebianTree of another Debian release (suite), from the same mirror.
func ensureSuiteTree(ctx context.Context, cacheDir, suite, name, recipe string, packages []string, customize func(dir string) error, r progress.Reporter) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n", recipe, suite, strings.Join(packages, ","))
	const marker = ".kforge-tree"
	return ensureTree(ctx, debianTree{
		name: name, dir: filepath.Join(cacheDir, "lab", name+"-"+hex.EncodeToString(h.Sum(nil))[:16]), suite: suite, packages: packages,
		customize: func(dir string) error {
			if customize != nil {
				if err := customize(dir); err != nil {
					return err
				}
			}
			return os.WriteFile(filepath.Join(dir, marker), []byte(recipe+"\n"), 0o644)
		},
		ready: func(dir string) bool { _, err := os.Stat(filepath.Join(dir, marker)); return err == nil },
	}, r)
}

// debianTree is a debootstrapped tree in the cache: where, with what, how it is finished, and
// how to tell that it was (customize's last write).
type debianTree struct {
	name, dir, suite string
	packages         []string
	customize        func(dir string) error
	ready            func(dir string) bool
}

func ensureTree(ctx context.Context, t debianTree, r progress.Reporter) (string, error) {
	if r == nil {
		r = progress.Discard
	}
	dir, final := filepath.Dir(t.dir), t.dir
	if t.ready(final) {
		return final, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("lab %s: %w", t.name, err)
	}
	unlock, err := fsx.Lock(ctx, filepath.Join(dir, t.name+".lock"))
	if err != nil {
		return "", fmt.Errorf("lab %s: %w", t.name, err)
	}
	defer unlock()
	if t.ready(final) { // built by someone else while we waited
		return final, nil
	}
	// Left-overs of interrupted builds: nobody else builds while we hold the lock.
	stale, _ := filepath.Glob(filepath.Join(dir, t.name+"-*.tmp"))
	for _, s := range stale {
		if err := removeUnmounted(s); err != nil {
			return "", fmt.Errorf("lab %s: removing an interrupted build: %w", t.name, err)
		}
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return "", fmt.Errorf("lab %s: debootstrap is not installed: install it (apt-get install debootstrap) or run hack/deps.sh", t.name)
	}
	mirror, err := aptMirror()
	if err != nil {
		return "", err
	}
	tmp := final + ".tmp"
	r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("debootstrap %s from %s into %s (once; cached)", t.suite, mirror, final)})
	// A private mount namespace: debootstrap's /proc, /sys and /dev mounts inside the target die
	// with it, so an interrupted build never leaves mounts that a later cleanup could recurse into.
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private",
		"debootstrap", "--variant=minbase", "--include="+strings.Join(t.packages, ","), t.suite, tmp, mirror)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("lab %s: debootstrap %s from %s into %s failed: %w\n%s", t.name, t.suite, mirror, tmp, err, tail(out, 20))
	}
	if err := t.customize(tmp); err != nil {
		return "", fmt.Errorf("lab %s: customizing %s: %w", t.name, tmp, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("lab %s: %w", t.name, err)
	}
	return final, nil
}

// rootfsDir is where the base rootfs of this kforge's recipe is cached under cacheDir.
func rootfsDir(cacheDir string) string { return filepath.Join(cacheDir, "lab", "rootfs-"+RootfsHash()) }

func rootfsReady(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "etc", "kforge-lab", "rootfs"))
	return err == nil
}

// customizeRootfs adds what every host shares: the boot-time fixes, sshd settings, sysctl
// values, and masks units that are useless in a container.
func customizeRootfs(r string) error {
	write := func(p string, data []byte, mode os.FileMode) error { return writeInTree(r, p, data, mode) }
	symlink := func(target, p string) error { return linkInTree(r, target, p) }
	for _, u := range []string{"kforge-lab-cgroup-rw.service", "kforge-lab-procsys-net-rw.service"} {
		b, _ := files.ReadFile("files/" + u)
		if err := write("etc/systemd/system/"+u, b, 0o644); err != nil {
			return err
		}
		if err := symlink("../"+u, "etc/systemd/system/sysinit.target.wants/"+u); err != nil {
			return err
		}
	}
	b, _ := files.ReadFile("files/sshd.conf")
	if err := write("etc/ssh/sshd_config.d/kforge-lab.conf", b, 0o644); err != nil {
		return err
	}
	keys, _ := filepath.Glob(filepath.Join(r, "etc/ssh/ssh_host_*"))
	for _, k := range keys { // every host gets its own key in its upper dir
		if err := os.Remove(k); err != nil {
			return err
		}
	}
	ents, _ := files.ReadDir("files/sysctl")
	for _, e := range ents {
		b, _ := files.ReadFile("files/sysctl/" + e.Name())
		if err := write(filepath.Join(sysctlDir, e.Name()), b, 0o444); err != nil {
			return err
		}
	}
	// Useless or harmful in a lab host: timers that do disk or network work, and haproxy, which
	// only the load-balancer host runs (enabled in its upper dir).
	for _, u := range []string{"e2scrub_reap.service", "e2scrub_all.timer", "fstrim.timer",
		"apt-daily.timer", "apt-daily-upgrade.timer", "man-db.timer", "dpkg-db-backup.timer",
		"systemd-networkd-wait-online.service", "getty@tty1.service", "console-getty.service"} {
		if err := symlink("/dev/null", "etc/systemd/system/"+u); err != nil {
			return err
		}
	}
	_ = os.Remove(filepath.Join(r, "etc/systemd/system/multi-user.target.wants/haproxy.service"))
	// The traits' services start only on the hosts a test gives them (traits.go): not enabled,
	// and without the D-Bus aliases through which a call (firewall-cmd --state) would start them.
	for _, l := range []string{"multi-user.target.wants/firewalld.service", "dbus-org.fedoraproject.FirewallD1.service",
		"sysinit.target.wants/systemd-resolved.service", "multi-user.target.wants/systemd-resolved.service", "dbus-org.freedesktop.resolve1.service"} {
		_ = os.Remove(filepath.Join(r, "etc/systemd/system", l))
	}
	_ = os.Remove(filepath.Join(r, "etc/resolv.conf")) // systemd-resolved's package made it a link to its stub
	if err := write("etc/resolv.conf", []byte("# kforge lab: hosts have no route off the lab and no DNS server.\n"), 0o644); err != nil {
		return err
	}
	if err := write("etc/machine-id", nil, 0o444); err != nil { // per host, in its upper dir
		return err
	}
	_ = os.Remove(filepath.Join(r, "var/lib/dbus/machine-id"))
	if err := os.MkdirAll(filepath.Join(r, "var/lib/containerd"), 0o711); err != nil {
		return err
	}
	// Apt caches are useless in the hosts and cost every overlay nothing, but take cache space.
	archives, _ := filepath.Glob(filepath.Join(r, "var/cache/apt/archives/*.deb"))
	for _, a := range archives {
		_ = os.Remove(a)
	}
	return write("etc/kforge-lab/rootfs", []byte(RootfsHash()+"\n"), 0o644)
}

// writeInTree writes the file p (relative to the tree r), making its directory.
func writeInTree(r, p string, data []byte, mode os.FileMode) error {
	p = filepath.Join(r, p)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, data, mode)
}

// linkInTree makes p (relative to the tree r) a symlink to target, replacing what was there.
func linkInTree(r, target, p string) error {
	p = filepath.Join(r, p)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	_ = os.Remove(p)
	return os.Symlink(target, p)
}

// resolvConf is every lab host's /etc/resolv.conf: a nameserver nothing answers on, inside the
// lab. CoreDNS needs an upstream to start, and its queries for outside names then end at the lab
// bridge, never off the machine.
var resolvConf = fmt.Sprintf("# kforge lab: no DNS server answers at %s; hosts have no route off the lab.\nnameserver %s\n", BridgeAddr, BridgeAddr)

// aptMirror is the Debian mirror this machine's apt uses for Suite; other suites (the VM hosts'
// trixie) come from the same archive.
func aptMirror() (string, error) {
	srcs, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	for _, s := range srcs { // deb822: "URIs: http://deb.debian.org/debian", first one for the main suite
		f, err := os.Open(s)
		if err != nil {
			continue
		}
		var uri string
		var suites string
		sc := bufio.NewScanner(f)
		flush := func() (string, bool) {
			ok := uri != "" && strings.Contains(" "+suites+" ", " "+Suite+" ")
			return uri, ok
		}
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" {
				if u, ok := flush(); ok {
					f.Close()
					return u, nil
				}
				uri, suites = "", ""
				continue
			}
			if v, ok := strings.CutPrefix(line, "URIs:"); ok {
				uri = strings.Fields(v + " ")[0]
			}
			if v, ok := strings.CutPrefix(line, "Suites:"); ok {
				suites = strings.TrimSpace(v)
			}
		}
		f.Close()
		if u, ok := flush(); ok {
			return u, nil
		}
	}
	if b, err := os.ReadFile("/etc/apt/sources.list"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			// deb [opts] URI suite components
			if len(f) >= 3 && f[0] == "deb" {
				i := 1
				if strings.HasPrefix(f[i], "[") {
					for i < len(f) && !strings.HasSuffix(f[i], "]") {
						i++
					}
					i++
				}
				if i+1 < len(f) && f[i+1] == Suite {
					return f[i], nil
				}
			}
		}
	}
	return "", fmt.Errorf("lab rootfs: no apt mirror for Debian %s in /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list: configure one (the lab builds its hosts from it)", Suite)
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
