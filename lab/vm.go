package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kforge/kforge/internal/fsx"
	"github.com/kforge/kforge/progress"
)

// VM hosts are QEMU virtual machines on the lab bridge, each with its own kernel (Debian's),
// cgroup v2, systemd and sshd: what users run, where the nspawn hosts share this machine's
// kernel. They boot one image built offline (debootstrap plus linux-image-amd64), each through a
// copy-on-write overlay, by direct kernel boot; their identity (host key, authorized key,
// /etc/hosts) comes in through QEMU's fw_cfg and their name and address on the kernel command
// line. They carry no container runtime: kforge installs it from the bundle.

// VMPackages is what the VM image holds on top of debootstrap's minbase: a kernel and an
// initramfs, systemd as init, sshd, the tools kforge's preflight looks for, curl, nft, and
// AppArmor's tools (Debian's and Ubuntu's kernels enable AppArmor; with apparmor_parser,
// containerd confines every container in its default profile). No containerd, no runc.
var VMPackages = []string{
	"linux-image-amd64", "initramfs-tools", "systemd", "systemd-sysv", "udev", "dbus", "kmod",
	"openssh-server", "iproute2", "iptables", "conntrack", "socat", "ebtables", "ethtool", "procps",
	"iputils-ping", "e2fsprogs", "ca-certificates", "curl", "less", "apparmor", "nftables",
}

// vmRecipe is hashed into the image's name: bump it when the image's build steps change.
const vmRecipe = "kforge-lab-vm/1"

// VM sizes per role. Under emulation (TCG) QEMU's resident memory is about 1.1-1.8 GiB for a
// 2 GiB guest; the control plane (etcd, kube-apiserver) wants more than a worker.
const (
	VMWorkerMemoryMiB = 2048
	VMMasterMemoryMiB = 3072
	VMCPUs            = 2
	vmDiskSize        = "8G"
)

// vmImage is the cached image: the root file system (raw ext4, no partition table), the
// uncompressed kernel and the initramfs.
type vmImage struct {
	Root, Kernel, Initrd string
}

// vmImageDir is where the image of this recipe is cached.
func vmImageDir(tree string) string { return tree + ".image" }

func vmImageAt(dir string) vmImage {
	return vmImage{Root: filepath.Join(dir, "root.img"), Kernel: filepath.Join(dir, "vmlinux"), Initrd: filepath.Join(dir, "initrd.img")}
}

// VMSuites are the Debian releases VM hosts may run; the first is the default.
var VMSuites = []string{Suite, "trixie"}

// ensureVMImage returns the VM image of suite under cacheDir/lab, building it (debootstrap,
// then an ext4 image of the tree) when it is missing. Like the rootfs, it is built once into a
// temporary directory renamed into place.
func ensureVMImage(ctx context.Context, cacheDir, suite string, r progress.Reporter) (vmImage, error) {
	tree, err := ensureSuiteTree(ctx, cacheDir, suite, "vm-"+suite, vmRecipe, VMPackages, customizeVM, r)
	if err != nil {
		return vmImage{}, err
	}
	final := vmImageDir(tree)
	if _, err := os.Stat(filepath.Join(final, "root.img")); err == nil {
		return vmImageAt(final), nil
	}
	unlock, err := fsx.Lock(ctx, final+".lock")
	if err != nil {
		return vmImage{}, err
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(final, "root.img")); err == nil {
		return vmImageAt(final), nil
	}
	tmp := final + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return vmImage{}, err
	}
	img := vmImageAt(tmp)
	r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("making the VM image from %s (once; cached)", tree)})
	// The kernel uncompressed: QEMU boots the ELF vmlinux through its PVH entry point, which
	// skips the bzImage's decompression (very slow under emulation). bookworm's kernel is
	// xz-compressed, trixie's zstd.
	extract := `set -eu
off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$1" | head -1 | cut -d: -f1)
if [ -n "$off" ]; then tail -c +$((off+1)) "$1" | xz -dc 2>/dev/null > "$2" || true
else off=$(LC_ALL=C grep -obUaP '\x28\xb5\x2f\xfd' "$1" | head -1 | cut -d: -f1); tail -c +$((off+1)) "$1" | zstd -dcq > "$2" 2>/dev/null || true; fi
[ "$(head -c4 "$2" | od -An -c | tr -d ' ')" = '177ELF' ] || { echo "no ELF kernel found in $1" >&2; exit 1; }`
	steps := [][]string{
		{"sh", "-c", extract, "sh", filepath.Join(tree, "vmlinuz"), img.Kernel},
		{"cp", "-L", filepath.Join(tree, "initrd.img"), img.Initrd},
		{"mkfs.ext4", "-q", "-L", "root", "-d", tree, img.Root, vmDiskSize},
	}
	for _, s := range steps {
		if out, err := exec.CommandContext(ctx, s[0], s[1:]...).CombinedOutput(); err != nil {
			return vmImage{}, fmt.Errorf("lab VM image: %s: %w\n%s", s[0], err, tail(out, 10))
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		return vmImage{}, err
	}
	return vmImageAt(final), nil
}

