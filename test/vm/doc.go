// Package vm boots a small QEMU virtual machine whose NIC has real SR-IOV
// virtual functions (QEMU's emulated Intel 82576: an igb PF whose VFs are PCI
// functions bound to igbvf, behind a virtual IOMMU), and runs commands in it.
// The guest sees the host's root file system read-only, so test binaries
// built on the host run there at their host paths. One VM runs at a time,
// and a VM this package starts never outlives the process that asked for it
// unless that process asked it to (Options.Detach).
package vm
