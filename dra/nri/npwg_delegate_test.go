package nri

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/npwg"
)

// delegateClaim is a prepared fastpath.dev claim of the pod holding
// devices in mode delegate.
func delegateClaim(devs ...claims.Device) claims.Claim {
	return claims.Claim{Driver: claims.DriverFastpath, UID: "uid-vf", Namespace: "default", Name: "vf", Prepared: true,
		Pod: claims.Pod{UID: npwgPodUID, Name: "web"}, Devices: devs}
}

func delegated(request, device, resource, pci, netdev string) claims.Device {
	d := claims.Device{Request: request, Pool: "node", Device: device, Kind: "sriov-vf", Mode: v1alpha1.ModeDelegate,
		ResourceName: resource, PCIAddress: pci, CDIDevice: "fastpath.dev/net=" + device}
	if pci != "" {
		d.PFPCIAddress = "0000:3b:00.0"
	}
	if netdev != "" {
		d.Host = &claims.HostNetdev{Name: netdev}
	}
	return d
}

// TestNPWGDelegatedDevice: a NetworkAttachmentDefinition with a resource
// name takes a device of that resource from the pod's claim in mode
// delegate, one per attachment: its plugins get the PCI address as
// deviceID and pciBusID (and the deviceID capability), a device without
// one its netdev as "device"; the network-status has its device-info.
// Asking for more devices than the claims hold, or for a resource they do
// not hold, fails the pod and names the resource.
func TestNPWGDelegatedDevice(t *testing.T) {
	claim := delegateClaim(
		delegated("vf0", "pci-0000-3b-02-0", "intel.com/sriov", "0000:3b:02.0", "ens1f0v0"),
		delegated("vf1", "netdev-fpv1", "intel.com/sriov", "", "fpv1"),
		delegated("other", "pci-0000-3b-02-2", "example.com/other", "0000:3b:02.2", ""))
	r := newNPWGRig(t, claim)
	sriov := `{"cniVersion":"1.0.0","name":"%s","plugins":[{"type":"macvlan","capabilities":{"deviceID":true,"ips":true},"ipam":{"type":"static"}},{"type":"static"}]}`
	nads := r.plugin.opts.NPWG.NADs.(fakeNADs)
	for _, name := range []string{"sriov-a", "sriov-b", "sriov-c"} {
		n := nad("default", name, fmt.Sprintf(sriov, name))
		n.Annotations = map[string]string{npwg.ResourceNameAnnot: "intel.com/sriov"}
		nads["default/"+name] = n
	}
	missing := nad("default", "missing", fmt.Sprintf(sriov, "missing"))
	missing.Annotations = map[string]string{npwg.ResourceNameAnnot: "example.com/absent"}
	nads["default/missing"] = missing

	pod := npwgPod(`sriov-a,sriov-b`)
	if err := r.plugin.AttachPod(r.ctx, pod); err != nil {
		t.Fatal(err)
	}
	first, second := r.cni.added["net1"], r.cni.added["net2"]
	var conf struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(first.Conflist, &conf); err != nil {
		t.Fatal(err)
	}
	for i, p := range conf.Plugins {
		if p["deviceID"] != "0000:3b:02.0" || p["pciBusID"] != "0000:3b:02.0" {
			t.Errorf("plugin %d of the first network: deviceID %v, pciBusID %v, want the first VF's PCI address", i, p["deviceID"], p["pciBusID"])
		}
	}
	if got := first.CapabilityArgs[npwg.CapabilityDeviceID]; got != "0000:3b:02.0" {
		t.Errorf("capability deviceID of the first network = %v", got)
	}
	conf.Plugins = nil
	if err := json.Unmarshal(second.Conflist, &conf); err != nil {
		t.Fatal(err)
	}
	if p := conf.Plugins[0]; p["device"] != "fpv1" || p["deviceID"] != nil {
		t.Errorf("the second network's plugin got %v: want the second device (no PCI address) as device fpv1", p)
	}
	if _, ok := second.CapabilityArgs[npwg.CapabilityDeviceID]; ok {
		t.Errorf("the second network got capability deviceID %v without a PCI address", second.CapabilityArgs)
	}
	rec, _ := r.store.Get(npwgKey(npwgPodUID))
	if d := rec.Networks[0].Delegated; d == nil || d.Request != "vf0" || d.Claim != claim.UID {
		t.Errorf("the record of the first network names delegated device %+v, want request vf0 of the claim", d)
	}
	r.plugin.reports.Wait()
	sts := r.patcher.entries[len(r.patcher.entries)-1]
	if info := sts[1].DeviceInfo; info == nil || info.Type != "pci" || info.Pci.PciAddress != "0000:3b:02.0" || info.Pci.PfPciAddress != "0000:3b:00.0" {
		t.Errorf("network-status of the first network: device-info %+v, want the VF's", info)
	}
	if sts[2].DeviceInfo != nil {
		t.Errorf("network-status of the second network: device-info %+v for a device without PCI address", sts[2].DeviceInfo)
	}
	if err := r.plugin.DetachPod(r.ctx, pod); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct{ networks, want string }{
		{"sriov-a,sriov-b,sriov-c", "earlier networks of the pod took them all"},
		{"missing", "example.com/absent: none of the pod's claims holds one in mode delegate"},
	} {
		err := r.plugin.AttachPod(r.ctx, npwgPod(tc.networks))
		if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), npwg.ResourceNameAnnot) {
			t.Errorf("%s: error %v, want ErrNoDevice saying %q and naming the annotation", tc.networks, err, tc.want)
		}
		if names := r.cni.addedNames(); len(names) != 0 {
			t.Errorf("%s: a refused pod left networks added: %v", tc.networks, names)
		}
		if _, ok := r.store.Get(npwgKey(npwgPodUID)); ok {
			t.Errorf("%s: a refused pod left its NPWG record", tc.networks)
		}
	}
}

