package cnidriver

import (
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/dratest"
)

// The fixtures (dratest), by the names of this package's tests.
const (
	testNode = dratest.Node
	cniHead  = dratest.CNIHead
)

var (
	cniTestClaim = dratest.CNIClaim
	testStore    = dratest.Store
	fromClaim    = dratest.FromClaim
	fromClaimFor = dratest.FromClaimFor
)

// testPolicy is the operator's allowlist of the tests.
var testPolicy = cnipolicy.Options{Plugins: []string{"macvlan", "host-local", "tuning", "vlan", "bridge", "host-device"}, ConfigNamespace: "fastpath-system"}

// testAttributes are the attributes of the tests' devices, for arguments
// to refer to.
var testAttributes = map[string]string{"name": "eth7"}
