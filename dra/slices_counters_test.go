package dra

import (
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// TestResourcesPFCounters: with the counters, the E810 fixture's pool has
// a slice of counter sets, one per PF with VFs, of as many vfs as it has
// VFs; its PF consumes all of them and each of its VFs one, a VF a claim
// holds (published from its record) too; other devices consume none.
// Without them nothing of it is published.
func TestResourcesPFCounters(t *testing.T) {
	inv := testInventory(t)
	pfVFs := map[string]int64{}
	for _, d := range inv.Devices {
		if d.PF != nil && d.PF.NumVFs > 0 {
			pfVFs[d.Name] = int64(d.PF.NumVFs)
		}
	}
	if pfVFs[pfDevice] != 4 {
		t.Fatalf("the fixture's PF %s has %d VFs, want 4", pfDevice, pfVFs[pfDevice])
	}
	vf, ok := inventoryMap(inv)[vfNetdev]
	if !ok {
		t.Fatal("no VF in the fixture")
	}
	held := map[string]*claims.PublishedDevice{vfNetdev: recordPublished(vf)}
	for _, counters := range []bool{false, true} {
		res := ResourcesWith(testNode, inv, held, nil, PublishOptions{PFCounters: counters})
		sets := map[string]int64{}
		consumed := map[string]map[string]int64{} // device: set: vfs
		for _, s := range res.Pools[testNode].Slices {
			if len(s.SharedCounters) > 0 && len(s.Devices) > 0 {
				t.Errorf("a slice with both devices and counters")
			}
			for _, cs := range s.SharedCounters {
				q := cs.Counters[CounterVFs].Value
				sets[cs.Name] = q.Value()
			}
			for _, d := range s.Devices {
				for _, c := range d.ConsumesCounters {
					if consumed[d.Name] == nil {
						consumed[d.Name] = map[string]int64{}
					}
					q := c.Counters[CounterVFs].Value
					consumed[d.Name][c.CounterSet] = q.Value()
				}
			}
		}
		if !counters {
			if len(sets) > 0 || len(consumed) > 0 {
				t.Errorf("without the counters: sets %v, consumed %v", sets, consumed)
			}
			continue
		}
		for pf, n := range pfVFs {
			if sets[PFCounterSet(pf)] != n || consumed[pf][PFCounterSet(pf)] != n {
				t.Errorf("PF %s: set %v, consumes %v; want %d of %d", pf, sets[PFCounterSet(pf)], consumed[pf], n, n)
			}
		}
		vfs := 0
		for _, d := range inv.Devices {
			if d.VF == nil || pfVFs[devices.PCIDeviceName(d.VF.PFPCIAddress)] == 0 {
				if d.PF == nil || d.PF.NumVFs == 0 {
					if len(consumed[d.Name]) > 0 {
						t.Errorf("device %s consumes %v", d.Name, consumed[d.Name])
					}
				}
				continue
			}
			vfs++
			if got := consumed[d.Name][PFCounterSet(devices.PCIDeviceName(d.VF.PFPCIAddress))]; got != 1 {
				t.Errorf("VF %s consumes %v, want 1 of its PF's set", d.Name, consumed[d.Name])
			}
		}
		if vfs == 0 || consumed[vfNetdev][PFCounterSet(pfDevice)] != 1 {
			t.Errorf("%d VFs consume; the held VF %s consumes %v", vfs, vfNetdev, consumed[vfNetdev])
		}
		if len(sets) > resourceapi.ResourceSliceMaxCounterSets*len(res.Pools[testNode].Slices) {
			t.Errorf("%d sets", len(sets))
		}
	}
}

// With NUMA node lists, every device with a NUMA node publishes
// resource.kubernetes.io/numaNode as its node's list, a held device too
// (its record has the scalar); a node without a list keeps the scalar, and
// a device without a node has none. The deprecated fastpath.dev/numaNode
// stays a scalar.
func TestResourcesNUMANodeLists(t *testing.T) {
	inv := testInventory(t)
	vf, ok := inventoryMap(inv)[vfNetdev]
	if !ok {
		t.Fatal("no VF in the fixture")
	}
	held := map[string]*claims.PublishedDevice{vfNetdev: recordPublished(vf)}
	lists := map[int64][]int64{0: {0, 1}}
	res := ResourcesWith(testNode, inv, held, nil, PublishOptions{NUMANodeLists: lists})
	seen := 0
	for _, s := range res.Pools[testNode].Slices {
		for _, d := range s.Devices {
			scalar := d.Attributes["numaNode"]
			a, ok := d.Attributes[deviceattribute.StandardDeviceAttributeNUMANode]
			switch {
			case scalar.IntValue == nil:
				if ok {
					t.Errorf("%s has no NUMA node, but publishes %+v", d.Name, a)
				}
			case *scalar.IntValue == 0:
				seen++
				if a.IntValue != nil || !slices.Equal(a.IntValues, []int64{0, 1}) {
					t.Errorf("%s on node 0 publishes %+v, want the list [0 1]", d.Name, a)
				}
			default:
				if a.IntValue == nil || *a.IntValue != *scalar.IntValue || a.IntValues != nil {
					t.Errorf("%s on node %d, which has no list, publishes %+v", d.Name, *scalar.IntValue, a)
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no device of the fixture is on NUMA node 0")
	}
	if lists[0][1] != 1 {
		t.Error("the lists were changed")
	}
	// Without lists, the scalar.
	for _, s := range ResourcesWith(testNode, inv, held, nil, PublishOptions{}).Pools[testNode].Slices {
		for _, d := range s.Devices {
			if a, ok := d.Attributes[deviceattribute.StandardDeviceAttributeNUMANode]; ok && a.IntValues != nil {
				t.Errorf("%s publishes a list without NUMANodeLists: %+v", d.Name, a)
			}
		}
	}
}