// customizeVM makes the tree a VM root: fstab, networking from the kernel command line, sshd
// by key only, and the unit that takes the VM's identity from fw_cfg before sshd starts.
// Nothing Kubernetes needs (modules, sysctls, a runtime) is set here: kforge does that.
func customizeVM(r string) error {
	for _, f := range []struct {
		path, data string
		mode       os.FileMode
	}{
		{"etc/fstab", "/dev/vda / ext4 defaults,errors=remount-ro 0 1\n", 0o644},
		{"etc/hosts", "127.0.0.1\tlocalhost\n", 0o644},
		{"etc/machine-id", "", 0o444}, // empty: each VM makes its own at first boot
		{"etc/resolv.conf", resolvConf, 0o644},
		{"etc/ssh/sshd_config.d/kforge-lab.conf", "PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\nHostKey /etc/ssh/ssh_host_ed25519_key\n", 0o644},
		{"etc/systemd/system/kforge-lab-identity.service", vmIdentityUnit, 0o644},
	} {
		if err := writeInTree(r, f.path, []byte(f.data), f.mode); err != nil {
			return err
		}
	}
	_ = os.Remove(filepath.Join(r, "etc/hostname")) // from systemd.hostname= on the command line
	_ = os.Remove(filepath.Join(r, "var/lib/dbus/machine-id"))
	keys, _ := filepath.Glob(filepath.Join(r, "etc/ssh/ssh_host_*"))
	for _, k := range keys {
		if err := os.Remove(k); err != nil {
			return err
		}
	}
	for _, l := range [][2]string{
		{"/lib/systemd/system/systemd-networkd.service", "etc/systemd/system/multi-user.target.wants/systemd-networkd.service"},
		{"/lib/systemd/system/systemd-network-generator.service", "etc/systemd/system/sysinit.target.wants/systemd-network-generator.service"},
		{"/etc/systemd/system/kforge-lab-identity.service", "etc/systemd/system/multi-user.target.wants/kforge-lab-identity.service"},
		{"/dev/null", "etc/systemd/system/systemd-networkd-wait-online.service"},
		{"/dev/null", "etc/systemd/system/apt-daily.timer"},
		{"/dev/null", "etc/systemd/system/apt-daily-upgrade.timer"},
		{"/dev/null", "etc/systemd/system/e2scrub_all.timer"},
		{"/dev/null", "etc/systemd/system/e2scrub_reap.service"},
		{"/dev/null", "etc/systemd/system/fstrim.timer"},
		{"/dev/null", "etc/systemd/system/man-db.timer"},
		{"/dev/null", "etc/systemd/system/dpkg-db-backup.timer"},
	} {
		if err := linkInTree(r, l[0], l[1]); err != nil {
			return err
		}
	}
	archives, _ := filepath.Glob(filepath.Join(r, "var/cache/apt/archives/*.deb"))
	for _, a := range archives {
		_ = os.Remove(a)
	}
	return nil
}

