package dra

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

func planClaim(t *testing.T, claim *resourceapi.ResourceClaim) (*claims.Claim, error) {
	t.Helper()
	return plan(claim, inventoryMap(testInventory(t)), testNode, planPaths{
		claimDir: "/state/claims/" + string(claim.UID), cdiSpec: "/cdi/spec.json", bpfDir: "/sys/fs/bpf/fastpath"})
}

func TestPlanValid(t *testing.T) {
	claim := testClaim("good", []alloc{{Request: "nic", Device: vfNetdev}, {Request: "dpdk", Device: vfVFIO}},
		fromClass(config(`"mode": "netdev"`)),
		fromClaim(config(`"interface": {"name": "net1", "mtu": 9000, "mac": "02:00:00:00:00:01", "addresses": ["10.10.1.2/24", "fd00::2/64"], "routes": [{"destination": "10.20.0.0/16", "gateway": "10.10.1.1"}]}, "vf": {"vlan": 100, "qos": 2, "spoofChk": true}`)),
	)
	// The vfio request gets its own class config, scoped to it.
	claim.Status.Allocation.Devices.Config[1].Requests = []string{"nic"}
	claim.Status.Allocation.Devices.Config = append(claim.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
		Source: resourceapi.AllocationConfigSourceClass, Requests: []string{"dpdk"},
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: "fastpath.dev", Parameters: raw(config(`"mode": "vfio"`)),
		}},
	})
	st, err := planClaim(t, claim)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pod.UID != "pod-uid-good" || len(st.Devices) != 2 || st.CDISpec != "/cdi/spec.json" || st.Dir != "/state/claims/uid-good" || st.Prepared {
		t.Fatalf("state = %+v", st)
	}
	nic, dpdk := st.Devices[0], st.Devices[1]
	if nic.Mode != v1alpha1.ModeNetdev || nic.Pod.Name != "net1" || nic.Pod.MTU != 9000 || nic.Pod.MAC != "02:00:00:00:00:01" ||
		strings.Join(nic.Pod.Addresses, ",") != "10.10.1.2/24,fd00::2/64" || nic.Pod.Routes[0] != (claims.Route{Destination: "10.20.0.0/16", Gateway: "10.10.1.1"}) {
		t.Errorf("nic in the pod = %+v", nic.Pod)
	}
	if v := nic.VF; v == nil || v.PFName != "ens1f0" || v.ID != 0 || *v.Set.VLAN != 100 || *v.Set.QoS != 2 || !*v.Set.SpoofChk || v.Set.MAC != "02:00:00:00:00:01" || v.Before != nil {
		t.Errorf("nic VF settings = %+v", nic.VF)
	}
	if nic.Host == nil || nic.Host.Name != "ens1f0v0" || nic.PCIAddress != "0000:3b:01.0" || nic.PFPCIAddress != "0000:3b:00.0" {
		t.Errorf("nic = %+v, host %+v", nic, nic.Host)
	}
	if nic.CDIDevice != "fastpath.dev/net=uid-good-nic" || nic.DeviceInfoFile != "/state/claims/uid-good/nic-device.json" {
		t.Errorf("nic CDI %q, device-info %q", nic.CDIDevice, nic.DeviceInfoFile)
	}
	if dpdk.Mode != v1alpha1.ModeVFIO || dpdk.Pod != nil || dpdk.VFIO == nil || dpdk.VFIO.IOMMUGroup == 0 {
		t.Errorf("dpdk = %+v, vfio %+v", dpdk, dpdk.VFIO)
	}
	// Deterministic: the same input gives the same plan.
	again, err := planClaim(t, claim)
	if err != nil || !reflect.DeepEqual(again, st) {
		t.Errorf("second plan differs: %+v, %v", again, err)
	}
}

