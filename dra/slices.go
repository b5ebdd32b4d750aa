package dra

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/kubelet"
)

// Resources turns an inventory into what the node publishes: one pool named
// after the node, its devices in name order with their taints, split into
// slices of at most kubelet.MaxDevicesPerSlice. The split is stable, so a change to one device's
// attributes changes one slice.
func Resources(nodeName string, inv devices.Inventory, taints map[string][]resourceapi.DeviceTaint) resourceslice.DriverResources {
	pool := resourceslice.Pool{}
	for start := 0; start < len(inv.Devices); start += kubelet.MaxDevicesPerSlice {
		end := min(start+kubelet.MaxDevicesPerSlice, len(inv.Devices))
		slice := resourceslice.Slice{Devices: make([]resourceapi.Device, 0, end-start)}
		for _, d := range inv.Devices[start:end] {
			dev := resourceapi.Device{Name: d.Name, Attributes: d.Attributes(), Taints: taints[d.Name]}
			if d.Share != nil {
				shareable(&dev, *d.Share)
			}
			slice.Devices = append(slice.Devices, dev)
		}
		pool.Slices = append(pool.Slices, slice)
	}
	if len(pool.Slices) == 0 {
		// An empty pool still says "this node has none", rather than nothing.
		pool.Slices = []resourceslice.Slice{{}}
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{nodeName: pool}}
}

// The capacities of a shared device: its sub-interfaces (each allocation
// takes one) and, where the operator gives it, its bandwidth in bits per
// second (an allocation takes what its claim asks for, none by default).
const (
	CapacityInterfaces resourceapi.QualifiedName = "interfaces"
	CapacityBandwidth  resourceapi.QualifiedName = "bandwidth"
)

// shareable publishes a shared device for many allocations, each taking
// one of its sub-interfaces (DRAConsumableCapacity): a claim need not ask
// for capacity, and cannot ask for more than one.
func shareable(dev *resourceapi.Device, s devices.Share) {
	one := resource.MustParse("1")
	dev.AllowMultipleAllocations = new(true)
	dev.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		CapacityInterfaces: {Value: *resource.NewQuantity(int64(s.Interfaces), resource.DecimalSI), RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default: &one, ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: &one, Max: &one}}},
	}
	if s.BandwidthMbps > 0 {
		zero := resource.MustParse("0")
		dev.Capacity[CapacityBandwidth] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(int64(s.BandwidthMbps)*1_000_000, resource.DecimalSI),
			RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: &zero, ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: &zero}}}
	}
}
