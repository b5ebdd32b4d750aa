// Package dratest holds the fixtures of the drivers' tests: claims, the
// E810 fixture's inventory, claim stores, CNI claims, and configs at their
// bounds for fuzz targets. Only tests import it.
package dratest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// Node is the node of the fixtures: the pool of their devices.
const Node = "node-a"

// Alloc is one allocated device of a test claim.
type Alloc struct{ Request, Device string }

// Config is one opaque config of a test claim.
type Config struct {
	Source   resourceapi.AllocationConfigSource
	Requests []string
	JSON     string
}

// FromClass is a config of the claim's DeviceClass.
func FromClass(json string) Config {
	return Config{Source: resourceapi.AllocationConfigSourceClass, JSON: json}
}

// FromClaim is a config of the claim, for every request.
func FromClaim(json string) Config {
	return Config{Source: resourceapi.AllocationConfigSourceClaim, JSON: json}
}

// Claim builds an allocated claim of fastpath.dev reserved for one pod.
func Claim(name string, allocs []Alloc, configs ...Config) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Status: resourceapi.ResourceClaimStatus{
			Allocation:  &resourceapi.AllocationResult{},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod-" + name, UID: types.UID("pod-uid-" + name)}},
		},
	}
	for _, a := range allocs {
		c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, resourceapi.DeviceRequest{
			Name: a.Request, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "netdev.fastpath.dev", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		})
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: a.Request, Driver: devices.DriverName, Pool: Node, Device: a.Device,
		})
	}
	for _, cf := range configs {
		c.Status.Allocation.Devices.Config = append(c.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
			Source: cf.Source, Requests: cf.Requests,
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: devices.DriverName, Parameters: runtime.RawExtension{Raw: []byte(cf.JSON)},
			}},
		})
	}
	return c
}

// InterfaceConfig renders an InterfaceConfig JSON document with the given body fields.
func InterfaceConfig(body string) string {
	if body != "" {
		body = ", " + body
	}
	return fmt.Sprintf(`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig"%s}`, body)
}

// moduleRoot is the module's directory: the first above the test's working
// directory (its package's) with a go.mod. Not the source file's: a test
// built with -trimpath does not know where its sources are.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no go.mod above %s", dir)
		}
	}
}

// Inventory is the E810 fixture's inventory.
func Inventory(t testing.TB) devices.Inventory {
	t.Helper()
	d, err := devices.New(devices.Options{SysfsRoot: filepath.Join(moduleRoot(t), "devices/testdata/sysfs/e810")})
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
		if inv.Devices[i].Name == VFNetdev {
			n := inv.Devices[i].Netdev
			n.MinMTU, n.MaxMTU = 68, 9702
			n.XDP = devices.XDP{Supported: new(true), ZeroCopy: new(false)}
			n.MaxCombinedChannels = 4
		}
	}
	// And what the fixture lacks: a NIC without an IOMMU group, and memif
	// endpoints (the tests that use their sockets point them elsewhere).
	inv.Devices = append(inv.Devices,
		devices.Device{Name: NoIOMMU, Kind: devices.KindNIC, PCI: &devices.PCI{Address: "0000:3c:00.0", Driver: "mlx5_core", NUMANode: -1},
			Netdev: &devices.Netdev{Name: "enp60s0"}},
		devices.Device{Name: MemifSlave, Kind: devices.KindMemif, Memif: &devices.Memif{
			Role: devices.MemifRoleSlave, Mode: devices.MemifModeEthernet, SocketPath: "/run/memif/fw0.sock", Source: "dir", Healthy: true}},
		devices.Device{Name: MemifMaster, Kind: devices.KindMemif, Memif: &devices.Memif{
			Role: devices.MemifRoleMaster, Mode: devices.MemifModeIP, Source: "config", Healthy: true}},
		devices.Device{Name: "memif-down", Kind: devices.KindMemif, Memif: &devices.Memif{
			Role: devices.MemifRoleSlave, Mode: devices.MemifModeEthernet, SocketPath: "/run/memif/down.sock", Source: "dir", Problem: "no HELLO"}},
	)
	return inv
}

// InventoryMap is the devices of inv by name.
func InventoryMap(inv devices.Inventory) map[string]devices.Device {
	m := map[string]devices.Device{}
	for _, d := range inv.Devices {
		m[d.Name] = d
	}
	return m
}

// Devices of the E810 fixture.
const (
	VFNetdev  = "pci-0000-3b-01-0" // iavf, netdev ens1f0v0
	VFNetdev2 = "pci-0000-3b-01-1"
	VFVFIO    = "pci-0000-3b-01-2" // vfio-pci, no netdev
	PFDevice  = "pci-0000-3b-00-0"

	NoIOMMU     = "pci-0000-3c-00-0" // a NIC without an IOMMU group
	MemifSlave  = "memif-fw0"        // the pod connects
	MemifMaster = "memif-vpp1"       // the pod serves
)

// Store is an empty claim store in a temporary directory.
func Store(t testing.TB) *claims.Store {
	t.Helper()
	s, err := claims.Open(filepath.Join(t.TempDir(), "checkpoint.json"), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Raw is s as an object's raw parameters.
func Raw(s string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(s)} }

// FromClaimFor is a config of the claim for one request.
func FromClaimFor(request, json string) Config {
	return Config{Source: resourceapi.AllocationConfigSourceClaim, Requests: []string{request}, JSON: json}
}

// CNIHead begins a CNIConfig document asking for interface net1.
const CNIHead = `"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "net1"`

// CNIClaim builds an allocated claim of the CNI DRA driver with a device
// per request, cni-0, cni-1 and so on, and configs.
func CNIClaim(requests []string, configs ...Config) *resourceapi.ResourceClaim {
	var allocs []Alloc
	for i, r := range requests {
		allocs = append(allocs, Alloc{r, "cni-" + string(rune('0'+i))})
	}
	c := Claim("net", allocs)
	for i := range c.Status.Allocation.Devices.Results {
		c.Status.Allocation.Devices.Results[i].Driver = claims.DriverCNI
	}
	for _, cf := range configs {
		c.Status.Allocation.Devices.Config = append(c.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
			Source: cf.Source, Requests: cf.Requests,
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: claims.DriverCNI, Parameters: Raw(cf.JSON),
			}},
		})
	}
	return c
}