func TestPlanDefaults(t *testing.T) {
	st, err := planClaim(t, testClaim("plain", []alloc{{Request: "eth-fast", Device: vfNetdev}}))
	if err != nil {
		t.Fatal(err)
	}
	if d := st.Devices[0]; d.Mode != v1alpha1.ModeNetdev || d.Pod == nil || d.Pod.Name != "eth-fast" || d.VF != nil {
		t.Errorf("defaulted device = %+v", d)
	}
	// afxdp defaults, and where the program is pinned.
	st, err = planClaim(t, testClaim("xsk", []alloc{{Request: "xsk", Device: vfNetdev}}, fromClaim(config(`"mode": "afxdp"`))))
	if err != nil {
		t.Fatal(err)
	}
	if x := st.Devices[0].XDP; x == nil || x.Program != "xsk-redirect" || x.AttachMode != "native" || x.Queues != 1 || x.ZeroCopy != "preferred" ||
		x.PinDir != "/sys/fs/bpf/fastpath/uid-xsk-xsk" {
		t.Errorf("afxdp defaults = %+v", x)
	}
}

func TestPlanClaimWins(t *testing.T) {
	claim := testClaim("merge", []alloc{{Request: "nic", Device: vfNetdev}},
		fromClaim(config(`"interface": {"mtu": 1400}`)),
		fromClass(config(`"interface": {"name": "cls0", "mtu": 9000}`)),
	)
	st, err := planClaim(t, claim)
	if err != nil {
		t.Fatal(err)
	}
	if i := st.Devices[0].Pod; i.MTU != 1400 || i.Name != "cls0" {
		t.Errorf("merged interface = %+v, want the claim's MTU over the class's and the class's name kept", i)
	}
}

