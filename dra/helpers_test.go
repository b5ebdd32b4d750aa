package dra

import (
	"fmt"
	"path/filepath"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

const testNode = "node-a"

// alloc is one allocated device of a test claim.
type alloc struct{ request, device string }

// cfg is one opaque config of a test claim.
type cfg struct {
	source   resourceapi.AllocationConfigSource
	requests []string
	json     string
}

func fromClass(json string) cfg {
	return cfg{source: resourceapi.AllocationConfigSourceClass, json: json}
}
func fromClaim(json string) cfg {
	return cfg{source: resourceapi.AllocationConfigSourceClaim, json: json}
}

// testClaim builds an allocated claim reserved for one pod.
func testClaim(name string, allocs []alloc, configs ...cfg) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Status: resourceapi.ResourceClaimStatus{
			Allocation:  &resourceapi.AllocationResult{},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod-" + name, UID: types.UID("pod-uid-" + name)}},
		},
	}
	for _, a := range allocs {
		c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, resourceapi.DeviceRequest{
			Name: a.request, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "netdev.fastpath.dev", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		})
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: a.request, Driver: devices.DriverName, Pool: testNode, Device: a.device,
		})
	}
	for _, cf := range configs {
		c.Status.Allocation.Devices.Config = append(c.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
			Source: cf.source, Requests: cf.requests,
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: devices.DriverName, Parameters: runtime.RawExtension{Raw: []byte(cf.json)},
			}},
		})
	}
	return c
}

// config renders an InterfaceConfig JSON document with the given body fields.
func config(body string) string {
	if body != "" {
		body = ", " + body
	}
	return fmt.Sprintf(`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig"%s}`, body)
}

// testInventory is the E810 fixture's inventory.
func testInventory(t testing.TB) devices.Inventory {
	t.Helper()
	d, err := devices.New(devices.Options{SysfsRoot: "../devices/testdata/sysfs/e810"})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := d.Discover(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Fixture trees do not say what the kernel would: give the first VF an
	// MTU range and XDP support, as a live host reports them.
	for i := range inv.Devices {
		if inv.Devices[i].Name == "pci-0000-3b-01-0" {
			n := inv.Devices[i].Netdev
			n.MinMTU, n.MaxMTU = 68, 9702
			n.XDP = devices.XDP{Supported: new(true), ZeroCopy: new(false)}
			n.MaxCombinedChannels = 4
		}
	}
	// And what the fixture lacks: a NIC without an IOMMU group, and memif
	// endpoints (the tests that use their sockets point them elsewhere).
	inv.Devices = append(inv.Devices,
		devices.Device{Name: noIOMMU, Kind: devices.KindNIC, PCI: &devices.PCI{Address: "0000:3c:00.0", Driver: "mlx5_core", NUMANode: -1},
			Netdev: &devices.Netdev{Name: "enp60s0"}},
		devices.Device{Name: memifSlave, Kind: devices.KindMemif, Memif: &devices.Memif{
			Role: devices.MemifRoleSlave, Mode: devices.MemifModeEthernet, SocketPath: "/run/memif/fw0.sock", Source: "dir", Healthy: true}},
		devices.Device{Name: memifMaster, Kind: devices.KindMemif, Memif: &devices.Memif{
			Role: devices.MemifRoleMaster, Mode: devices.MemifModeIP, Source: "config", Healthy: true}},
		devices.Device{Name: "memif-down", Kind: devices.KindMemif, Memif: &devices.Memif{
			Role: devices.MemifRoleSlave, Mode: devices.MemifModeEthernet, SocketPath: "/run/memif/down.sock", Source: "dir", Problem: "no HELLO"}},
	)
	return inv
}

func inventoryMap(inv devices.Inventory) map[string]devices.Device {
	m := map[string]devices.Device{}
	for _, d := range inv.Devices {
		m[d.Name] = d
	}
	return m
}

// Devices of the E810 fixture.
const (
	vfNetdev  = "pci-0000-3b-01-0" // iavf, netdev ens1f0v0
	vfNetdev2 = "pci-0000-3b-01-1"
	vfVFIO    = "pci-0000-3b-01-2" // vfio-pci, no netdev
	pfDevice  = "pci-0000-3b-00-0"

	noIOMMU     = "pci-0000-3c-00-0" // a NIC without an IOMMU group
	memifSlave  = "memif-fw0"        // the pod connects
	memifMaster = "memif-vpp1"       // the pod serves
)

// testStore is an empty claim store in a temporary directory.
func testStore(t testing.TB) *claims.Store {
	t.Helper()
	s, err := claims.Open(filepath.Join(t.TempDir(), "checkpoint.json"), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func raw(s string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(s)} }

func fromClaimFor(request, json string) cfg {
	return cfg{source: resourceapi.AllocationConfigSourceClaim, requests: []string{request}, json: json}
}
