//go:build privileged || sriov || faultinject

package dra_test

import (
	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/dra/dratest"
)

// The fixtures (dratest) and the harness (export_test.go), by the names
// the suites use.
const (
	testNode    = dratest.Node
	vfNetdev    = dratest.VFNetdev
	memifMaster = dratest.MemifMaster
)

type alloc = dratest.Alloc

var (
	testClaim         = dratest.Claim
	cniTestClaim      = dratest.CNIClaim
	testInventory     = dratest.Inventory
	inventoryMap      = dratest.InventoryMap
	config            = dratest.InterfaceConfig
	fromClaim         = dratest.FromClaim
	fromClaimFor      = dratest.FromClaimFor
	startTestDriver   = dra.StartTestDriver
	prepare           = dra.Prepare
	unprepare         = dra.Unprepare
	assertNothingLeft = dra.AssertNothingLeft
)
