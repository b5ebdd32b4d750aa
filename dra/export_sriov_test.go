//go:build sriov

package dra

// The SR-IOV VM's harness, for the suites of package dra_test.
type KernelVF = kernelVF

var (
	StartSRIOVDriver = startSRIOVDriver
	DiscoverSRIOV    = discoverSRIOV
	ReadVF           = readVF
)
