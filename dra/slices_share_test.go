package dra

import (
	"testing"

	"github.com/fastpath-dra/fastpath/devices"
)

// A shared device is published for many allocations, with its
// sub-interfaces as capacity of which each allocation takes one; the
// others are published as before.
func TestResourcesShared(t *testing.T) {
	inv := devices.Inventory{Devices: []devices.Device{
		{Name: "netdev-a", Kind: devices.KindNetdev, Netdev: &devices.Netdev{Name: "a"}, Share: &devices.Share{Interfaces: 8}},
		{Name: "netdev-bw", Kind: devices.KindNetdev, Netdev: &devices.Netdev{Name: "bw"}, Share: &devices.Share{Interfaces: 4, BandwidthMbps: 10000}},
		{Name: "netdev-b", Kind: devices.KindNetdev, Netdev: &devices.Netdev{Name: "b"}},
	}}
	res := Resources("node-a", inv, nil, nil)
	devs := res.Pools["node-a"].Slices[0].Devices
	a, bw, b := devs[0], devs[1], devs[2]
	if _, ok := a.Capacity[CapacityBandwidth]; ok {
		t.Errorf("bandwidth published though the operator gave none: %+v", a.Capacity)
	}
	if c, ok := bw.Capacity[CapacityBandwidth]; !ok || c.Value.Value() != 10_000_000_000 || c.RequestPolicy == nil ||
		c.RequestPolicy.Default.Value() != 0 || c.RequestPolicy.ValidRange.Min.Value() != 0 || c.RequestPolicy.ValidRange.Max != nil {
		t.Errorf("bandwidth capacity = %+v", bw.Capacity)
	}
	if a.AllowMultipleAllocations == nil || !*a.AllowMultipleAllocations {
		t.Errorf("shared device: allowMultipleAllocations = %v", a.AllowMultipleAllocations)
	}
	c, ok := a.Capacity[CapacityInterfaces]
	if !ok || c.Value.Value() != 8 || c.RequestPolicy == nil || c.RequestPolicy.Default.Value() != 1 ||
		c.RequestPolicy.ValidRange.Min.Value() != 1 || c.RequestPolicy.ValidRange.Max.Value() != 1 {
		t.Errorf("shared device: capacity = %+v", a.Capacity)
	}
	if v := a.Attributes["shareable"]; v.BoolValue == nil || !*v.BoolValue {
		t.Errorf("shared device: shareable = %v", v)
	}
	if b.AllowMultipleAllocations != nil || b.Capacity != nil {
		t.Errorf("device of its own: %+v", b)
	}
}
