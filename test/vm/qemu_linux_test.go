package vm

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestQEMUArgs(t *testing.T) {
	img := Image{Kernel: "/k/vmlinuz", Release: "6.12", Modules: "/k/lib/modules/6.12", Initramfs: "/c/initramfs.cpio.gz"}
	a, err := pickAccel("tcg")
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Join(qemuArgs(img, Options{Memory: "2G", CPUs: 2}, runDir("/c/run"), a, "/c/guest"), " ")
	for _, want := range []string{
		"-name fastpath-vm,process=fastpath-vm", "-nodefaults", "-no-reboot", "-accel tcg",
		"-device intel-iommu,intremap=on,caching-mode=on", "-device igb,bus=rp0,netdev=hub0port0",
		"path=/,security_model=none,readonly=on", "fastpath.guest=/c/guest", "fastpath.share=/c/run/share",
		"-serial file:/c/run/console.log", "-chardev pipe,id=wake,path=/c/run/wake",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("QEMU's command line lacks %q:\n%s", want, args)
		}
	}
	if strings.Contains(args, "virtio-blk") {
		t.Errorf("QEMU's command line has a disk, none asked for:\n%s", args)
	}
	args = strings.Join(qemuArgs(img, Options{Memory: "2G", CPUs: 2, Disk: "/c/disk.img", Reboot: true}, runDir("/c/run"), a, "/c/guest"), " ")
	for _, want := range []string{"-drive file=/c/disk.img,format=raw,if=none,id=disk0,cache=unsafe", "-device virtio-blk-pci,drive=disk0,serial=" + DiskSerial} {
		if !strings.Contains(args, want) {
			t.Errorf("QEMU's command line lacks %q:\n%s", want, args)
		}
	}
	if strings.Contains(args, "-no-reboot") {
		t.Errorf("QEMU's command line has -no-reboot, Reboot asked for:\n%s", args)
	}
	if _, err := pickAccel("xen"); err == nil {
		t.Error("pickAccel(xen): no error")
	}
}

// A QEMU killed by a signal other than SIGKILL (an emulated device's
// assertion aborting it) is ErrCrashed, and the error quotes the end of
// QEMU's log; one killed on purpose, or that exited, is not.
func TestExitReason(t *testing.T) {
	d := runDir(t.TempDir())
	if err := os.WriteFile(d.qemuLog(), []byte("qemu-system-x86_64: ../hw/net/igb_core.c:1: igb_x: Assertion `0' failed.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		script  string
		crashed bool
	}{
		{"kill -ABRT $$", true},
		{"kill -KILL $$", false},
		{"exit 1", false},
	} {
		v := &VM{dir: d, exitErr: exec.Command("sh", "-c", c.script).Run()}
		err := v.exitReason()
		if errors.Is(err, ErrCrashed) != c.crashed {
			t.Errorf("%s: %v; crashed %v, want %v", c.script, err, errors.Is(err, ErrCrashed), c.crashed)
		}
		if !strings.Contains(err.Error(), "Assertion `0' failed") {
			t.Errorf("%s: %v does not quote QEMU's log", c.script, err)
		}
	}
	// QEMU ending with no error: the guest reset (-no-reboot), silently
	// or after a kernel panic on its console.
	for console, reset := range map[string]bool{
		"fastpath-vm: ready at 7.60s of guest uptime\n":                                               true,
		"[   12.3] Kernel panic - not syncing: Fatal exception\n[   12.3] Rebooting in 1 seconds..\n": false,
	} {
		if err := os.WriteFile(d.console(), []byte(console), 0o644); err != nil {
			t.Fatal(err)
		}
		err := (&VM{dir: d}).exitReason()
		if errors.Is(err, ErrReset) != reset || errors.Is(err, ErrCrashed) {
			t.Errorf("QEMU exited 0, console %q: %v; reset %v, want %v", console, err, errors.Is(err, ErrReset), reset)
		}
	}
}