// vmIdentityUnit copies what QEMU hands the VM through fw_cfg (opt/kforge/<name>) into place
// before sshd starts: the host key, root's authorized_keys, /etc/hosts.
const vmIdentityUnit = `[Unit]
Description=kforge lab: this VM's host key, authorized key and /etc/hosts from QEMU's fw_cfg
DefaultDependencies=no
After=local-fs.target
Before=ssh.service network-pre.target
Wants=network-pre.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -ec '\
  modprobe qemu_fw_cfg; d=/sys/firmware/qemu_fw_cfg/by_name/opt/kforge; \
  install -m 600 $d/hostkey/raw /etc/ssh/ssh_host_ed25519_key; \
  install -m 644 $d/hostkey.pub/raw /etc/ssh/ssh_host_ed25519_key.pub; \
  install -d -m 700 /root/.ssh; install -m 600 $d/authorized_keys/raw /root/.ssh/authorized_keys; \
  install -m 644 $d/hosts/raw /etc/hosts'

[Install]
WantedBy=multi-user.target
`

// vmAccel is how QEMU runs the VMs here: KVM where the machine has working hardware
// virtualization, else emulation (TCG), with why.
func vmAccel() (args []string, why string) {
	switch os.Getenv("KFORGE_LAB_VM_ACCEL") {
	case "tcg":
		return tcgArgs(), "emulation (TCG), as KFORGE_LAB_VM_ACCEL=tcg asks"
	case "kvm":
		return kvmArgs(), "KVM, as KFORGE_LAB_VM_ACCEL=kvm asks"
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return tcgArgs(), fmt.Sprintf("emulation (TCG, slow): /dev/kvm is not usable (%v)", err)
	}
	f.Close()
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil {
		return tcgArgs(), "emulation (TCG, slow): /dev/kvm is kvm_pvm (this machine is itself a PVM guest), under which stock Debian kernels stop with KVM emulation failures"
	}
	for _, m := range []string{"kvm_intel", "kvm_amd"} {
		if _, err := os.Stat("/sys/module/" + m); err == nil {
			return kvmArgs(), "KVM (" + m + ")"
		}
	}
	return tcgArgs(), "emulation (TCG, slow): /dev/kvm is neither kvm_intel nor kvm_amd"
}

func tcgArgs() []string { return []string{"-accel", "tcg,thread=multi", "-cpu", "max"} }
func kvmArgs() []string { return []string{"-accel", "kvm", "-cpu", "host"} }

// qemuArgs is the VM's command line: direct kernel boot of the image through the host's
// overlay, its address and name on the kernel command line, its identity through fw_cfg, a
// virtio NIC on its tap.
func (l *Lab) qemuArgs(h *hostState, img vmImage, accel []string) []string {
	mem := VMWorkerMemoryMiB
	if h.Role == RoleMaster {
		mem = VMMasterMemoryMiB
	}
	up := filepath.Join(h.Dir, "upper")
	oct, _ := strconv.Atoi(strings.TrimPrefix(h.Address, subnetPrefix))
	a := []string{"-name", h.Name, "-nodefaults", "-no-user-config", "-display", "none", "-serial", "stdio", "-monitor", "none"}
	a = append(a, accel...)
	return append(a,
		"-m", strconv.Itoa(mem), "-smp", strconv.Itoa(VMCPUs),
		"-kernel", img.Kernel, "-initrd", img.Initrd,
		"-append", fmt.Sprintf("root=/dev/vda rw console=ttyS0 net.ifnames=0 systemd.hostname=%s ip=%s:::%s::eth0:off", h.Name, h.Address, netmask()),
		"-drive", "file="+filepath.Join(h.Dir, "disk.qcow2")+",if=virtio,format=qcow2,cache=writeback",
		"-netdev", "tap,id=n0,ifname="+h.Veth+",script=no,downscript=no",
		"-device", fmt.Sprintf("virtio-net-pci,netdev=n0,mac=52:54:00:c6:64:%02x", oct),
		"-fw_cfg", "name=opt/kforge/hostkey,file="+filepath.Join(up, "etc/ssh/ssh_host_ed25519_key"),
		"-fw_cfg", "name=opt/kforge/hostkey.pub,file="+filepath.Join(up, "etc/ssh/ssh_host_ed25519_key.pub"),
		"-fw_cfg", "name=opt/kforge/authorized_keys,file="+filepath.Join(up, "root/.ssh/authorized_keys"),
		"-fw_cfg", "name=opt/kforge/hosts,file="+filepath.Join(up, "etc/hosts"),
	)
}

