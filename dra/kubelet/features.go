package kubelet

import (
	"context"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// SliceFeatures say which optional fields of a ResourceSlice the API
// server keeps. Each is a DRA feature gate, off by default in some of the
// Kubernetes releases fastpath runs on (1.34 has all of them off but the
// first): an API server with the gate off drops the field from what it
// stores, and a driver that writes it anyway rewrites its slices for ever.
type SliceFeatures struct {
	// Taints: device taints (DRADeviceTaints), which mark an unhealthy
	// device.
	Taints bool
	// Counters: shared counters and devices consuming them
	// (DRAPartitionableDevices), for a PF with VFs and its VFs.
	Counters bool
	// MultipleAllocations: a device allocated to several claims, with
	// consumable capacity (DRAConsumableCapacity), for shared mode.
	MultipleAllocations bool
	// BindingConditions: binding conditions (DRADeviceBindingConditions).
	BindingConditions bool
	// ListAttributes: attributes of list values (DRAListTypeAttributes),
	// for --numa-node-list.
	ListAttributes bool
}

// AllSliceFeatures is what a cluster with every gate on keeps.
var AllSliceFeatures = SliceFeatures{Taints: true, Counters: true, MultipleAllocations: true, BindingConditions: true, ListAttributes: true}

// Off names the features f lacks, with their feature gates.
func (f SliceFeatures) Off() []string {
	var off []string
	for _, x := range []struct {
		on   bool
		name string
	}{
		{f.Taints, "device taints (DRADeviceTaints)"},
		{f.Counters, "partitionable devices (DRAPartitionableDevices)"},
		{f.MultipleAllocations, "consumable capacity (DRAConsumableCapacity)"},
		{f.BindingConditions, "binding conditions (DRADeviceBindingConditions)"},
		{f.ListAttributes, "list attributes (DRAListTypeAttributes)"},
	} {
		if !x.on {
			off = append(off, x.name)
		}
	}
	return off
}

// ProbeSliceFeatures asks the API server, with server-side dry-run
// creates of a ResourceSlice of this node (nothing is stored), which of
// SliceFeatures it keeps: one create per feature, each with a device using
// it, so that a refusal of one says nothing of the others. A probe the API
// server refuses counts the feature as kept (as before the probe): the
// publisher then says what it dropped, if it does; but for list
// attributes, whose value dropped leaves an attribute without one, which
// the API server refuses.
func ProbeSliceFeatures(ctx context.Context, client kubernetes.Interface, driver, node string) (SliceFeatures, error) {
	one := resource.MustParse("1")
	probes := []struct {
		on   *bool
		make func(*resourceapi.ResourceSlice)
		kept func(*resourceapi.ResourceSlice) bool
		// refusedOff: a refusal means the feature is off (the field
		// dropped leaves the object invalid).
		refusedOff bool
	}{
		{nil, func(s *resourceapi.ResourceSlice) {
			s.Spec.Devices[0].Taints = []resourceapi.DeviceTaint{{Key: "fastpath.dev/probe", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
		}, func(s *resourceapi.ResourceSlice) bool {
			return len(s.Spec.Devices) == 1 && len(s.Spec.Devices[0].Taints) == 1
		}, false},
		{nil, func(s *resourceapi.ResourceSlice) {
			s.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "probe", Counters: map[string]resourceapi.Counter{"c": {Value: one}}}}
			s.Spec.Devices[0].ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "probe", Counters: map[string]resourceapi.Counter{"c": {Value: one}}}}
		}, func(s *resourceapi.ResourceSlice) bool {
			return len(s.Spec.SharedCounters) == 1 && len(s.Spec.Devices) == 1 && len(s.Spec.Devices[0].ConsumesCounters) == 1
		}, false},
		{nil, func(s *resourceapi.ResourceSlice) {
			s.Spec.Devices[0].AllowMultipleAllocations = new(true)
		}, func(s *resourceapi.ResourceSlice) bool {
			return len(s.Spec.Devices) == 1 && s.Spec.Devices[0].AllowMultipleAllocations != nil
		}, false},
		{nil, func(s *resourceapi.ResourceSlice) {
			s.Spec.Devices[0].BindingConditions = []string{"fastpath.dev/probe"}
			s.Spec.Devices[0].BindingFailureConditions = []string{"fastpath.dev/probe-failed"}
		}, func(s *resourceapi.ResourceSlice) bool {
			return len(s.Spec.Devices) == 1 && len(s.Spec.Devices[0].BindingConditions) == 1
		}, false},
		{nil, func(s *resourceapi.ResourceSlice) {
			s.Spec.Devices[0].Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"probe": {IntValues: []int64{0, 1}}}
		}, func(s *resourceapi.ResourceSlice) bool {
			return len(s.Spec.Devices) == 1 && len(s.Spec.Devices[0].Attributes["probe"].IntValues) == 2
		}, true},
	}
	f := SliceFeatures{}
	probes[0].on, probes[1].on, probes[2].on, probes[3].on, probes[4].on = &f.Taints, &f.Counters, &f.MultipleAllocations, &f.BindingConditions, &f.ListAttributes
	var refused []string
	for _, p := range probes {
		s := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{GenerateName: node + "-" + strings.ReplaceAll(driver, ".", "-") + "-probe-"},
			Spec: resourceapi.ResourceSliceSpec{
				Driver: driver, NodeName: new(node),
				Pool:    resourceapi.ResourcePool{Name: node + "-feature-probe", Generation: 1, ResourceSliceCount: 1},
				Devices: []resourceapi.Device{{Name: "probe"}},
			},
		}
		p.make(s)
		got, err := client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			if ctx.Err() != nil {
				return f, ctx.Err()
			}
			*p.on = !p.refusedOff
			refused = append(refused, err.Error())
			continue
		}
		*p.on = p.kept(got)
	}
	if len(refused) == len(probes) {
		return AllSliceFeatures, fmt.Errorf("probe the API server's ResourceSlice features: %s", refused[0])
	}
	return f, nil
}

