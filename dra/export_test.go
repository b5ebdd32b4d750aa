package dra

import (
	"context"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// What the suites of package dra_test, which drive the driver and the
// runtime's hooks together, use of this package's test harness: the driver
// with its fake kubelet, and Prepare and Unprepare through the kubelet's
// gRPC API.
type (
	TestDriver  = testDriver
	FakeKubelet = fakeKubelet
	FakeObject  = fakeObject
)

var (
	StartTestDriver = startTestDriver
	// StartTestDriverWith is StartTestDriver with options of the test's.
	StartTestDriverWith = startTestDriverWith
	StartFakeKubelet    = startFakeKubelet
	Prepare             = prepare
	Unprepare           = unprepare
	AssertNothingLeft   = assertNothingLeft
)

// NewFakeObject is the API object of a claim the fake API server serves.
func NewFakeObject(claim *resourceapi.ResourceClaim) *FakeObject { return &fakeObject{claim} }

// Store is the driver's claim store; Opts its options.
func (d *testDriver) Store() *claims.Store { return d.store }
func (d *testDriver) Opts() Options        { return d.opts }

// DRA is the kubelet's client of the driver's gRPC API.
func (k *fakeKubelet) DRA() drapb.DRAPluginClient { return k.dra }

// DriverOptions are the running driver's own options, for a suite to put a
// slow or failing part in.
func (d *testDriver) DriverOptions() *Options { return &d.Driver.opts }

// Wanted is what the driver hands its publisher now; false before its
// first inventory.
func (d *Driver) Wanted(ctx context.Context) (resourceslice.DriverResources, bool) {
	return d.resources(ctx)
}
