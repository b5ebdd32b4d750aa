//go:build sriov

package dra

import (
	"maps"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/test/sriovtest"
)

// TestSRIOVPFWithVFs: the VM's igb PF with VFs, as discovery finds it and
// the driver publishes it (attribute sriovNumVFs), is left out by the
// chart's classes that hand a device over whole (deploy/deviceclasses.yaml,
// the selectors run as the scheduler runs them), while its VFs are in
// netdev; a claim that has it in mode netdev all the same is refused at
// Prepare (the fake kubelet over the real gRPC) with the claim, request,
// device, VF count and flag named, nothing of the claim left, and the PF
// and its VFs as they were. With no VFs the PF is published with
// sriovNumVFs 0 and netdev selects it; VFs made after that are read at
// Prepare, which refuses it.
func TestSRIOVPFWithVFs(t *testing.T) {
	pf := sriovtest.RequirePF(t)
	vfs := pf.VFsReady(t, 4)
	// Runs before VFsReady's check: the PF has its four VFs again.
	t.Cleanup(func() { pf.SetNumVFs(t, 4) })
	name := devices.PCIDeviceName(pf.Address)
	classes := map[string]*resourceapi.DeviceClass{}
	for _, c := range deployDeviceClasses(t) {
		classes[c.Name] = c
	}
	whole := []string{"netdev.fastpath.dev", "afxdp.fastpath.dev", "delegate.fastpath.dev", "vfio.fastpath.dev"}

	inv := discoverSRIOV(t)
	if got := publishedNumVFs(t, inv, name); got != 4 {
		t.Fatalf("%s (%s) is published with sriovNumVFs %d, want 4", name, pf.Name, got)
	}
	for _, class := range whole {
		if selects(t, classes[class], inv, name) {
			t.Errorf("%s selects the PF %s with 4 VFs", class, name)
		}
	}
	if vf := devices.PCIDeviceName(vfs[0].Address); !selects(t, classes["netdev.fastpath.dev"], inv, vf) {
		t.Errorf("netdev.fastpath.dev does not select the VF %s", vf)
	}
	link, err := netlink.LinkByName(pf.Name)
	if err != nil {
		t.Fatal(err)
	}
	before := link.Attrs()
	claim := testClaim("pf", []alloc{{Request: "nic", Device: name}}, fromClaim(config(`"interface": {"name": "net1"}`)))
	d, k, ctx := startSRIOVDriver(t, &fakeObject{claim})
	d.UseInventory(inv)
	e := prepare(t, ctx, k, claim)
	for _, want := range []string{`claim default/pf`, `request "nic"`, "device " + name, `mode: Invalid value: "netdev"`,
		"is a PF with 4 VFs (sriov_numvfs)", "--allow-pf-with-vfs"} {
		if !strings.Contains(e, want) {
			t.Errorf("Prepare of the PF in mode netdev: the error does not say %q: %q", want, e)
		}
	}
	assertNothingLeft(t, d)
	link, err = netlink.LinkByName(pf.Name)
	if err != nil {
		t.Fatalf("the PF's netdev %s is gone from the host: %v", pf.Name, err)
	}
	if after := link.Attrs(); after.Index != before.Index || after.MTU != before.MTU || after.HardwareAddr.String() != before.HardwareAddr.String() {
		t.Errorf("the PF's netdev changed: index %d, MTU %d, MAC %s; was %d, %d, %s",
			after.Index, after.MTU, after.HardwareAddr, before.Index, before.MTU, before.HardwareAddr)
	}
	if n := len(pf.VFs(t)); n != 4 {
		t.Errorf("the PF has %d VFs after the refusal, want 4", n)
	}

	// No VFs when discovered: published with sriovNumVFs 0 and selected;
	// VFs made since are read at Prepare.
	pf.SetNumVFs(t, 0)
	inv = discoverSRIOV(t)
	if got := publishedNumVFs(t, inv, name); got != 0 {
		t.Fatalf("%s is published with sriovNumVFs %d, want 0", name, got)
	}
	if !selects(t, classes["netdev.fastpath.dev"], inv, name) {
		t.Errorf("netdev.fastpath.dev does not select the PF %s without VFs", name)
	}
	d.UseInventory(inv)
	pf.SetNumVFs(t, 2)
	e = prepare(t, ctx, k, claim)
	if !strings.Contains(e, "device "+name) || !strings.Contains(e, "is a PF with 2 VFs (sriov_numvfs)") {
		t.Errorf("Prepare of the PF published without VFs, with 2 made since: %q, want it refused for its 2 VFs", e)
	}
	assertNothingLeft(t, d)
}