func TestPlanErrors(t *testing.T) {
	tests := []struct {
		name  string
		claim func() *resourceapi.ResourceClaim
		want  []string // all in the error
	}{
		{"unknown field", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"interface": {"colour": "red"}`)))
		}, []string{"claim default/c1", `request "nic"`, "device " + vfNetdev, "config[0][FromClaim].parameters", "config[0][FromClaim].parameters.interface.colour: Forbidden: unknown field"}},
		{"duplicate field", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"mode": "netdev", "mode": "vfio"`)))
		}, []string{"parameters.mode: Forbidden: duplicate field"}},
		{"wrong kind", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(`{"apiVersion": "v1", "kind": "ConfigMap"}`))
		}, []string{"apiVersion", "fastpath.dev/v1alpha1"}},
		{"MTU above the device's", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"interface": {"mtu": 9800}`)))
		}, []string{"interface.mtu", "between 68 and 9702"}},
		{"bad interface name", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"interface": {"name": "much-too-long-name0"}`)))
		}, []string{"interface.name", "at most 15"}},
		{"default name too long", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "a-very-long-request", Device: vfNetdev}})
		}, []string{"interface.name"}},
		{"slash in name", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"interface": {"name": "a/b"}`)))
		}, []string{"interface.name"}},
		{"multicast MAC", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"interface": {"mac": "01:00:5e:00:00:01"}`)))
		}, []string{"interface.mac", "unicast"}},
		{"non-canonical CIDR", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"interface": {"addresses": ["FD00::2/64"]}`)))
		}, []string{"interface.addresses[0]", "canonical: fd00::2/64"}},
		{"address without prefix", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"interface": {"addresses": ["10.0.0.1"]}`)))
		}, []string{"interface.addresses[0]", "CIDR"}},
		{"VLAN out of range", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"vf": {"vlan": 4095}`)))
		}, []string{"vf.vlan", "4094"}},
		{"QoS out of range", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"vf": {"vlan": 10, "qos": 8}`)))
		}, []string{"vf.qos"}},
		{"VF settings on a PF", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "nic", Device: pfDevice}}, fromClaim(config(`"vf": {"vlan": 10}`)))
		}, []string{"vf: Forbidden", "not an SR-IOV VF"}},
		{"netdev mode without netdev", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "nic", Device: vfVFIO}})
		}, []string{"mode", "no kernel netdev", "vfio-pci"}},
		{"afxdp without XDP", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev2}}, fromClaim(config(`"mode": "afxdp"`)))
		}, []string{"mode", "XDP"}},
		{"unknown XDP program", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"mode": "afxdp", "xdp": {"program": "my-prog"}`)))
		}, []string{"xdp.program", "xsk-redirect"}},
		{"too many queues", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"mode": "afxdp", "xdp": {"queues": 8}`)))
		}, []string{"xdp.queues", "at most 4"}},
		{"zero-copy required", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"mode": "afxdp", "xdp": {"zeroCopy": "required"}`)))
		}, []string{"xdp.zeroCopy"}},
		{"unknown mode", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"mode": "sriov"`)))
		}, []string{"mode", "Unsupported value"}},
		{"duplicate interface names", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "a", Device: vfNetdev}, {Request: "b", Device: vfNetdev2}}, fromClaim(config(`"interface": {"name": "net1"}`)))
		}, []string{`request "b"`, "interface.name", "net1"}},
		{"two pods", func() *resourceapi.ResourceClaim {
			c := testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}})
			c.Status.ReservedFor = append(c.Status.ReservedFor, c.Status.ReservedFor[0])
			c.Status.ReservedFor[1].UID = "other"
			return c
		}, []string{"claim default/c1", "exactly one pod"}},
		{"count 2, one device allocated", func() *resourceapi.ResourceClaim {
			c := testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}})
			c.Spec.Devices.Requests[0].Exactly.Count = 2
			return c
		}, []string{`request "nic"`, "allocated 1 devices for a request of count 2"}},
		{"admin access", func() *resourceapi.ResourceClaim {
			c := testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}})
			c.Status.Allocation.Devices.Results[0].AdminAccess = new(true)
			return c
		}, []string{`request "nic"`, "device " + vfNetdev, "adminAccess", "never the device"}},
		{"request not in the spec", func() *resourceapi.ResourceClaim {
			c := testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}})
			c.Spec.Devices.Requests[0].Name = "other"
			return c
		}, []string{`request "nic"`, "not found in the claim's spec"}},
		{"slots of the same environment names", func() *resourceapi.ResourceClaim {
			c := testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}, {Request: "nic", Device: vfNetdev2}, {Request: "nic-0", Device: vfVFIO}},
				fromClaim(config(`"mode": "vfio"`)))
			c.Spec.Devices.Requests = slices.Delete(c.Spec.Devices.Requests, 1, 2)
			c.Spec.Devices.Requests[0].Exactly.Count = 2
			return c
		}, []string{`request "nic-0"`, "environment variables (suffix NIC_0)", `request "nic"`}},
		{"vfio on a PF with VFs", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "pf", Device: pfDevice}}, fromClaim(config(`"mode": "vfio"`)))
		}, []string{`request "pf"`, "mode", "PF with 4 VFs"}},
		{"vfio without an IOMMU group", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "dpdk", Device: noIOMMU}}, fromClaim(config(`"mode": "vfio"`)))
		}, []string{`request "dpdk"`, "device " + noIOMMU, "mode", "no IOMMU group"}},
		{"memif settings on a VF", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"memif": {"uid": 1000}`)))
		}, []string{"memif", "not a memif endpoint"}},
		{"memif uid not a number", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "m", Device: memifSlave}}, fromClaim(config(`"memif": {"uid": "builder"}`)))
		}, []string{`request "m"`, "memif.uid", "string"}},
		{"memif uid out of range", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "m", Device: memifSlave}}, fromClaim(config(`"memif": {"uid": -1}`)))
		}, []string{`request "m"`, "memif.uid", "between 0 and"}},
		{"device gone", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{Request: "nic", Device: "pci-0000-99-00-0"}})
		}, []string{"device pci-0000-99-00-0", "not (or no longer) on this node"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := planClaim(t, tt.claim())
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestPlanDelegate: a device in mode delegate keeps its PCI address and
// netdev for the NetworkAttachmentDefinition's plugin, its resource name
// (the config's over the device's), and has its device-info where the
// device plugins write theirs; the containers get PCIDEVICE_<resource>.
// Without --npwg, or with anything of the device's configuration set,
// the claim is refused.
func TestPlanDelegate(t *testing.T) {
	paths := func(dir string) planPaths {
		return planPaths{claimDir: "/state/claims/uid-d", cdiSpec: "/cdi/spec.json", deviceInfoDir: dir}
	}
	inv := inventoryMap(testInventory(t))
	claim := testClaim("d", []alloc{{Request: "vf", Device: vfNetdev}, {Request: "vf2", Device: vfVFIO}}, fromClass(config(`"mode": "delegate", "resourceName": "intel.com/sriov_netdevice"`)))
	c, err := plan(claim, inv, testNode, paths("/run/devinfo"))
	if err != nil {
		t.Fatal(err)
	}
	d := c.Devices[0]
	if d.Mode != v1alpha1.ModeDelegate || d.ResourceName != "intel.com/sriov_netdevice" || d.PCIAddress != "0000:3b:01.0" || d.Host == nil || d.Host.Name != "ens1f0v0" ||
		d.Pod != nil || d.VF != nil || d.VFIO != nil {
		t.Errorf("delegated device = %+v", d)
	}
	if want := "/run/devinfo/dp/intel.com-sriov_netdevice-0000:3b:01.0-device.json"; d.DeviceInfoFile != want {
		t.Errorf("device-info file %q, want %q", d.DeviceInfoFile, want)
	}
	spec, err := cdiSpec(c)
	if err != nil {
		t.Fatal(err)
	}
	want := "PCIDEVICE_INTEL_COM_SRIOV_NETDEVICE=0000:3b:01.0," + c.Devices[1].PCIAddress
	for _, dev := range spec.Devices {
		if !slices.Contains(dev.ContainerEdits.Env, want) {
			t.Errorf("CDI device %s: env %v lacks %s", dev.Name, dev.ContainerEdits.Env, want)
		}
	}

	// The device's own resource name when the config gives none.
	c, err = plan(testClaim("d", []alloc{{Request: "vf", Device: vfNetdev}}, fromClaim(config(`"mode": "delegate"`))), inv, testNode, paths("/run/devinfo"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Devices[0].ResourceName; got != "fastpath.dev/sriov-vf" {
		t.Errorf("resource name %q, want the device's fastpath.dev/sriov-vf", got)
	}

	for _, tc := range []struct {
		name, config, dir string
		want              []string
	}{
		{"without --npwg", `"mode": "delegate"`, "", []string{"claim default/d", `request "vf"`, "fastpathd run --npwg is off"}},
		{"interface", `"mode": "delegate", "interface": {"name": "net1"}`, "/run/devinfo", []string{"interface: Forbidden", "CNI plugin"}},
		{"vf", `"mode": "delegate", "vf": {"vlan": 10}`, "/run/devinfo", []string{"vf: Forbidden", "sriov-cni"}},
		{"ipam", `"mode": "delegate", "ipam": {"pool": "fast"}`, "/run/devinfo", []string{"ipam: Forbidden"}},
		{"resource name elsewhere", `"mode": "netdev", "resourceName": "intel.com/x"`, "/run/devinfo", []string{"resourceName: Forbidden: only for mode delegate"}},
		{"bad resource name", `"mode": "delegate", "resourceName": "sriov"`, "/run/devinfo", []string{"resourceName: Invalid value", "DOMAIN/NAME"}},
	} {
		_, err := plan(testClaim("d", []alloc{{Request: "vf", Device: vfNetdev}}, fromClaim(config(tc.config))), inv, testNode, paths(tc.dir))
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v, want it to say %q", tc.name, err, w)
			}
		}
	}
}

// A class pins mode and ipam.pool: a claim may not choose another mode,
// another pool, or set pinned itself; the class is named, that of a
// subrequest too.
func TestPlanPinned(t *testing.T) {
	class := fromClass(config(`"mode": "netdev", "pinned": ["mode", "ipam.pool"]`))
	for name, tc := range map[string]struct {
		claim *resourceapi.ResourceClaim
		want  string
	}{
		"another mode": {testClaim("mode", []alloc{{Request: "nic", Device: vfNetdev}}, class, fromClaim(config(`"mode": "vfio"`))),
			`claim default/mode, request "nic", device ` + vfNetdev + `: config[1][FromClaim].parameters.mode: Forbidden: DeviceClass netdev.fastpath.dev pins mode to "netdev"`},
		"a pool the class leaves unset": {testClaim("pool", []alloc{{Request: "nic", Device: vfNetdev}}, class, fromClaim(config(`"ipam": {"pool": "fast"}`))),
			`config[1][FromClaim].parameters.ipam.pool: Forbidden: DeviceClass netdev.fastpath.dev pins ipam.pool to unset`},
		"pinned in the claim": {testClaim("pins", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"pinned": ["mode"]`))),
			`claim default/pins, request "nic", device ` + vfNetdev + `: config[0][FromClaim].parameters.pinned: Forbidden: only a DeviceClass's config pins fields`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := planClaim(t, tc.claim)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want %q", err, tc.want)
			}
		})
	}

	sub := testClaim("sub", []alloc{{Request: "nic/vf", Device: vfNetdev}}, class, fromClaim(config(`"mode": "afxdp"`)))
	sub.Spec.Devices.Requests[0] = resourceapi.DeviceRequest{Name: "nic", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "vf", DeviceClassName: "vf.example.com", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}}
	if _, err := planClaim(t, sub); err == nil || !strings.Contains(err.Error(), "DeviceClass vf.example.com pins mode") {
		t.Errorf("subrequest: %v, want its class named", err)
	}

	same := testClaim("same", []alloc{{Request: "nic", Device: vfNetdev}}, class, fromClaim(config(`"mode": "netdev", "interface": {"name": "fast0"}`)))
	c, err := planClaim(t, same)
	if err != nil || c.Devices[0].Mode != v1alpha1.ModeNetdev || c.Devices[0].Pod.Name != "fast0" {
		t.Errorf("the class's own values: %+v, %v", c, err)
	}
}