func netmask() string {
	m := uint32(0xffffffff)
	m <<= 32 - prefixLen
	return fmt.Sprintf("%d.%d.%d.%d", m>>24, m>>16&0xff, m>>8&0xff, m&0xff)
}

// prepareVM gives the VM its disk: a copy-on-write overlay of the image.
func prepareVM(ctx context.Context, h *hostState, img vmImage) error {
	return run(ctx, "qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", img.Root, filepath.Join(h.Dir, "disk.qcow2"))
}

// startVM puts the VM's tap on the bridge and starts QEMU in the host's cgroups; QEMU itself is
// the host's launcher. A reboot inside the VM stays inside this QEMU.
func (l *Lab) startVM(ctx context.Context, h *hostState) error {
	img := vmImageAt(l.st.VMImage)
	accel, _ := vmAccel()
	_ = deleteLink(ctx, h.Veth)
	if err := runInput(ctx, fmt.Sprintf("tuntap add dev %s mode tap\nlink set %s master %s up\n", h.Veth, h.Veth, Bridge), "ip", "-batch", "-"); err != nil {
		return err
	}
	// QEMU joins the host's cgroups, then takes the shell's PID.
	script := `while read -r cg; do echo $$ > "$cg/cgroup.procs" || exit 97; done < "$1/cgroups"; shift; exec "$@"`
	pid, err := spawn(h, nil, append([]string{"/bin/sh", "-c", script, "kforge-lab-vm", h.Dir, "qemu-system-x86_64"}, l.qemuArgs(h, img, accel)...)...)
	if err != nil {
		return fmt.Errorf("starting QEMU: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.HasPrefix(comm(pid), "qemu-system") {
		if comm(pid) == "" {
			return fmt.Errorf("QEMU (PID %d) died at once: %s", pid, lastLines(filepath.Join(h.Dir, "console.log"), 5))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("QEMU (PID %d) did not start within 10s", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	l.mu.Lock()
	h.LauncherPID, h.LauncherStart = pid, procStart(pid)
	l.mu.Unlock()
	return nil
}

// vmCommand runs argv on a VM over SSH with the lab's key and known_hosts (a VM has no
// namespaces to enter).
func (l *Lab) vmCommand(ctx context.Context, h *hostState, argv []string) *exec.Cmd {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	// LogLevel=ERROR, not -q: when ssh itself fails (exit 255) its reason is in the error's
	// stderr (CI at 2b3e5e2 saw a bare "exit status 255" from a VM just rebooted). A VM under
	// emulation that has just booted may take long to accept: three connection attempts of 20 s.
	cmd := exec.CommandContext(ctx, "ssh", "-o", "LogLevel=ERROR", "-i", l.IdentityFile, "-o", "UserKnownHostsFile="+l.KnownHostsFile,
		"-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=20", "-o", "ConnectionAttempts=3",
		"-p", strconv.Itoa(h.Port), "root@"+h.Address, strings.Join(q, " "))
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"}
	return cmd
}

// VMPrerequisites reports what this machine lacks to run VM hosts, or nil.
func VMPrerequisites() error {
	var missing []string
	for _, t := range []string{"qemu-system-x86_64", "qemu-img", "mkfs.ext4", "xz", "zstd", "ssh"} {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return errors.New("kforge lab VM hosts need " + strings.Join(missing, ", ") + " on PATH: apt-get install qemu-system-x86 qemu-utils e2fsprogs xz-utils zstd openssh-client (or run hack/deps.sh)")
	}
	return nil
}

// VMAcceleration says how this machine runs VM hosts (KVM or emulation) and why.
func VMAcceleration() string {
	_, why := vmAccel()
	return why
}