// Strip takes out of what a driver publishes the fields f lacks, so that
// the API server stores the slices as written: without device taints a
// device tainted NoSchedule or NoExecute (unhealthy) is not published at
// all (else the scheduler would take it for healthy) and other taints are
// dropped; without counters, the counter sets and their consumption;
// without consumable capacity, a device's several allocations and its
// capacities' request policies; without binding conditions, those and
// the node binding that comes with them.
func (f SliceFeatures) Strip(res *resourceslice.DriverResources) {
	if f == AllSliceFeatures {
		return
	}
	for name, pool := range res.Pools {
		for i := range pool.Slices {
			s := &pool.Slices[i]
			if !f.Counters {
				s.SharedCounters = nil
			}
			kept := s.Devices[:0]
			for _, d := range s.Devices {
				if !f.Taints {
					if unhealthy(d.Taints) {
						continue
					}
					d.Taints = nil
				}
				if !f.Counters {
					d.ConsumesCounters = nil
				}
				if !f.MultipleAllocations {
					d.AllowMultipleAllocations = nil
					for q, c := range d.Capacity {
						c.RequestPolicy = nil
						d.Capacity[q] = c
					}
				}
				if !f.BindingConditions {
					d.BindingConditions, d.BindingFailureConditions, d.BindsToNode = nil, nil, nil
				}
				kept = append(kept, d)
			}
			s.Devices = kept
		}
		// A slice of counters alone has nothing left without them.
		pool.Slices = slices.DeleteFunc(pool.Slices, func(s resourceslice.Slice) bool { return len(s.Devices) == 0 && len(s.SharedCounters) == 0 })
		res.Pools[name] = pool
	}
}

func unhealthy(taints []resourceapi.DeviceTaint) bool {
	for _, t := range taints {
		if t.Effect == resourceapi.DeviceTaintEffectNoSchedule || t.Effect == resourceapi.DeviceTaintEffectNoExecute {
			return true
		}
	}
	return false
}