// The claim the scheduler makes for a pod's extended resources: a request
// per container of as many devices as the container asks for, named after
// the container, no config of the pod's. Each device gets the class's
// config and the name net1, net2, ... in the allocation's order, and a
// slot of its own (request.index); the same claim without the scheduler's
// annotation is a request of count 2 of the pod's own: its devices are
// named after the request, with their index.
func TestPlanExtendedResources(t *testing.T) {
	extended := func() *resourceapi.ResourceClaim {
		c := testClaim("pod-extended-resources-x7k2p", []alloc{{Request: "container-0-request-0", Device: vfNetdev}},
			fromClass(config(`"mode": "netdev"`)))
		c.Spec.Devices.Requests[0].Exactly.Count = 2
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "container-0-request-0", Driver: devices.DriverName, Pool: testNode, Device: vfNetdev2})
		return c
	}
	c := extended()
	c.Annotations = map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"}
	st, err := planClaim(t, c)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range st.Devices {
		if d.Pod != nil {
			names = append(names, d.Pod.Name)
		}
	}
	if !slices.Equal(names, []string{"net1", "net2"}) {
		t.Errorf("interfaces %v, want net1 and net2", names)
	}
	if s0, s1 := st.Devices[0].SlotName(), st.Devices[1].SlotName(); s0 != "container-0-request-0.0" || s1 != "container-0-request-0.1" {
		t.Errorf("slots %s and %s", s0, s1)
	}
	// The request's name with an index is too long for an interface.
	if _, err := planClaim(t, extended()); err == nil || !strings.Contains(err.Error(), `"container-0-request-00": must be at most 15 characters`) {
		t.Errorf("two devices for one request of a claim of the pod's own: %v, want its names refused", err)
	}
}