// A pod's fastpath devices in its namespace are in its network-status,
// named after their claim, with the addresses, MAC and MTU the claim gave
// them (the device's own MAC where it gave none) and their device-info;
// after the cluster default network, before nothing else.
func TestNetworkStatusOfDevices(t *testing.T) {
	dev := claims.Device{Request: "nic", Pool: "node", Device: "pci-0000-3b-02-0", Kind: "sriov-vf", Mode: v1alpha1.ModeNetdev,
		PCIAddress: "0000:3b:02.0", PFPCIAddress: "0000:3b:00.0", Host: &claims.HostNetdev{Name: "ens1f0v0", MTU: 1500, MAC: "02:00:00:00:aa:01"},
		Pod:      &claims.PodInterface{Name: "fast0", MTU: 9000, Addresses: []string{"10.7.0.2/24", "fd00:7::2/64"}},
		Attached: &claims.Attachment{SandboxID: "sandbox-1", NetNS: "/var/run/netns/web"}}
	notYet := dev
	notYet.Request, notYet.Device, notYet.Attached, notYet.Pod = "later", "pci-0000-3b-02-1", nil, &claims.PodInterface{Name: "fast1"}
	c := claims.Claim{Driver: claims.DriverFastpath, UID: "uid-dev", Namespace: "default", Name: "fast", Prepared: true,
		Pod: claims.Pod{UID: npwgPodUID, Name: "web"}, Devices: []claims.Device{dev, notYet}}
	r := newNPWGRig(t, c)
	sts, err := r.plugin.NetworkStatus(r.ctx, npwgPod(""))
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 2 || sts[0].Name != "default/cluster-network" {
		t.Fatalf("network-status %+v: want the default network's entry and the attached device's", sts)
	}
	st := sts[1]
	if st.Name != "default/fast" || st.Interface != "fast0" || st.Mac != "02:00:00:00:aa:01" || st.Mtu != 9000 ||
		fmt.Sprint(st.IPs) != "[10.7.0.2 fd00:7::2]" || st.DeviceInfo == nil || st.DeviceInfo.Pci.PciAddress != "0000:3b:02.0" {
		t.Errorf("the device's entry %+v (device-info %+v)", st, st.DeviceInfo)
	}
}
