package dra

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/fastpath-dra/fastpath/devices"
)

// MaxDevicesPerSlice is how many devices one ResourceSlice holds at most
// (the API allows 128; smaller slices make a change rewrite less).
const MaxDevicesPerSlice = 64

// Resources turns an inventory into what the node publishes: one pool named
// after the node, its devices in name order with their taints, split into
// slices of at most MaxDevicesPerSlice. The split is stable, so a change to one device's
// attributes changes one slice.
func Resources(nodeName string, inv devices.Inventory, taints map[string][]resourceapi.DeviceTaint) resourceslice.DriverResources {
	pool := resourceslice.Pool{}
	for start := 0; start < len(inv.Devices); start += MaxDevicesPerSlice {
		end := min(start+MaxDevicesPerSlice, len(inv.Devices))
		slice := resourceslice.Slice{Devices: make([]resourceapi.Device, 0, end-start)}
		for _, d := range inv.Devices[start:end] {
			slice.Devices = append(slice.Devices, resourceapi.Device{Name: d.Name, Attributes: d.Attributes(), Taints: taints[d.Name]})
		}
		pool.Slices = append(pool.Slices, slice)
	}
	if len(pool.Slices) == 0 {
		// An empty pool still says "this node has none", rather than nothing.
		pool.Slices = []resourceslice.Slice{{}}
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{nodeName: pool}}
}

// ResourceSlices renders resources as the ResourceSlice objects the
// publisher creates, for `fastpathd inventory -o slices`.
func ResourceSlices(nodeName string, res resourceslice.DriverResources) []resourceapi.ResourceSlice {
	var out []resourceapi.ResourceSlice
	for poolName, pool := range res.Pools {
		for _, s := range pool.Slices {
			rs := resourceapi.ResourceSlice{}
			rs.APIVersion, rs.Kind = "resource.k8s.io/v1", "ResourceSlice"
			rs.GenerateName = nodeName + "-" + devices.DriverName + "-"
			rs.Spec = resourceapi.ResourceSliceSpec{
				Driver:   devices.DriverName,
				Pool:     resourceapi.ResourcePool{Name: poolName, Generation: pool.Generation, ResourceSliceCount: int64(len(pool.Slices))},
				NodeName: new(nodeName),
				Devices:  s.Devices,
			}
			out = append(out, rs)
		}
	}
	return out
}
