//go:build sriov

package dra

// The kubelet-level tests on a real SR-IOV NIC, QEMU's Intel 82576 (igb PF,
// igbvf VFs) in the test VM (make e2e-sriov): the driver as the daemon
// builds it (VF settings through the PF with netlink, vfio-pci binding on
// this node's sysfs and /dev), with the inventory of real discovery, behind
// the fake kubelet over the real gRPC. VFs 0 and 1 take VF settings, VF 3
// goes to vfio-pci.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/test/sriovtest"
)

// startSRIOVDriver starts the driver on the VM's igb PF and its VFs, as
// discovery finds them.
func startSRIOVDriver(t *testing.T, objects ...*fakeObject) (*testDriver, *fakeKubelet, context.Context) {
	t.Helper()
	return startDriver(t, dataplane.NetlinkPF{}, dataplane.PCIBinder{SysfsRoot: "/", DevRoot: "/"}, discoverSRIOV(t), objects...)
}

// discoverSRIOV is the inventory discovery finds on this node.
func discoverSRIOV(t *testing.T) devices.Inventory {
	t.Helper()
	disc, err := devices.New(devices.Options{})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := disc.Discover(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

// kernelVF is a VF's settings as the kernel reports them in its PF's
// IFLA_VFINFO_LIST, read here without the driver's reader.
type kernelVF struct {
	MAC                  string
	VLAN, QoS            int
	SpoofChk, Trust      bool
	MinTxRate, MaxTxRate uint32
	LinkState            uint32
}

func readVF(t *testing.T, pf string, id int) kernelVF {
	t.Helper()
	l, err := netlink.LinkByName(pf)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range l.Attrs().Vfs {
		if v.ID == id {
			return kernelVF{MAC: v.Mac.String(), VLAN: v.Vlan, QoS: v.Qos, SpoofChk: v.Spoofchk, Trust: v.Trust != 0,
				MinTxRate: v.MinTxRate, MaxTxRate: v.MaxTxRate, LinkState: v.LinkState}
		}
	}
	t.Fatalf("PF %s reports no VF %d", pf, id)
	return kernelVF{}
}

// netdevMAC is the MAC of a PCI function's netdev.
func netdevMAC(t *testing.T, addr string) string {
	t.Helper()
	name := sriovtest.Netdev(addr)
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatalf("the netdev of %s: %q, %v", addr, name, err)
	}
	return l.Attrs().HardwareAddr.String()
}

// TestSRIOVKubeletVFSettings: Prepare makes a claim's VF settings through
// the real PF, and the kernel reports them; Unprepare puts back exactly
// what the VFs had, their netdevs' MACs included. A setting igb refuses (a
// VF link state: it has no ndo for it) fails the claim with the request and
// the setting named, and leaves both VFs as they were and nothing of the
// claim behind.
func TestSRIOVKubeletVFSettings(t *testing.T) {
	pf := sriovtest.RequirePF(t)
	vfs := pf.VFsReady(t, 4)
	a, b := vfs[0], vfs[1]
	t.Cleanup(func() { pf.ResetVF(t, a); pf.ResetVF(t, b) })
	wasA, wasB := readVF(t, pf.Name, a.ID), readVF(t, pf.Name, b.ID)
	macA, macB := netdevMAC(t, a.Address), netdevMAC(t, b.Address)
	const mac = "02:fa:57:00:02:01"

	claim := testClaim("vf", []alloc{{Request: "a", Device: devices.PCIDeviceName(a.Address)}, {Request: "b", Device: devices.PCIDeviceName(b.Address)}},
		fromClaimFor("a", config(`"interface": {"name": "net1", "mac": "`+mac+`"}, "vf": {"vlan": 10, "qos": 1, "spoofChk": false}`)),
		fromClaimFor("b", config(`"interface": {"name": "net2"}, "vf": {"vlan": 20, "trust": true, "maxTxRateMbps": 100}`)))
	refused := testClaim("refused", []alloc{{Request: "a", Device: devices.PCIDeviceName(a.Address)}, {Request: "b", Device: devices.PCIDeviceName(b.Address)}},
		fromClaimFor("a", config(`"interface": {"name": "net1", "mac": "`+mac+`"}, "vf": {"vlan": 30}`)),
		fromClaimFor("b", config(`"interface": {"name": "net2"}, "vf": {"vlan": 40, "trust": true, "linkState": "enable"}`)))
	d, k, ctx := startSRIOVDriver(t, &fakeObject{claim}, &fakeObject{refused})

	if e := prepare(t, ctx, k, claim); e != "" {
		t.Fatalf("prepare: %s", e)
	}
	wantA := wasA
	wantA.MAC, wantA.VLAN, wantA.QoS, wantA.SpoofChk = mac, 10, 1, false
	wantB := wasB
	wantB.VLAN, wantB.Trust, wantB.MaxTxRate = 20, true, 100
	if got := readVF(t, pf.Name, a.ID); got != wantA {
		t.Errorf("after Prepare the kernel reports VF %d as %+v, want %+v", a.ID, got, wantA)
	}
	if got := readVF(t, pf.Name, b.ID); got != wantB {
		t.Errorf("after Prepare the kernel reports VF %d as %+v, want %+v", b.ID, got, wantB)
	}
	rec, ok := onDisk(t, d).Get(claims.Key{Driver: claims.DriverFastpath, UID: claim.UID})
	if !ok || rec.Devices[0].VF == nil || rec.Devices[0].VF.Before == nil || !strings.EqualFold(rec.Devices[0].VF.Before.MAC, wasA.MAC) {
		t.Errorf("the checkpoint lacks VF %d's state from before (MAC %s): %+v", a.ID, wasA.MAC, rec)
	}

	unprepare(t, ctx, k, claim)
	if got := readVF(t, pf.Name, a.ID); got != wasA {
		t.Errorf("after Unprepare the kernel reports VF %d as %+v, want %+v as before", a.ID, got, wasA)
	}
	if got := readVF(t, pf.Name, b.ID); got != wasB {
		t.Errorf("after Unprepare the kernel reports VF %d as %+v, want %+v as before", b.ID, got, wasB)
	}
	if got := netdevMAC(t, a.Address); got != macA {
		t.Errorf("after Unprepare VF %d's netdev has MAC %s, want %s as before", a.ID, got, macA)
	}
	if got := netdevMAC(t, b.Address); got != macB {
		t.Errorf("after Unprepare VF %d's netdev has MAC %s, want %s as before", b.ID, got, macB)
	}
	assertNothingLeft(t, d)

	msg := prepare(t, ctx, k, refused)
	t.Log(msg)
	for _, want := range []string{"claim default/refused", `request "b"`, fmt.Sprintf("set link state of VF %d on PF %s", b.ID, pf.Name), "not supported"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %q", msg, want)
		}
	}
	if got := readVF(t, pf.Name, a.ID); got != wasA {
		t.Errorf("after the refusal the kernel reports VF %d as %+v, want %+v as before", a.ID, got, wasA)
	}
	if got := readVF(t, pf.Name, b.ID); got != wasB {
		t.Errorf("after the refusal the kernel reports VF %d as %+v, want %+v as before", b.ID, got, wasB)
	}
	if got := netdevMAC(t, a.Address); got != macA {
		t.Errorf("after the refusal VF %d's netdev has MAC %s, want %s as before", a.ID, got, macA)
	}
	assertNothingLeft(t, d)
}

