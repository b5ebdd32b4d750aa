//go:build sriov

package devices

// Discovery of a real SR-IOV NIC: QEMU's Intel 82576 (igb PF, igbvf VFs)
// in the test VM (make e2e-sriov). The fixture trees in testdata/sysfs
// stand for the NICs the VM cannot have (E810, X710, ConnectX-5).

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/test/sriovtest"
)

// sysfsInt reads an integer attribute of a PCI function, the test's own
// way.
func sysfsInt(t *testing.T, addr, attr string) int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("/sys/bus/pci/devices", addr, attr))
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func iommuGroup(t *testing.T, addr string) int {
	t.Helper()
	target, err := os.Readlink(filepath.Join("/sys/bus/pci/devices", addr, "iommu_group"))
	if err != nil {
		t.Fatalf("%s has no IOMMU group: %v", addr, err)
	}
	g, err := strconv.Atoi(filepath.Base(target))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// ethtoolField is a field of `ethtool ARGS` output ("Speed: 1000Mb/s").
func ethtoolField(t *testing.T, field string, args ...string) string {
	t.Helper()
	out, err := exec.Command("ethtool", args...).Output()
	if err != nil {
		t.Fatalf("ethtool %s: %v", strings.Join(args, " "), err)
	}
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("ethtool %s shows no %s", strings.Join(args, " "), field)
	return ""
}

// maxMTU is the largest MTU of a link, as iproute2 reads it.
func maxMTU(t *testing.T, name string) int {
	t.Helper()
	out, err := exec.Command("ip", "-j", "-d", "link", "show", name).Output()
	if err != nil {
		t.Fatalf("ip link show %s: %v", name, err)
	}
	var links []struct {
		MaxMTU int `json:"max_mtu"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		t.Fatalf("ip link show %s: %v: %s", name, err, out)
	}
	return links[0].MaxMTU
}

// sriovInventory discovers this host's devices, and fails the test if
// discovery wrote to stdout (the daemon logs through klog, JSON or text:
// a library printing there corrupts that).
func sriovInventory(t *testing.T) map[string]Device {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	t.Cleanup(func() { os.Stdout = stdout })
	inv := discover(t, Options{})
	os.Stdout = stdout
	_ = w.Close()
	if out, _ := io.ReadAll(r); len(out) > 0 {
		t.Errorf("discovery wrote to stdout: %q", out)
	}
	_ = r.Close()
	m := map[string]Device{}
	for _, d := range inv.Devices {
		m[d.Name] = d
	}
	return m
}

// TestSRIOVDiscover: the PF and its VFs, each attribute as sysfs, netlink
// and ethtool report it, and nothing else of the VM published.
func TestSRIOVDiscover(t *testing.T) {
	pf := sriovtest.RequirePF(t)
	vfs := pf.VFsReady(t, 4)
	devs := sriovInventory(t)
	if len(devs) != 1+len(vfs) {
		t.Errorf("published %d devices, want the PF and its %d VFs: %v", len(devs), len(vfs), devs)
	}

	p, ok := devs[PCIDeviceName(pf.Address)]
	if !ok {
		t.Fatalf("the PF %s is not published", pf.Address)
	}
	pfGroup := iommuGroup(t, pf.Address)
	wantPCI := PCI{Address: pf.Address, Vendor: sriovtest.Vendor, Device: sriovtest.PFDevice, SubsystemVendor: "1af4", SubsystemDevice: "1100",
		Driver: "igb", NUMANode: sysfsInt(t, pf.Address, "numa_node"), PCIeRoot: "pci0000:00",
		VendorName: "Intel Corporation", DeviceName: "82576 Gigabit Network Connection"}
	gotPCI := *p.PCI
	gotPCI.IOMMUGroup = nil
	if gotPCI != wantPCI {
		t.Errorf("PF PCI = %+v\nwant     %+v", gotPCI, wantPCI)
	}
	if p.PCI.IOMMUGroup == nil || *p.PCI.IOMMUGroup != pfGroup {
		t.Errorf("PF IOMMU group = %v, want %d", p.PCI.IOMMUGroup, pfGroup)
	}
	if p.Kind != KindNIC || p.VF != nil || p.PF == nil || *p.PF != (PF{TotalVFs: sysfsInt(t, pf.Address, "sriov_totalvfs"), NumVFs: len(vfs)}) {
		t.Errorf("PF: kind %s, VF %+v, PF %+v", p.Kind, p.VF, p.PF)
	}
	pl, err := netlink.LinkByName(pf.Name)
	if err != nil {
		t.Fatal(err)
	}
	speed, _ := strconv.Atoi(strings.TrimSuffix(ethtoolField(t, "Speed", pf.Name), "Mb/s"))
	channels, _ := strconv.Atoi(ethtoolField(t, "Combined", "-l", pf.Name))
	n := p.Netdev
	if n == nil || n.Name != pf.Name || n.MAC != pl.Attrs().HardwareAddr.String() || n.MTU != pl.Attrs().MTU ||
		n.OperState != "up" || n.Driver != "igb" || n.SpeedMbps != speed || speed != 1000 || n.CombinedChannels != channels {
		t.Errorf("PF netdev = %+v; want %s, MAC %s, MTU %d, up, igb, %d Mb/s, %d channels", n, pf.Name, pl.Attrs().HardwareAddr, pl.Attrs().MTU, speed, channels)
	}
	// The kernel's netdev family says: igb has native XDP with redirect,
	// and AF_XDP zero-copy from Linux 6.14 on.
	zeroCopy := sriovtest.KernelAtLeast(t, 6, 14)
	if n != nil && (n.XDP.Supported == nil || !*n.XDP.Supported || n.XDP.ZeroCopy == nil || *n.XDP.ZeroCopy != zeroCopy) {
		t.Errorf("PF XDP: supported %v, zero-copy %v; want supported, zero-copy %t (kernel %s)", deref(n.XDP.Supported), deref(n.XDP.ZeroCopy), zeroCopy, sriovtest.KernelRelease(t))
	}

	groups := map[int]string{pfGroup: pf.Address}
	for _, vf := range vfs {
		d, ok := devs[PCIDeviceName(vf.Address)]
		if !ok {
			t.Errorf("VF %d (%s) is not published", vf.ID, vf.Address)
			continue
		}
		g := iommuGroup(t, vf.Address)
		if other, taken := groups[g]; taken {
			t.Errorf("VF %s shares IOMMU group %d with %s", vf.Address, g, other)
		}
		groups[g] = vf.Address
		if d.Kind != KindSRIOVVF || d.PF != nil || d.VF == nil || *d.VF != (VF{ID: vf.ID, PFPCIAddress: pf.Address, PFName: pf.Name}) {
			t.Errorf("VF %s: kind %s, PF %+v, VF %+v", vf.Address, d.Kind, d.PF, d.VF)
		}
		if d.PCI.Vendor != sriovtest.Vendor || d.PCI.Device != sriovtest.VFDevice || d.PCI.Driver != "igbvf" ||
			d.PCI.IOMMUGroup == nil || *d.PCI.IOMMUGroup != g || d.PCI.PCIeRoot != "pci0000:00" || !strings.Contains(d.PCI.DeviceName, "82576 Virtual Function") {
			t.Errorf("VF %s PCI = %+v, want 8086:10ca on igbvf in IOMMU group %d", vf.Address, *d.PCI, g)
		}
		vl, err := netlink.LinkByName(vf.Netdev)
		if err != nil {
			t.Fatal(err)
		}
		if n := d.Netdev; n == nil || n.Name != vf.Netdev || n.MAC != vl.Attrs().HardwareAddr.String() || n.MTU != vl.Attrs().MTU ||
			n.MaxMTU != maxMTU(t, vf.Netdev) || n.OperState != "down" || n.Driver != "igbvf" {
			t.Errorf("VF %s netdev = %+v, want %s with MAC %s, MTU %d (max %d), down, igbvf", vf.Address, d.Netdev, vf.Netdev, vl.Attrs().HardwareAddr, vl.Attrs().MTU, maxMTU(t, vf.Netdev))
		}
		a := d.Attributes()
		for name, want := range map[string]any{"kind": "sriov-vf", "pciVendor": "8086", "pciDevice": "10ca", "driver": "igbvf",
			"pfName": pf.Name, "pfPciAddress": pf.Address, "ifName": vf.Netdev, "vfID": int64(vf.ID), "iommuGroup": int64(g),
			"sriovVF": true, "vfioCapable": true, "resource.kubernetes.io/pcieRoot": "pci0000:00", "resource.kubernetes.io/pciBusID": vf.Address} {
			attr, ok := a[resourceapi.QualifiedName(name)]
			var got any
			switch {
			case attr.StringValue != nil:
				got = *attr.StringValue
			case attr.IntValue != nil:
				got = *attr.IntValue
			case attr.BoolValue != nil:
				got = *attr.BoolValue
			}
			if !ok || got != want {
				t.Errorf("VF %s attribute %s = %v, want %v", vf.Address, name, got, want)
			}
		}
		numa := int64(sysfsInt(t, vf.Address, "numa_node"))
		for _, name := range []resourceapi.QualifiedName{"numaNode", "resource.kubernetes.io/numaNode"} {
			attr, ok := a[name]
			switch {
			case numa < 0 && ok:
				t.Errorf("VF %s publishes %s, which the platform does not report", vf.Address, name)
			case numa >= 0 && !ok:
				t.Errorf("VF %s lacks %s, want %d as sysfs says", vf.Address, name, numa)
			case numa >= 0 && (attr.IntValue == nil || *attr.IntValue != numa):
				t.Errorf("VF %s attribute %s is not the int %d sysfs says", vf.Address, name, numa)
			}
		}
	}
}

// TestSRIOVDiscoverVFIO: a VF bound to vfio-pci is published with that
// driver, its IOMMU group and no netdev.
func TestSRIOVDiscoverVFIO(t *testing.T) {
	pf := sriovtest.RequirePF(t)
	vf := pf.VFsReady(t, 4)[3]
	sriovtest.Modprobe(t, "vfio-pci")
	sriovtest.Rebind(t, vf.Address, "vfio-pci")
	t.Cleanup(func() {
		sriovtest.Rebind(t, vf.Address, "igbvf")
		sriovtest.WaitFor(t, 10*time.Second, "the netdev of "+vf.Address, func() bool { return sriovtest.Netdev(vf.Address) != "" })
	})
	d, ok := sriovInventory(t)[PCIDeviceName(vf.Address)]
	if !ok {
		t.Fatalf("VF %s on vfio-pci is not published", vf.Address)
	}
	if d.PCI.Driver != "vfio-pci" || d.Netdev != nil || d.PCI.IOMMUGroup == nil || *d.PCI.IOMMUGroup != vf.Group || d.VF == nil || d.VF.ID != vf.ID {
		t.Errorf("VF on vfio-pci = PCI %+v, netdev %+v, VF %+v; want vfio-pci, group %d, no netdev", *d.PCI, d.Netdev, d.VF, vf.Group)
	}
	if a := d.Attributes(); a["vfioCapable"].BoolValue == nil || !*a["vfioCapable"].BoolValue || a["ifName"].StringValue != nil {
		t.Errorf("attributes of a VF on vfio-pci: vfioCapable %v, ifName %v", a["vfioCapable"].BoolValue, a["ifName"].StringValue)
	}
}

// TestSRIOVWatchNumVFs: the watcher sees VFs go and come as sriov_numvfs
// changes, and reports each change once.
func TestSRIOVWatchNumVFs(t *testing.T) {
	pf := sriovtest.RequirePF(t)
	pf.VFsReady(t, 4)
	t.Cleanup(func() { pf.SetNumVFs(t, 4) })
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	invs := make(chan Inventory, 100)
	done := make(chan error, 1)
	go func() {
		done <- d.Watch(ctx, WatchOptions{Debounce: 100 * time.Millisecond, NumVFsPoll: 250 * time.Millisecond}, func(inv Inventory) { invs <- inv })
	}()
	var last *Inventory
	// next waits for an inventory where the PF has numVFs VFs, all of them
	// published with their netdevs.
	next := func(numVFs int) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case inv := <-invs:
				if last != nil && inv.Equal(*last) {
					t.Errorf("the watcher reported an unchanged inventory twice")
				}
				last = &inv
				var vfs int
				pfNum := -1
				for _, dev := range inv.Devices {
					if dev.VF != nil && dev.VF.PFPCIAddress == pf.Address && dev.Netdev != nil {
						vfs++
					}
					if dev.PCI != nil && dev.PCI.Address == pf.Address && dev.PF != nil {
						pfNum = dev.PF.NumVFs
					}
				}
				if vfs == numVFs && pfNum == numVFs {
					return
				}
			case err := <-done:
				t.Fatalf("Watch ended waiting for %d VFs: %v", numVFs, err)
			case <-deadline:
				t.Fatalf("no inventory with %d VFs within 30s (last: %+v)", numVFs, last)
			}
		}
	}
	next(4)
	pf.SetNumVFs(t, 0)
	next(0)
	pf.SetNumVFs(t, 2)
	next(2)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Watch: %v", err)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
