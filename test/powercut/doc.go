// Command powercut cuts the power of the SR-IOV VM (package test/vm) at
// random moments while a process in it churns the claim store (package
// dra/claims) on a disk of the VM's own, and fastpathd's DRA driver
// (package dra) prepares and unprepares claims on the same store, and
// checks after each boot that the store opens and the driver starts on it,
// as fastpathd's start does, and that the store holds every change
// acknowledged before the power went.
//
//	powercut [-cycles N] [-seed S] [-dir DIR] [-unsynced]   boot the VM and run N cycles (the host's side)
//	powercut churn -report FILE [flags]                     in the VM: change claims until the power goes
//	powercut check                                          in the VM: open the store, print its claims
//
// The store lives on an ext4 file system of its own, on a raw disk image
// the VM gets as a virtio disk. A cycle starts the churner, which reports
// each change to the host before it calls the store and again once the
// store returned with no error (an acknowledged change), through the VM's
// share, which writes through to the host's file before the write returns.
// Then the power goes: three cycles in four the churner reboots the guest
// itself with sysrq b (the kernel restarts at once, syncing and unmounting
// nothing: whatever it held in memory and had not written to the disk is
// lost, as in a power cut), the fourth the host kills QEMU (SIGKILL) and
// boots a new one, which also cuts short the disk writes QEMU had in hand.
// After the boot, `powercut check` opens the store and starts the DRA
// driver on it as fastpathd does; the host checks that every claim holds
// its last acknowledged change, or the change of it that was in flight,
// and nothing else.
//
// Beside the churner's three workers, which make the store calls Prepare
// and Unprepare make (12-VF records of about 6 KiB, so that the journal
// is compacted a few times a cycle), a fourth prepares and unprepares 4
// claims through dra.Driver itself, each of one VF of a sysfs tree the
// guest writes in its tmpfs at each start (package test/sysfsfixture; the
// VM's igb VFs are the SR-IOV tests'), its PF's netlink calls doing
// nothing: the validation, the plan, the record admitted and its steps,
// the CDI spec and device-info file, and their undo. A Prepare the driver
// acknowledged must be held prepared; one cut short may hold the record
// admitted and not prepared, which the next Prepare finishes.
//
// Of every four cycles, the second writes checkpoint version 2 (the whole
// file at each change) and the others version 3 (the journal), so that a
// run goes from one to the other and back. The seed (printed;
// FASTPATH_POWERCUT_SEED=S replays it) draws each cycle's moment of the cut
// and the churner's changes.
// The interleaving of the churner's workers and the moment the cut lands
// among their writes are the guest's timing, which no seed replays.
//
// With -unsynced the store syncs nothing (its checkpoint written in place,
// its journal appended): a run must then fail, which shows that the cuts
// find what a store that does not sync loses.
//
// FASTPATH_CACHE, FASTPATH_VM_KERNEL and FASTPATH_VM_BUSYBOX (printed by
// `test/deps.sh env`) say where the VM's builds are, as for fastpath-vm.
package main
