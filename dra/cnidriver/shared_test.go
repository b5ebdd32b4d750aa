package cnidriver

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/kubelet"
)

// With SharedDevice the node publishes one CNI device allocated many times,
// of capacity "networks", instead of placeholders; each network records
// its share, the store admits two claims on the one device, and Prepare's
// result and the statuses name the share.
func TestCNISharedDevice(t *testing.T) {
	d := &Driver{opts: Options{NodeName: testNode, Devices: 16, SharedDevice: true}}
	devs := d.Resources().Pools[testNode].Slices[0].Devices
	if len(devs) != 1 || devs[0].Name != SharedDevice || devs[0].AllowMultipleAllocations == nil || !*devs[0].AllowMultipleAllocations {
		t.Fatalf("devices = %+v", devs)
	}
	if c := devs[0].Capacity[CapacityNetworks]; c.Value.Value() != 16 || c.RequestPolicy.Default.Value() != 1 || c.RequestPolicy.ValidRange.Max.Value() != 1 {
		t.Errorf("capacity = %+v", devs[0].Capacity)
	}
	if n := len((&Driver{opts: Options{NodeName: testNode, Devices: 16}}).Resources().Pools[testNode].Slices[0].Devices); n != 16 {
		t.Errorf("placeholders: %d devices, want 16", n)
	}

	d = testDriver(t, Options{NodeName: testNode, Policy: testPolicy, Devices: 16, SharedDevice: true})
	s := testStore(t)
	for _, name := range []string{"a", "b"} {
		claim := cniTestClaim([]string{"net"}, fromClaimFor("net", macvlan("net1")))
		claim.Name, claim.UID = name, types.UID("uid-"+name)
		claim.Status.ReservedFor[0].UID = types.UID("pod-" + name)
		res := &claim.Status.Allocation.Devices.Results[0]
		res.Device, res.ShareID = SharedDevice, new(types.UID("share-"+name))
		c, err := d.plan(t.Context(), claim)
		if err != nil {
			t.Fatal(err)
		}
		if c.Networks[0].ShareID != "share-"+name {
			t.Errorf("%s: network = %+v", name, c.Networks[0])
		}
		if err := s.Admit(*c); err != nil {
			t.Fatalf("%s on the shared device: %v", name, err)
		}
		if r := kubelet.Result(c, nil, nil); r.Devices[0].ShareID == nil || *r.Devices[0].ShareID != types.UID("share-"+name) {
			t.Errorf("%s: result = %+v", name, r.Devices)
		}
	}
	// Without shares, one device is one claim's.
	c := claims.Claim{Driver: claims.DriverCNI, UID: "uid-c", Namespace: "default", Name: "c", Pod: claims.Pod{UID: "pod-c"},
		Networks: []claims.Network{{Request: "net", Pool: testNode, Device: SharedDevice, IfName: "net1", Conflist: []byte("{}")}}}
	if err := s.Admit(c); err == nil {
		t.Error("a claim without a share was admitted on a device claims share")
	}
}
