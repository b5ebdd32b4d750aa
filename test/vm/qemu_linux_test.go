package vm

import (
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
	if _, err := pickAccel("xen"); err == nil {
		t.Error("pickAccel(xen): no error")
	}
}
