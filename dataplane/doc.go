// Package dataplane is mechanism: it moves netdevs into pods' network
// namespaces and back (one RTM_NEWLINK each way), makes VF settings through
// the PF, binds PCI functions to vfio-pci and back, sets channels, and runs
// CNI plugin chains with libcni. It knows nothing of claims and never talks
// to the Kubernetes API server; package dra decides, records and calls it.
package dataplane
