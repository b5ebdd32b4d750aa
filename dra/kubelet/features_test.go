package kubelet

import (
	"errors"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// An API server of Kubernetes 1.34 with its DRA gates at their defaults
// keeps no field of SliceFeatures but binding conditions... or whichever it
// drops: the probe finds each by a dry-run create, stores nothing, and a
// probe refused counts its feature as kept.
func TestProbeSliceFeatures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		drop   func(*resourceapi.ResourceSlice)
		refuse bool
		want   SliceFeatures
	}{
		{"every gate on", func(*resourceapi.ResourceSlice) {}, false, AllSliceFeatures},
		{"1.34's defaults", func(s *resourceapi.ResourceSlice) {
			s.Spec.SharedCounters = nil
			for i := range s.Spec.Devices {
				d := &s.Spec.Devices[i]
				d.Taints, d.ConsumesCounters, d.AllowMultipleAllocations, d.BindingConditions, d.BindingFailureConditions = nil, nil, nil, nil, nil
				d.Attributes = nil
			}
		}, false, SliceFeatures{}},
		{"taints only", func(s *resourceapi.ResourceSlice) {
			s.Spec.SharedCounters = nil
			for i := range s.Spec.Devices {
				d := &s.Spec.Devices[i]
				d.ConsumesCounters, d.AllowMultipleAllocations, d.BindingConditions = nil, nil, nil
				d.Attributes = nil
			}
		}, false, SliceFeatures{Taints: true}},
		{"every probe refused", nil, true, AllSliceFeatures},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			creates := 0
			client.PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
				c := a.(k8stesting.CreateAction)
				if opts := c.(k8stesting.CreateActionImpl).GetCreateOptions(); len(opts.DryRun) != 1 || opts.DryRun[0] != metav1.DryRunAll {
					t.Errorf("a probe's create is not a dry run: %+v", opts)
				}
				creates++
				if tc.refuse {
					return true, nil, errors.New("admission webhook refused")
				}
				s := c.GetObject().(*resourceapi.ResourceSlice).DeepCopy()
				tc.drop(s)
				return true, s, nil
			})
			got, err := ProbeSliceFeatures(t.Context(), client, "fastpath.dev", "node-a")
			if tc.refuse != (err != nil) {
				t.Errorf("error %v", err)
			}
			if got != tc.want || creates != 5 {
				t.Errorf("features %+v after %d creates, want %+v after 5", got, creates, tc.want)
			}
			if list, _ := client.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{}); len(list.Items) != 0 {
				t.Errorf("the probe stored %d slices", len(list.Items))
			}
		})
	}
}

// Without the features, the slices hold nothing the API server would
// drop: an unhealthy device is not published, the counters' own slice
// goes, a shared device is allocated once.
func TestStripSliceFeatures(t *testing.T) {
	one := resource.MustParse("1")
	res := func() resourceslice.DriverResources {
		return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{"node-a": {Slices: []resourceslice.Slice{
			{Devices: []resourceapi.Device{
				{Name: "ok", Taints: []resourceapi.DeviceTaint{{Key: "fastpath.dev/note", Effect: resourceapi.DeviceTaintEffectNone}},
					ConsumesCounters:  []resourceapi.DeviceCounterConsumption{{CounterSet: "pf", Counters: map[string]resourceapi.Counter{"vfs": {Value: one}}}},
					BindingConditions: []string{"ready"}, BindingFailureConditions: []string{"failed"}, BindsToNode: new(true)},
				{Name: "sick", Taints: []resourceapi.DeviceTaint{{Key: "fastpath.dev/unhealthy", Effect: resourceapi.DeviceTaintEffectNoSchedule}}},
				{Name: "shared", AllowMultipleAllocations: new(true), Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
					"interfaces": {Value: one, RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: &one}}}},
			}},
			{SharedCounters: []resourceapi.CounterSet{{Name: "pf", Counters: map[string]resourceapi.Counter{"vfs": {Value: one}}}}},
		}}}}
	}
	all := res()
	AllSliceFeatures.Strip(&all)
	if n := len(all.Pools["node-a"].Slices); n != 2 {
		t.Fatalf("with every feature %d slices, want both", n)
	}
	none := res()
	SliceFeatures{}.Strip(&none)
	sl := none.Pools["node-a"].Slices
	if len(sl) != 1 || len(sl[0].Devices) != 2 || sl[0].Devices[0].Name != "ok" || sl[0].Devices[1].Name != "shared" {
		t.Fatalf("without the features: %+v, want one slice of ok and shared", sl)
	}
	ok, shared := sl[0].Devices[0], sl[0].Devices[1]
	if ok.Taints != nil || ok.ConsumesCounters != nil || ok.BindingConditions != nil || ok.BindingFailureConditions != nil || ok.BindsToNode != nil {
		t.Errorf("ok keeps %+v", ok)
	}
	if shared.AllowMultipleAllocations != nil || shared.Capacity["interfaces"].RequestPolicy != nil || !shared.Capacity["interfaces"].Value.Equal(one) {
		t.Errorf("shared keeps %+v", shared)
	}
	if off := (SliceFeatures{Taints: true}).Off(); len(off) != 4 {
		t.Errorf("off: %v", off)
	}
}
