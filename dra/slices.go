package dra

import (
	"context"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/kubelet"
)

// Resources turns an inventory into what the node publishes: one pool named
// after the node, its devices in name order with their taints, split into
// slices of at most kubelet.MaxDevicesPerSlice. The split is stable, so a
// change to one device's attributes changes one slice. A device claims
// hold (held, by name) is published as it was when its claim was
// prepared, whether discovery sees it now or not: its place in the order,
// and so the split, stay as they were.
func Resources(nodeName string, inv devices.Inventory, held map[string]*claims.PublishedDevice, taints map[string][]resourceapi.DeviceTaint) resourceslice.DriverResources {
	return ResourcesWith(nodeName, inv, held, taints, PublishOptions{})
}

// PublishOptions are what the cluster supports beyond the defaults.
type PublishOptions struct {
	// PFCounters publishes a PF with VFs and its VFs as partitionable
	// devices (DRAPartitionableDevices): the pool has a counter set per
	// such PF (PFCounterSet) of as many "vfs" as it has VFs, in slices of
	// their own after the devices'; the PF consumes all of them and each
	// VF one, so that the scheduler never gives a PF and one of its VFs at
	// once.
	PFCounters bool
	// NUMANodeLists, when set (devices.NUMANodeLists), publishes
	// resource.kubernetes.io/numaNode in its list form
	// (DRAListTypeAttributes): a device on node n is near the nodes of
	// NUMANodeLists[n]. A node with no list keeps the scalar.
	NUMANodeLists map[int64][]int64
	// Binding, when set, chooses the devices published with binding
	// conditions (DRADeviceBindingConditions): ConditionReadyToBind and
	// ConditionBindingFailed, which the node reports once one is
	// allocated (binder). A device claims hold has none: it is allocated.
	Binding devices.Selector
}

// ResourcesWith is Resources with opts.
func ResourcesWith(nodeName string, inv devices.Inventory, held map[string]*claims.PublishedDevice, taints map[string][]resourceapi.DeviceTaint, opts PublishOptions) resourceslice.DriverResources {
	all := make([]resourceapi.Device, 0, len(inv.Devices)+len(held))
	for _, d := range inv.Devices {
		if _, ok := held[d.Name]; ok {
			continue
		}
		dev := resourceapi.Device{Name: d.Name, Attributes: d.Attributes(), Taints: taints[d.Name]}
		if d.Share != nil {
			shareable(&dev, *d.Share)
		}
		if opts.Binding != nil {
			// An expression that fails on a device (an attribute it lacks)
			// does not admit it; discovery's filter said so already.
			if ok, _ := opts.Binding.Admits(context.Background(), devices.DriverName, dev.Attributes); ok {
				dev.BindingConditions = []string{ConditionReadyToBind}
				dev.BindingFailureConditions = []string{ConditionBindingFailed}
			}
		}
		all = append(all, dev)
	}
	for name, p := range held {
		all = append(all, resourceapi.Device{Name: name, Attributes: publishedAttributes(p), Taints: taints[name]})
	}
	if len(held) > 0 {
		slices.SortFunc(all, func(a, b resourceapi.Device) int { return strings.Compare(a.Name, b.Name) })
	}
	if opts.NUMANodeLists != nil {
		for i := range all {
			numaNodeList(all[i].Attributes, opts.NUMANodeLists)
		}
	}
	var sets []resourceapi.CounterSet
	if opts.PFCounters {
		sets = consumeVFCounters(all)
	}
	pool := resourceslice.Pool{}
	for start := 0; start < len(all); start += kubelet.MaxDevicesPerSlice {
		end := min(start+kubelet.MaxDevicesPerSlice, len(all))
		pool.Slices = append(pool.Slices, resourceslice.Slice{Devices: all[start:end:end]})
	}
	for start := 0; start < len(sets); start += resourceapi.ResourceSliceMaxCounterSets {
		end := min(start+resourceapi.ResourceSliceMaxCounterSets, len(sets))
		pool.Slices = append(pool.Slices, resourceslice.Slice{SharedCounters: sets[start:end:end]})
	}
	if len(pool.Slices) == 0 {
		// An empty pool still says "this node has none", rather than nothing.
		pool.Slices = []resourceslice.Slice{{}}
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{nodeName: pool}}
}

// numaNodeList turns the scalar resource.kubernetes.io/numaNode among
// attrs into its list, where lists has one for the node.
func numaNodeList(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, lists map[int64][]int64) {
	a, ok := attrs[deviceattribute.StandardDeviceAttributeNUMANode]
	if !ok || a.IntValue == nil {
		return
	}
	if l, ok := lists[*a.IntValue]; ok && len(l) > 0 {
		attrs[deviceattribute.StandardDeviceAttributeNUMANode] = resourceapi.DeviceAttribute{IntValues: slices.Clone(l)}
	}
}

// CounterVFs is the counter of a PF's counter set: its VFs.
const CounterVFs = "vfs"

// PFCounterSet is the counter set of the PF device pf.
func PFCounterSet(pf string) string { return pf + "-vfs" }

// consumeVFCounters has each PF with VFs among devs consume all of its
// counter set's "vfs", and each VF of such a PF one, and returns the sets
// in the PFs' order. A PF and its VFs are known by their attributes
// (sriovNumVFs, pfPciAddress), as published: a held device's too.
func consumeVFCounters(devs []resourceapi.Device) []resourceapi.CounterSet {
	numVFs := map[string]int64{}
	var sets []resourceapi.CounterSet
	for _, d := range devs {
		if n := d.Attributes["sriovNumVFs"].IntValue; n != nil && *n > 0 {
			numVFs[d.Name] = *n
			sets = append(sets, resourceapi.CounterSet{Name: PFCounterSet(d.Name), Counters: map[string]resourceapi.Counter{
				CounterVFs: {Value: *resource.NewQuantity(*n, resource.DecimalSI)}}})
		}
	}
	for i := range devs {
		d := &devs[i]
		pf, take := d.Name, numVFs[d.Name]
		if a := d.Attributes["pfPciAddress"].StringValue; a != nil {
			pf, take = devices.PCIDeviceName(*a), 1
			if _, ok := numVFs[pf]; !ok {
				continue
			}
		}
		if take == 0 {
			continue
		}
		d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: PFCounterSet(pf), Counters: map[string]resourceapi.Counter{
			CounterVFs: {Value: *resource.NewQuantity(take, resource.DecimalSI)}}}}
	}
	return sets
}

// recordPublished is dev as the node publishes it, for a claim's record;
// nil for a device that stays as it is while claimed (a memif endpoint, a
// shared device).
func recordPublished(dev devices.Device) *claims.PublishedDevice {
	if dev.Share != nil || (dev.PCI == nil && dev.Netdev == nil) {
		return nil
	}
	attrs := dev.Attributes()
	p := &claims.PublishedDevice{Attributes: make(map[string]claims.Attribute, len(attrs))}
	for name, a := range attrs {
		p.Attributes[string(name)] = claims.Attribute{String: a.StringValue, Int: a.IntValue, Bool: a.BoolValue, Version: a.VersionValue}
	}
	return p
}

// publishedAttributes are the attributes of a device as a record keeps
// them.
func publishedAttributes(p *claims.PublishedDevice) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	out := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, len(p.Attributes))
	for name, a := range p.Attributes {
		out[resourceapi.QualifiedName(name)] = resourceapi.DeviceAttribute{StringValue: a.String, IntValue: a.Int, BoolValue: a.Bool, VersionValue: a.Version}
	}
	return out
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