// TestSRIOVKubeletVFIO: a claim in vfio mode gives a real VF to vfio-pci
// with its VF settings made; the CDI spec Prepare writes names the VFIO
// device nodes of the VF's real IOMMU group, they exist, and the group
// opens as DPDK opens it. Unprepare gives the VF back to igbvf with a
// netdev, its settings as before (but for its MAC: see below).
func TestSRIOVKubeletVFIO(t *testing.T) {
	pf := sriovtest.RequirePF(t)
	vf := pf.VFsReady(t, 4)[3]
	sriovtest.Modprobe(t, "vfio-pci")
	if vf.Group < 0 {
		t.Fatalf("VF %s has no IOMMU group", vf.Address)
	}
	was := readVF(t, pf.Name, vf.ID)
	claim := testClaim("dpdk", []alloc{{Request: "dpdk", Device: devices.PCIDeviceName(vf.Address)}}, fromClaim(config(`"mode": "vfio", "vf": {"vlan": 50}`)))
	d, k, ctx := startSRIOVDriver(t, &fakeObject{claim})
	if e := prepare(t, ctx, k, claim); e != "" {
		t.Fatalf("prepare: %s", e)
	}
	t.Cleanup(func() {
		if sriovtest.Driver(vf.Address) != "igbvf" {
			sriovtest.Rebind(t, vf.Address, "igbvf")
		}
	})
	if drv := sriovtest.Driver(vf.Address); drv != dataplane.VFIODriver {
		t.Fatalf("after Prepare VF %s is on %q, want %s", vf.Address, drv, dataplane.VFIODriver)
	}
	if n := sriovtest.Netdev(vf.Address); n != "" {
		t.Errorf("VF %s still has netdev %s on vfio-pci", vf.Address, n)
	}
	want := was
	want.VLAN = 50
	if got := readVF(t, pf.Name, vf.ID); got != want {
		t.Errorf("after Prepare the kernel reports VF %d as %+v, want %+v", vf.ID, got, want)
	}

	spec, err := cdi.ReadSpec(cdiSpecPath(d.opts.CDIDir, claim.UID), 0)
	if err != nil {
		t.Fatalf("the CDI spec does not parse as CDI: %v", err)
	}
	dev := spec.GetDevice(cdiDeviceName(claim.UID, "dpdk"))
	if dev == nil {
		t.Fatalf("the CDI spec has no device %s", cdiDeviceName(claim.UID, "dpdk"))
	}
	group := fmt.Sprintf("/dev/vfio/%d", vf.Group)
	var paths []string
	for _, n := range dev.ContainerEdits.DeviceNodes {
		paths = append(paths, n.Path)
		host := n.HostPath
		if host == "" {
			host = n.Path
		}
		if st, err := os.Stat(host); err != nil || st.Mode()&os.ModeCharDevice == 0 {
			t.Errorf("the CDI spec's device node %s (host %s) is not a device here: %v", n.Path, host, err)
		}
	}
	if slices.Sort(paths); !slices.Equal(paths, []string{group, "/dev/vfio/vfio"}) {
		t.Errorf("the CDI spec's device nodes are %v, want %s and /dev/vfio/vfio", paths, group)
	}
	if env := strings.Join(dev.ContainerEdits.Env, " "); !strings.Contains(env, "PCIDEVICE_FASTPATH_DEV_DPDK="+vf.Address) {
		t.Errorf("the CDI device's environment %v does not name %s", dev.ContainerEdits.Env, vf.Address)
	}
	if regions := sriovtest.OpenVFIODevice(t, vf.Group, vf.Address); regions < 1 {
		t.Errorf("the VFIO device has %d regions", regions)
	}

	unprepare(t, ctx, k, claim)
	if drv := sriovtest.Driver(vf.Address); drv != "igbvf" {
		t.Fatalf("after Unprepare VF %s is on %q, want igbvf", vf.Address, drv)
	}
	sriovtest.WaitFor(t, 10*time.Second, "the netdev of VF "+vf.Address+" on igbvf", func() bool { return sriovtest.Netdev(vf.Address) != "" })
	// igbvf makes a new random MAC at each probe of a VF whose PF set
	// none, and the PF reports it as the VF's: the MAC from before went
	// with the unbind, as it goes without fastpath.
	got := readVF(t, pf.Name, vf.ID)
	if got.MAC == "00:00:00:00:00:00" || got.MAC != netdevMAC(t, vf.Address) {
		t.Errorf("after Unprepare the PF reports VF %d's MAC as %s, want its netdev's %s", vf.ID, got.MAC, netdevMAC(t, vf.Address))
	}
	if got.MAC, was.MAC = "", ""; got != was {
		t.Errorf("after Unprepare the kernel reports VF %d as %+v, want %+v as before", vf.ID, got, was)
	}
	if _, err := os.Stat(group); err == nil {
		t.Errorf("%s is still there with no function of the group on vfio-pci", group)
	}
	assertNothingLeft(t, d)
}