// TestPlanMultiNIC: the interface's rules, VRF, neighbours and sysctls go
// into the record of its pod interface, its ethtool settings and sizes
// into the device's offloads (what the device has of them is read at
// Prepare); a sysctl the node does not allow is refused naming it, and
// allowed once the operator adds it.
func TestPlanMultiNIC(t *testing.T) {
	claim := testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"interface": {"name": "nic0", "addresses": ["10.80.0.2/24"],
		"routes": [{"destination": "10.80.0.0/24", "source": "10.80.0.2", "scope": "link", "table": 100}],
		"rules": [{"priority": 100, "from": "10.80.0.2/32", "table": 100}], "vrf": {"name": "blue", "table": 200},
		"neighbors": [{"address": "10.80.0.9", "mac": "02:00:00:00:00:09"}], "sysctls": {"ipv4.arp_ignore": "1"},
		"ethtool": {"features": {"gro": true}}, "gsoMaxSize": 131072}`)))
	c, err := planClaim(t, claim)
	if err != nil {
		t.Fatal(err)
	}
	d := c.Devices[0]
	if p := d.Pod; p == nil || len(p.Rules) != 1 || p.Rules[0].Table != 100 || p.VRF == nil || p.VRF.Name != "blue" || len(p.Neighbors) != 1 ||
		p.Sysctls["ipv4.arp_ignore"] != "1" || p.Routes[0].Source != "10.80.0.2" || p.Routes[0].Scope != "link" {
		t.Errorf("pod interface %+v", d.Pod)
	}
	if o := d.Offloads; o == nil || !o.Set.Features["gro"] || o.Set.GSOMaxSize != 131072 || o.Before != nil {
		t.Errorf("offloads %+v, want gro and the GSO size, nothing read yet", d.Offloads)
	}

	odd := testClaim("c1", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"interface": {"sysctls": {"ipv4.route_localnet": "1"}}`)))
	if _, err := planClaim(t, odd); err == nil || !strings.Contains(err.Error(), "interface.sysctls[ipv4.route_localnet]: Forbidden: not allowed on this node") {
		t.Errorf("a sysctl the node does not allow: %v", err)
	}
	_, err = plan(odd, inventoryMap(testInventory(t)), testNode, planPaths{claimDir: "/state/claims/uid-c1", cdiSpec: "/cdi/spec.json",
		sysctls: append(slices.Clone(v1alpha1.DefaultSysctls), "ipv4.route_localnet")})
	if err != nil {
		t.Errorf("allowed by the operator: %v", err)
	}
}

