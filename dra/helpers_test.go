package dra

import "github.com/fastpath-dra/fastpath/dra/dratest"

// The fixtures (dratest), by the names of this package's tests.
const (
	testNode    = dratest.Node
	vfNetdev    = dratest.VFNetdev
	vfNetdev2   = dratest.VFNetdev2
	vfVFIO      = dratest.VFVFIO
	pfDevice    = dratest.PFDevice
	noIOMMU     = dratest.NoIOMMU
	memifSlave  = dratest.MemifSlave
	memifMaster = dratest.MemifMaster
)

type (
	alloc = dratest.Alloc
)

var (
	testClaim     = dratest.Claim
	testInventory = dratest.Inventory
	inventoryMap  = dratest.InventoryMap
	testStore     = dratest.Store
	config        = dratest.InterfaceConfig
	fromClass     = dratest.FromClass
	fromClaim     = dratest.FromClaim
	fromClaimFor  = dratest.FromClaimFor
	raw           = dratest.Raw
)