// TestSRIOVKubeletVFIOCount: a request of count 2 in mode vfio binds both
// of its VFs to vfio-pci, and the CDI spec has a device for each, by its
// slot (dpdk.0, dpdk.1), with its own group's node and PCI address;
// Unprepare gives both back to igbvf.
func TestSRIOVKubeletVFIOCount(t *testing.T) {
	pf := sriovtest.RequirePF(t)
	vfs := pf.VFsReady(t, 4)[2:4]
	sriovtest.Modprobe(t, "vfio-pci")
	claim := testClaim("pair", []alloc{{Request: "dpdk", Device: devices.PCIDeviceName(vfs[0].Address)}, {Request: "dpdk", Device: devices.PCIDeviceName(vfs[1].Address)}},
		fromClaim(config(`"mode": "vfio"`)))
	claim.Spec.Devices.Requests = claim.Spec.Devices.Requests[:1]
	claim.Spec.Devices.Requests[0].Exactly.Count = 2
	d, k, ctx := startSRIOVDriver(t, &fakeObject{claim})
	if e := prepare(t, ctx, k, claim); e != "" {
		t.Fatalf("prepare: %s", e)
	}
	t.Cleanup(func() {
		for _, vf := range vfs {
			if sriovtest.Driver(vf.Address) != "igbvf" {
				sriovtest.Rebind(t, vf.Address, "igbvf")
			}
		}
	})
	spec, err := cdi.ReadSpec(cdiSpecPath(d.opts.CDIDir, claim.UID), 0)
	if err != nil {
		t.Fatalf("the CDI spec does not parse as CDI: %v", err)
	}
	for i, vf := range vfs {
		if drv := sriovtest.Driver(vf.Address); drv != dataplane.VFIODriver {
			t.Errorf("after Prepare VF %s is on %q, want %s", vf.Address, drv, dataplane.VFIODriver)
		}
		slot := fmt.Sprintf("dpdk.%d", i)
		dev := spec.GetDevice(cdiDeviceName(claim.UID, slot))
		if dev == nil {
			t.Errorf("the CDI spec has no device %s", cdiDeviceName(claim.UID, slot))
			continue
		}
		var paths []string
		for _, n := range dev.ContainerEdits.DeviceNodes {
			paths = append(paths, n.Path)
		}
		group := fmt.Sprintf("/dev/vfio/%d", vf.Group)
		if slices.Sort(paths); !slices.Equal(paths, []string{group, "/dev/vfio/vfio"}) {
			t.Errorf("CDI device %s: device nodes %v, want %s and /dev/vfio/vfio", slot, paths, group)
		}
		if env := strings.Join(dev.ContainerEdits.Env, " "); !strings.Contains(env, fmt.Sprintf("PCIDEVICE_FASTPATH_DEV_DPDK_%d=%s", i, vf.Address)) {
			t.Errorf("CDI device %s: its environment %v does not name %s", slot, dev.ContainerEdits.Env, vf.Address)
		}
	}
	unprepare(t, ctx, k, claim)
	for _, vf := range vfs {
		if drv := sriovtest.Driver(vf.Address); drv != "igbvf" {
			t.Errorf("after Unprepare VF %s is on %q, want igbvf", vf.Address, drv)
		}
	}
	assertNothingLeft(t, d)
}