// TestPlanResourceEnv: a VF claimed for DPDK (mode vfio) whose resource
// name is the operator's gives the containers PCIDEVICE_<resource>, as the
// SR-IOV device plugin did, beside PCIDEVICE_FASTPATH_DEV_<request>; one
// with fastpath's default name (fastpath.dev/sriov-vf), whose variable
// would be a request's, gets none.
func TestPlanResourceEnv(t *testing.T) {
	inv := inventoryMap(testInventory(t))
	for name, c := range map[string]struct {
		resourceName string
		want         string
	}{
		"the operator's": {"openshift.io/intel_dpdk", "PCIDEVICE_OPENSHIFT_IO_INTEL_DPDK=0000:3b:01.2"},
		"the default":    {"fastpath.dev/sriov-vf", ""},
	} {
		dev := inv[vfVFIO]
		dev.ResourceName = c.resourceName
		inv := maps.Clone(inv)
		inv[vfVFIO] = dev
		claim := testClaim("dpdk", []alloc{{Request: "sriov-vf", Device: vfVFIO}}, fromClaim(config(`"mode": "vfio"`)))
		cl, err := plan(claim, inv, testNode, planPaths{claimDir: "/state/claims/uid-dpdk", cdiSpec: "/cdi/spec.json"})
		if err != nil {
			t.Fatal(err)
		}
		spec, err := cdiSpec(cl)
		if err != nil {
			t.Fatal(err)
		}
		env := spec.Devices[0].ContainerEdits.Env
		var resourceEnv []string
		for _, e := range env {
			if strings.HasPrefix(e, "PCIDEVICE_") && !strings.HasPrefix(e, "PCIDEVICE_FASTPATH_DEV_SRIOV_VF=") {
				resourceEnv = append(resourceEnv, e)
			}
		}
		if !slices.Contains(env, "PCIDEVICE_FASTPATH_DEV_SRIOV_VF=0000:3b:01.2") || strings.Join(resourceEnv, " ") != c.want {
			t.Errorf("%s resource name: env %v, want PCIDEVICE_FASTPATH_DEV_SRIOV_VF and %q", name, env, c.want)
		}
	}
}
