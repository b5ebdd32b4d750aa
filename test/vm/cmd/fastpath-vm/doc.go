// Command fastpath-vm builds, boots and drives the SR-IOV VM (package
// test/vm): QEMU's emulated igb NIC, whose VFs are real PCI functions, in a
// guest that sees the host's root read-only.
//
//	fastpath-vm build               build the VM's initramfs (test/deps.sh vm fetches QEMU, the kernel, busybox)
//	fastpath-vm boot                boot a VM that stays up for later runs (refused while one runs)
//	fastpath-vm run [-C DIR] CMD... run CMD in the running VM; its output and exit status are CMD's
//	fastpath-vm down                power the running VM off
//	fastpath-vm status              say whether a VM runs
//	fastpath-vm test [flags] PKG... build PKG's sriov-tagged tests, boot a VM, run them, power it off
//
// test runs a package's binary again, once, in a new VM when the guest
// kernel reports a stalled CPU while it runs (vm.ErrStalled), and stops a
// binary that outlives its -timeout by 2 minutes.
//
// FASTPATH_CACHE, FASTPATH_VM_KERNEL and FASTPATH_VM_BUSYBOX (printed by
// `test/deps.sh env`) say where the builds are; FASTPATH_VM_ACCEL=kvm|tcg
// overrides the choice of accelerator. Inside the VM, `fastpath-vm guest`
// is the guest program that runs the commands.
package main
