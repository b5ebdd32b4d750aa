// Package dataplane is mechanism: it moves netdevs into pods' network
// namespaces and back (one RTM_NEWLINK each way), makes sub-interfaces
// (macvlan, ipvlan, vlan) of shared devices in pods' namespaces and deletes
// them, makes VF settings through the PF, binds PCI functions to vfio-pci
// and back, sets channels, and runs CNI plugin chains with libcni. It knows nothing of claims and never talks
// to the Kubernetes API server; package dra decides, records and calls it.
package dataplane

import "errors"

// ErrDeviceGone is returned when the device to act on is no longer on the
// node: the PCI function, the VF or its PF, or the netdev vanished (a PF's
// sriov_numvfs lowered, a hot-unplug, a virtual link deleted). What was to
// be restored on it cannot be, and need not be.
var ErrDeviceGone = errors.New("the device is gone")
