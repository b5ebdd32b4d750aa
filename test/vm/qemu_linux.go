package vm

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// processName is what QEMU calls its process (/proc/PID/comm): how a
// pidfile's PID is recognised as this rig's QEMU before it is signalled.
const processName = "fastpath-vm"

// DiskSerial is the serial of the disk Options.Disk attaches: the guest
// finds it by it (/sys/block/*/serial).
const DiskSerial = "fastpath-disk"

// wakePort is the name of the virtio-serial port the host wakes the
// guest program through.
const wakePort = "fastpath.wake"

// The igb PF's MAC address; its VFs get theirs from the PF.
const pfMAC = "52:54:00:fa:57:00"

// accel is how QEMU runs the guest's CPUs.
type accel struct {
	name string // kvm | tcg
	why  string // why this one
	args []string
}

// pickAccel chooses KVM where the host has hardware virtualisation, TCG
// (emulation) otherwise. want ("kvm", "tcg", "" for auto) overrides.
// A /dev/kvm served by kvm_pvm (Pagetable-based VM, software nested
// virtualisation) runs only guest kernels built for PVM, not Debian's, so
// it counts as none.
func pickAccel(want string) (accel, error) {
	kvm := accel{name: "kvm", args: []string{"-accel", "kvm", "-cpu", "host", "-machine", "q35,kernel-irqchip=split"}}
	tcg := accel{name: "tcg", args: []string{"-accel", "tcg,thread=multi,tb-size=256", "-cpu", "max", "-machine", "q35"}}
	switch want {
	case "kvm":
		kvm.why = "asked for"
		return kvm, nil
	case "tcg":
		tcg.why = "asked for"
		return tcg, nil
	case "", "auto":
	default:
		return accel{}, fmt.Errorf("accelerator %q: want kvm, tcg or auto", want)
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		tcg.why = "no usable /dev/kvm"
		return tcg, nil
	}
	_ = f.Close()
	for _, m := range []string{"kvm_intel", "kvm_amd"} {
		if _, err := os.Stat(filepath.Join("/sys/module", m)); err == nil {
			kvm.why = m
			return kvm, nil
		}
	}
	tcg.why = "/dev/kvm is not hardware KVM (kvm_intel or kvm_amd)"
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil {
		tcg.why = "/dev/kvm is PVM, which runs only PVM guest kernels"
	}
	return tcg, nil
}

// qemuArgs is the VM's QEMU command line. The guest has no network
// backend: the igb NIC sits alone on a QEMU hub, so nothing it sends leaves
// the VM, and -nodefaults keeps QEMU from adding a NIC of its own.
func qemuArgs(img Image, o Options, d runDir, a accel, guest string) []string {
	args := []string{"-name", "fastpath-vm,process=" + processName, "-nodefaults", "-no-user-config",
		"-display", "none", "-serial", "file:" + d.console()}
	if !o.Reboot {
		args = append(args, "-no-reboot")
	}
	args = append(args, a.args...)
	args = append(args, "-smp", strconv.Itoa(o.CPUs), "-m", o.Memory,
		"-device", "intel-iommu,intremap=on,caching-mode=on",
		"-kernel", img.Kernel, "-initrd", img.Initramfs,
		// no_timer_check: under TCG on a busy host the kernel's check of the
		// timer interrupt can fail and panic the boot.
		"-append", fmt.Sprintf("console=ttyS0 intel_iommu=on iommu=pt no_timer_check panic=-1 loglevel=4 fastpath.guest=%s fastpath.share=%s fastpath.modules=%s",
			guest, d.share(), img.Modules),
		// The host's root, read-only, and the share, read-write.
		"-fsdev", "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
		"-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
		"-fsdev", "local,id=share,path="+d.share()+",security_model=none,multidevs=remap",
		"-device", "virtio-9p-pci,fsdev=share,mount_tag=share",
		"-device", "virtio-serial-pci,id=serial0",
		"-chardev", "pipe,id=wake,path="+d.wake(),
		"-device", "virtserialport,bus=serial0.0,chardev=wake,name="+wakePort,
		// The SR-IOV NIC, behind a PCIe root port.
		"-netdev", "hubport,id=hub0port0,hubid=0",
		"-device", "pcie-root-port,id=rp0,chassis=1,slot=1",
		"-device", "igb,bus=rp0,netdev=hub0port0,mac="+pfMAC,
	)
	if o.Disk != "" {
		// cache=unsafe: QEMU writes to the image through the host's page
		// cache and ignores the guest's flushes. The guest still sees a
		// disk with a volatile write cache (it flushes at every fsync, as
		// on a real disk); only the host's own crash, which no test
		// makes, could lose what the guest had flushed.
		args = append(args,
			"-drive", "file="+o.Disk+",format=raw,if=none,id=disk0,cache=unsafe",
			"-device", "virtio-blk-pci,drive=disk0,serial="+DiskSerial)
	}
	return args
}
