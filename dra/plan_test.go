package dra

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

func planClaim(t *testing.T, claim *resourceapi.ResourceClaim, cp *Checkpoint) (*ClaimState, error) {
	t.Helper()
	if cp == nil {
		cp = newCheckpoint()
	}
	return plan(claim, cp, inventoryMap(testInventory(t)), testNode, "/state/claims/"+string(claim.UID), "/cdi/spec.json")
}

func TestPlanValid(t *testing.T) {
	claim := testClaim("good", []alloc{{"nic", vfNetdev}, {"dpdk", vfVFIO}},
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
	st, err := planClaim(t, claim, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.PodUID != "pod-uid-good" || len(st.Devices) != 2 {
		t.Fatalf("state = %+v", st)
	}
	nic, dpdk := st.Devices[0], st.Devices[1]
	if nic.Config.Mode != ModeNetdev || nic.Config.Interface.Name != "net1" || nic.Config.Interface.MTU != 9000 || *nic.Config.VF.VLAN != 100 {
		t.Errorf("nic config = %+v / %+v", nic.Config, nic.Config.Interface)
	}
	if nic.HostIfName != "ens1f0v0" || nic.PCIAddress != "0000:3b:01.0" || nic.PFPCIAddress != "0000:3b:00.0" {
		t.Errorf("nic = %+v", nic)
	}
	if nic.CDIDeviceID != "fastpath.dev/net=uid-good-nic" || nic.DeviceInfoFile != "/state/claims/uid-good/nic-device.json" {
		t.Errorf("nic CDI %q, device-info %q", nic.CDIDeviceID, nic.DeviceInfoFile)
	}
	if dpdk.Config.Mode != ModeVFIO || dpdk.Config.Interface != nil {
		t.Errorf("dpdk config = %+v", dpdk.Config)
	}
	// Deterministic: the same input gives the same plan.
	again, err := planClaim(t, claim, nil)
	if err != nil || again.Devices[0].Config.Interface.Name != "net1" || len(again.Devices) != 2 {
		t.Errorf("second plan differs: %+v, %v", again, err)
	}
}

func TestPlanDefaults(t *testing.T) {
	st, err := planClaim(t, testClaim("plain", []alloc{{"eth-fast", vfNetdev}}), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := st.Devices[0].Config
	if c.Mode != ModeNetdev || c.Interface == nil || c.Interface.Name != "eth-fast" {
		t.Errorf("defaulted config = %+v", c)
	}
	// afxdp defaults.
	var xcfg InterfaceConfig
	xcfg.Mode = ModeAFXDP
	xcfg.setDefaults("xsk", inventoryMap(testInventory(t))[vfNetdev])
	if x := xcfg.XDP; x == nil || x.Program != "xsk-redirect" || x.AttachMode != "native" || x.Queues != 1 || x.ZeroCopy != "preferred" {
		t.Errorf("afxdp defaults = %+v", x)
	}
}

func TestPlanClaimWins(t *testing.T) {
	claim := testClaim("merge", []alloc{{"nic", vfNetdev}},
		fromClaim(config(`"interface": {"mtu": 1400}`)),
		fromClass(config(`"interface": {"name": "cls0", "mtu": 9000}`)),
	)
	st, err := planClaim(t, claim, nil)
	if err != nil {
		t.Fatal(err)
	}
	if i := st.Devices[0].Config.Interface; i.MTU != 1400 || i.Name != "cls0" {
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
			return testClaim("c1", []alloc{{"nic", vfNetdev}}, fromClaim(config(`"interface": {"colour": "red"}`)))
		}, []string{"claim default/c1", `request "nic"`, "device " + vfNetdev, "config[0][FromClaim].parameters", "config[0][FromClaim].parameters.interface.colour: Forbidden: unknown field"}},
		{"duplicate field", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"nic", vfNetdev}}, fromClaim(config(`"mode": "netdev", "mode": "vfio"`)))
		}, []string{"parameters.mode: Forbidden: duplicate field"}},
		{"wrong kind", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"nic", vfNetdev}}, fromClaim(`{"apiVersion": "v1", "kind": "ConfigMap"}`))
		}, []string{"apiVersion", "fastpath.dev/v1alpha1"}},
		{"MTU above the device's", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"nic", vfNetdev}}, fromClaim(config(`"interface": {"mtu": 9800}`)))
		}, []string{"interface.mtu", "between 68 and 9702"}},
		{"bad interface name", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"nic", vfNetdev}}, fromClaim(config(`"interface": {"name": "much-too-long-name0"}`)))
		}, []string{"interface.name", "at most 15"}},
		{"default name too long", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"a-very-long-request", vfNetdev}})
		}, []string{"interface.name"}},
		{"slash in name", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"nic", vfNetdev}}, fromClaim(config(`"interface": {"name": "a/b"}`)))
		}, []string{"interface.name"}},
		{"multicast MAC", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"nic", vfNetdev}}, fromClaim(config(`"interface": {"mac": "01:00:5e:00:00:01"}`)))
		}, []string{"interface.mac", "unicast"}},
		{"non-canonical CIDR", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"nic", vfNetdev}}, fromClaim(config(`"interface": {"addresses": ["FD00::2/64"]}`)))
		}, []string{"interface.addresses[0]", "canonical: fd00::2/64"}},
		{"address without prefix", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"nic", vfNetdev}}, fromClaim(config(`"interface": {"addresses": ["10.0.0.1"]}`)))
		}, []string{"interface.addresses[0]", "CIDR"}},
		{"VLAN out of range", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"nic", vfNetdev}}, fromClaim(config(`"vf": {"vlan": 4095}`)))
		}, []string{"vf.vlan", "4094"}},
		{"QoS out of range", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"nic", vfNetdev}}, fromClaim(config(`"vf": {"vlan": 10, "qos": 8}`)))
		}, []string{"vf.qos"}},
		{"VF settings on a PF", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"nic", pfDevice}}, fromClaim(config(`"vf": {"vlan": 10}`)))
		}, []string{"vf: Forbidden", "not an SR-IOV VF"}},
		{"netdev mode without netdev", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"nic", vfVFIO}})
		}, []string{"mode", "no kernel netdev", "vfio-pci"}},
		{"afxdp without XDP", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"nic", vfNetdev2}}, fromClaim(config(`"mode": "afxdp"`)))
		}, []string{"mode", "XDP"}},
		{"unknown XDP program", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"nic", vfNetdev}}, fromClaim(config(`"mode": "afxdp", "xdp": {"program": "my-prog"}`)))
		}, []string{"xdp.program", "xsk-redirect"}},
		{"too many queues", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"nic", vfNetdev}}, fromClaim(config(`"mode": "afxdp", "xdp": {"queues": 8}`)))
		}, []string{"xdp.queues", "at most 4"}},
		{"zero-copy required", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"nic", vfNetdev}}, fromClaim(config(`"mode": "afxdp", "xdp": {"zeroCopy": "required"}`)))
		}, []string{"xdp.zeroCopy"}},
		{"unknown mode", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"nic", vfNetdev}}, fromClaim(config(`"mode": "sriov"`)))
		}, []string{"mode", "Unsupported value"}},
		{"duplicate interface names", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"a", vfNetdev}, {"b", vfNetdev2}}, fromClaim(config(`"interface": {"name": "net1"}`)))
		}, []string{`request "b"`, "interface.name", "net1"}},
		{"two pods", func() *resourceapi.ResourceClaim {
			c := testClaim("c1", []alloc{{"nic", vfNetdev}})
			c.Status.ReservedFor = append(c.Status.ReservedFor, c.Status.ReservedFor[0])
			c.Status.ReservedFor[1].UID = "other"
			return c
		}, []string{"claim default/c1", "exactly one pod"}},
		{"count 2", func() *resourceapi.ResourceClaim {
			c := testClaim("c1", []alloc{{"nic", vfNetdev}})
			c.Spec.Devices.Requests[0].Exactly.Count = 2
			return c
		}, []string{`request "nic"`, "exactly one device"}},
		{"all devices", func() *resourceapi.ResourceClaim {
			c := testClaim("c1", []alloc{{"nic", vfNetdev}})
			c.Spec.Devices.Requests[0].Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
			return c
		}, []string{"allocationMode All"}},
		{"vfio on a PF with VFs", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"pf", pfDevice}}, fromClaim(config(`"mode": "vfio"`)))
		}, []string{`request "pf"`, "mode", "PF with 4 VFs"}},
		{"vfio without an IOMMU group", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"dpdk", noIOMMU}}, fromClaim(config(`"mode": "vfio"`)))
		}, []string{`request "dpdk"`, "device " + noIOMMU, "mode", "no IOMMU group"}},
		{"memif settings on a VF", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"nic", vfNetdev}}, fromClaim(config(`"memif": {"uid": 1000}`)))
		}, []string{"memif", "not a memif endpoint"}},
		{"memif uid not a number", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"m", memifSlave}}, fromClaim(config(`"memif": {"uid": "builder"}`)))
		}, []string{`request "m"`, "memif.uid", "string"}},
		{"memif uid out of range", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"m", memifSlave}}, fromClaim(config(`"memif": {"uid": -1}`)))
		}, []string{`request "m"`, "memif.uid", "between 0 and"}},
		{"device gone", func() *resourceapi.ResourceClaim {
			return testClaim("c1", []alloc{{"nic", "pci-0000-99-00-0"}})
		}, []string{"device pci-0000-99-00-0", "not (or no longer) on this node"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := planClaim(t, tt.claim(), nil)
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

func TestPlanNameTakenByOtherClaimOfPod(t *testing.T) {
	cp := newCheckpoint()
	first, err := planClaim(t, testClaim("first", []alloc{{"net1", vfNetdev}}), cp)
	if err != nil {
		t.Fatal(err)
	}
	cp.Claims[first.UID] = first
	second := testClaim("second", []alloc{{"net1", vfNetdev2}})
	second.Status.ReservedFor[0].UID = first.PodUID
	_, err = planClaim(t, second, cp)
	if err == nil || !strings.Contains(err.Error(), "already used by claim default/first") {
		t.Errorf("error = %v, want the name clash with the pod's other claim", err)
	}
}
