//go:build sriov

package dra_test

import "github.com/fastpath-dra/fastpath/dra"

var (
	startSRIOVDriver = dra.StartSRIOVDriver
	discoverSRIOV    = dra.DiscoverSRIOV
	readVF           = dra.ReadVF
)

type kernelVF = dra.KernelVF
