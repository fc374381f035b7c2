package lab

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestNetmask(t *testing.T) {
	if got := netmask(); got != "255.255.255.128" {
		t.Errorf("netmask of /%d: %s", prefixLen, got)
	}
}

// A VM's command line: its name and address on the kernel command line, its identity files
// through fw_cfg, its own overlay and tap, memory by role.
func TestQemuArgs(t *testing.T) {
	l := &Lab{}
	img := vmImageAt("/cache/vm.image")
	for _, h := range []*hostState{
		{Host: Host{Name: "lab-1", Address: "198.51.100.2", Role: RoleMaster, VM: true}, Dir: "/l/hosts/lab-1", Veth: "kflab2"},
		{Host: Host{Name: "lab-2", Address: "198.51.100.3", Role: RoleWorker, VM: true}, Dir: "/l/hosts/lab-2", Veth: "kflab3"},
	} {
		a := l.qemuArgs(h, img, tcgArgs())
		line := strings.Join(a, " ")
		mem := "2048"
		if h.Role == RoleMaster {
			mem = "3072"
		}
		for _, want := range []string{
			"-m " + mem, "-smp 2", "-accel tcg,thread=multi",
			"-kernel /cache/vm.image/vmlinux", "-initrd /cache/vm.image/initrd.img",
			"systemd.hostname=" + h.Name + " ip=" + h.Address + ":::255.255.255.128::eth0:off",
			"file=" + h.Dir + "/disk.qcow2,if=virtio,format=qcow2,cache=writeback",
			"ifname=" + h.Veth + ",",
			"name=opt/kforge/hostkey,file=" + h.Dir + "/upper/etc/ssh/ssh_host_ed25519_key",
			"name=opt/kforge/authorized_keys,file=" + h.Dir + "/upper/root/.ssh/authorized_keys",
			"name=opt/kforge/hosts,file=" + h.Dir + "/upper/etc/hosts",
		} {
			if !strings.Contains(line, want) {
				t.Errorf("%s: %q missing from\n%s", h.Name, want, line)
			}
		}
	}
}

func TestVMAccelOverride(t *testing.T) {
	t.Setenv("KFORGE_LAB_VM_ACCEL", "tcg")
	if a, why := vmAccel(); !slices.Contains(a, "tcg,thread=multi") || !strings.Contains(why, "KFORGE_LAB_VM_ACCEL") {
		t.Errorf("tcg asked for: %v, %q", a, why)
	}
	t.Setenv("KFORGE_LAB_VM_ACCEL", "kvm")
	if a, _ := vmAccel(); !slices.Contains(a, "kvm") {
		t.Errorf("kvm asked for: %v", a)
	}
}

// The VM tree: no host keys, no hostname, an empty machine-id (each VM makes its own), and
// nothing Kubernetes needs from a host — that is kforge's job.
func TestCustomizeVM(t *testing.T) {
	r := t.TempDir()
	for _, f := range []string{"etc/hostname", "etc/ssh/ssh_host_rsa_key", "etc/ssh/ssh_host_ed25519_key"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(r, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(r, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := customizeVM(r); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"etc/hostname", "etc/ssh/ssh_host_rsa_key", "etc/ssh/ssh_host_ed25519_key", "etc/modules-load.d", "etc/sysctl.d"} {
		if _, err := os.Stat(filepath.Join(r, gone)); err == nil {
			t.Errorf("%s exists in the VM tree", gone)
		}
	}
	if b, err := os.ReadFile(filepath.Join(r, "etc/machine-id")); err != nil || len(b) != 0 {
		t.Errorf("machine-id: %q %v, want empty", b, err)
	}
	if target, err := os.Readlink(filepath.Join(r, "etc/systemd/system/multi-user.target.wants/kforge-lab-identity.service")); err != nil || !strings.HasSuffix(target, "kforge-lab-identity.service") {
		t.Errorf("the identity unit is not enabled: %q %v", target, err)
	}
}
