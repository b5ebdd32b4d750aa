package dra

import (
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// manyClaim is a claim of one request, nic, of mode (count 2, or All when
// all), allocated the devices given, in order, with the claim's config
// body.
func manyClaim(all bool, devs []string, body string) *resourceapi.ResourceClaim {
	var allocs []alloc
	for _, d := range devs {
		allocs = append(allocs, alloc{Request: "nic", Device: d})
	}
	c := testClaim("many", allocs, fromClaim(config(body)))
	c.Spec.Devices.Requests = c.Spec.Devices.Requests[:1]
	if all {
		c.Spec.Devices.Requests[0].Exactly.AllocationMode, c.Spec.Devices.Requests[0].Exactly.Count = resourceapi.DeviceAllocationModeAll, 0
	} else {
		c.Spec.Devices.Requests[0].Exactly.Count = int64(len(devs))
	}
	return c
}

// TestPlanSeveralDevices: a request of count 2 gives each device its own
// interface name (the name and its index), its share of the static
// addresses in order, its slot (request.index) in the CDI device name,
// the device-info file and the XDP pins; the request's other settings
// apply to each.
func TestPlanSeveralDevices(t *testing.T) {
	st, err := planClaim(t, manyClaim(false, []string{vfNetdev, vfNetdev2},
		`"interface": {"name": "net", "mtu": 1400, "addresses": ["10.1.0.2/24", "fd00::2/64", "10.1.1.2/24", "fd00:1::2/64"]}, "vf": {"vlan": 7}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Devices) != 2 {
		t.Fatalf("%d devices, want 2", len(st.Devices))
	}
	want := []struct{ name, addrs, slot, cdi, info string }{
		{"net0", "10.1.0.2/24,fd00::2/64", "nic.0", "fastpath.dev/net=uid-many-nic.0", "/state/claims/uid-many/nic.0-device.json"},
		{"net1", "10.1.1.2/24,fd00:1::2/64", "nic.1", "fastpath.dev/net=uid-many-nic.1", "/state/claims/uid-many/nic.1-device.json"},
	}
	for i, w := range want {
		d := st.Devices[i]
		if d.Request != "nic" || d.Slot != w.slot || d.SlotName() != w.slot || d.CDIDevice != w.cdi || d.DeviceInfoFile != w.info {
			t.Errorf("device %d: request %q, slot %q, CDI %q, device-info %q; want nic, %s, %s, %s", i, d.Request, d.Slot, d.CDIDevice, d.DeviceInfoFile, w.slot, w.cdi, w.info)
		}
		if d.Pod == nil || d.Pod.Name != w.name || strings.Join(d.Pod.Addresses, ",") != w.addrs || d.Pod.MTU != 1400 {
			t.Errorf("device %d in the pod: %+v, want %s with %s, MTU 1400", i, d.Pod, w.name, w.addrs)
		}
		if d.VF == nil || d.VF.Set.VLAN == nil || *d.VF.Set.VLAN != 7 {
			t.Errorf("device %d: VF settings %+v, want VLAN 7", i, d.VF)
		}
	}
	spec, err := cdiSpec(st)
	if err != nil {
		t.Fatal(err)
	}
	var names, env []string
	for _, d := range spec.Devices {
		names = append(names, d.Name)
		env = append(env, d.ContainerEdits.Env...)
	}
	if !slices.Equal(names, []string{"uid-many-nic.0", "uid-many-nic.1"}) {
		t.Errorf("CDI devices %v", names)
	}
	for _, e := range []string{"FASTPATH_DEVICE_NIC_0=" + vfNetdev, "FASTPATH_INTERFACE_NIC_0=net0", "FASTPATH_DEVICE_NIC_1=" + vfNetdev2, "FASTPATH_INTERFACE_NIC_1=net1",
		"FASTPATH_DEVICE_INFO_NIC_1=/var/run/k8s.cni.cncf.io/devinfo/dra/nic.1-device.json"} {
		if !slices.Contains(env, e) {
			t.Errorf("CDI env %v lacks %s", env, e)
		}
	}

	// The name defaults to the request's.
	st, err = planClaim(t, manyClaim(true, []string{vfNetdev, vfNetdev2}, ""))
	if err != nil {
		t.Fatal(err)
	}
	if n0, n1 := st.Devices[0].Pod.Name, st.Devices[1].Pod.Name; n0 != "nic0" || n1 != "nic1" || st.Devices[0].Mode != v1alpha1.ModeNetdev {
		t.Errorf("allocationMode All: interfaces %s and %s, want nic0 and nic1", n0, n1)
	}
	// A subrequest of firstAvailable of count 2: named after the request.
	sub := manyClaim(false, []string{vfNetdev, vfNetdev2}, "")
	sub.Spec.Devices.Requests[0].Exactly = nil
	sub.Spec.Devices.Requests[0].FirstAvailable = []resourceapi.DeviceSubRequest{
		{Name: "four", DeviceClassName: "netdev.fastpath.dev", Count: 4},
		{Name: "pair", DeviceClassName: "netdev.fastpath.dev", Count: 2},
	}
	for i := range sub.Status.Allocation.Devices.Results {
		sub.Status.Allocation.Devices.Results[i].Request = "nic/pair"
	}
	st, err = planClaim(t, sub)
	if err != nil {
		t.Fatal(err)
	}
	if d := st.Devices[1]; d.SlotName() != "nic/pair.1" || d.Pod.Name != "nic1" || d.CDIDevice != "fastpath.dev/net=uid-many-nic_pair.1" {
		t.Errorf("subrequest nic/pair's second device: slot %s, interface %s, CDI %s", d.SlotName(), d.Pod.Name, d.CDIDevice)
	}
	// One device of a request of count 1 keeps the request's name
	// everywhere, as before.
	st, err = planClaim(t, testClaim("one", []alloc{{Request: "nic", Device: vfNetdev}}))
	if err != nil {
		t.Fatal(err)
	}
	if d := st.Devices[0]; d.Slot != "" || d.SlotName() != "nic" || d.Pod.Name != "nic" || d.CDIDevice != "fastpath.dev/net=uid-one-nic" {
		t.Errorf("a request of one device: slot %q, interface %s, CDI %s", d.Slot, d.Pod.Name, d.CDIDevice)
	}
}

// TestPlanSeveralDevicesRefused: what cannot be given to each device of a
// request of several is refused with the field named, before anything is
// done.
func TestPlanSeveralDevicesRefused(t *testing.T) {
	two := []string{vfNetdev, vfNetdev2}
	for _, tt := range []struct {
		name string
		all  bool
		body string
		want []string
	}{
		{"one MAC", false, `"interface": {"mac": "02:00:00:00:00:01"}`, []string{`request "nic"`, "interface.mac", "count 2", "leave mac out"}},
		{"routes", false, `"interface": {"routes": [{"destination": "10.9.0.0/16"}]}`, []string{"interface.routes", "same destinations"}},
		{"addresses not a multiple", false, `"interface": {"addresses": ["10.1.0.2/24", "10.1.1.2/24", "10.1.2.2/24"]}`, []string{"interface.addresses", "multiple of 2"}},
		{"addresses for All", true, `"interface": {"addresses": ["10.1.0.2/24", "10.1.1.2/24"]}`, []string{"interface.addresses", "allocationMode All", "ipam pool"}},
		{"a PodNetwork", false, `"podNetwork": "blue"`, []string{"podNetwork", "one request per PodNetwork"}},
		{"name too long with its index", false, `"interface": {"name": "abcdefghijklmno"}`, []string{"interface.name", "abcdefghijklmno0", "at most 15"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := planClaim(t, manyClaim(tt.all, two, tt.body))
			if err == nil {
				t.Fatal("planned")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}
