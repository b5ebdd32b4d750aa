// Package sriovtest gives the sriov-tagged tests the SR-IOV NIC of the test
// VM (test/vm): QEMU's emulated Intel 82576, an igb PF whose VFs are PCI
// functions bound to igbvf. Those tests run only in that VM, so without the
// NIC they fail, never skip.
package sriovtest