// publishedNumVFs is the attribute sriovNumVFs of device name as the
// driver publishes inv, -1 without it.
func publishedNumVFs(t *testing.T, inv devices.Inventory, name string) int64 {
	t.Helper()
	a, ok := publishedDevice(t, inv, name).Attributes["sriovNumVFs"]
	if !ok || a.IntValue == nil {
		return -1
	}
	return *a.IntValue
}

// publishedDevice is device name in the ResourceSlices the driver
// publishes for inv.
func publishedDevice(t *testing.T, inv devices.Inventory, name string) resourceapi.Device {
	t.Helper()
	for _, s := range Resources(testNode, inv, nil, nil).Pools[testNode].Slices {
		for _, d := range s.Devices {
			if d.Name == name {
				return d
			}
		}
	}
	t.Fatalf("device %s is not published (the node's uplink?)", name)
	return resourceapi.Device{}
}

// selects runs class's selectors on device name as published, as the
// scheduler runs them.
func selects(t *testing.T, class *resourceapi.DeviceClass, inv devices.Inventory, name string) bool {
	t.Helper()
	if class == nil {
		t.Fatal("no such DeviceClass in deploy/deviceclasses.yaml")
	}
	dev := publishedDevice(t, inv, name)
	for _, sel := range class.Spec.Selectors {
		res := cel.GetCompiler(cel.Features{}).CompileCELExpression(sel.CEL.Expression, cel.Options{})
		if res.Error != nil {
			t.Fatalf("%s: %v", class.Name, res.Error)
		}
		ok, _, err := res.DeviceMatches(t.Context(), cel.Device{Driver: devices.DriverName, AllowMultipleAllocations: dev.AllowMultipleAllocations,
			Attributes: dev.Attributes, Capacity: dev.Capacity})
		if err != nil {
			t.Fatalf("%s on %s: %v", class.Name, name, err)
		}
		if !ok {
			return false
		}
	}
	return true
}

// TestSRIOVPFCounters: the real igb PF with 4 VFs, as discovery finds it,
// published with the counters (--pf-counters): a slice of its counter
// set of 4 vfs, the PF consuming all four and each VF one.
func TestSRIOVPFCounters(t *testing.T) {
	pf := sriovtest.RequirePF(t)
	vfs := pf.VFsReady(t, 4)
	name := devices.PCIDeviceName(pf.Address)
	set := PFCounterSet(name)
	res := ResourcesWith(testNode, discoverSRIOV(t), nil, nil, PublishOptions{PFCounters: true})
	var sets []resourceapi.CounterSet
	consumes := map[string]int64{}
	for _, s := range res.Pools[testNode].Slices {
		sets = append(sets, s.SharedCounters...)
		for _, d := range s.Devices {
			for _, c := range d.ConsumesCounters {
				if c.CounterSet == set {
					q := c.Counters[CounterVFs].Value
					consumes[d.Name] = q.Value()
				}
			}
		}
	}
	if len(sets) != 1 || sets[0].Name != set {
		t.Fatalf("counter sets %+v, want one, %s", sets, set)
	}
	if q := sets[0].Counters[CounterVFs].Value; q.Value() != 4 {
		t.Errorf("counter set %s holds %s vfs, want 4", set, q.String())
	}
	want := map[string]int64{name: 4}
	for _, vf := range vfs {
		want[devices.PCIDeviceName(vf.Address)] = 1
	}
	if !maps.Equal(consumes, want) {
		t.Errorf("the devices consume %v of %s, want %v", consumes, set, want)
	}
}
