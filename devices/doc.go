// Package devices discovers the node's fast-path devices (SR-IOV PFs and VFs,
// AF_XDP-capable NICs, memif endpoints) into the Device model and watches
// them for change. It never talks to Kubernetes.
package devices

//go:generate go run ../test/sysfsfixture/gen testdata/sysfs
