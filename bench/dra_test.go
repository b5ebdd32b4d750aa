package bench

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/dratest"
	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
)

func generatedInventory(b *testing.B, vfs int) devices.Inventory {
	b.Helper()
	inv, _ := generatedNode(b, vfs)
	return inv
}

// generatedNode is generatedInventory, with the root of the sysfs tree it
// was discovered from: a PF and vfs VFs.
func generatedNode(b *testing.B, vfs int) (devices.Inventory, string) {
	b.Helper()
	root := sysfsfixture.TempDir(b)
	if err := sysfsfixture.Generated(vfs).Write(root); err != nil {
		b.Fatal(err)
	}
	d, err := devices.New(devices.Options{SysfsRoot: root})
	if err != nil {
		b.Fatal(err)
	}
	inv, err := d.Discover(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	return inv, root
}

// BenchmarkPublish turns an inventory of 1024 devices (a PF and 1023 VFs)
// into the node's ResourceSlices, attributes and all.
func BenchmarkPublish(b *testing.B) {
	inv := generatedInventory(b, 1023)
	b.ReportAllocs()
	for b.Loop() {
		res := dra.Resources("node-a", inv, nil, nil)
		if n := len(res.Pools["node-a"].Slices); n != 16 {
			b.Fatalf("%d slices, want 16", n)
		}
	}
}

// BenchmarkPrepare prepares and unprepares a claim for one VF netdev with a
// full config: validation, plan, the VF's state saved, checkpoint (fsync'd),
// device-info file, CDI spec and VF settings (through a PF that does
// nothing), then their removal.
func BenchmarkPrepare(b *testing.B) { benchPrepare(b, 0) }

// benchPrepare is BenchmarkPrepare with others claims of other pods
// prepared in the store.
func benchPrepare(b *testing.B, others int) {
	inv, sysfs := generatedNode(b, 8)
	params, err := json.Marshal(v1alpha1.InterfaceConfig{
		Interface: &v1alpha1.InterfaceSpec{Name: "net1", MTU: 1500, MAC: "02:00:00:00:00:01", Addresses: []string{"10.10.1.2/24", "fd00::2/64"},
			Routes: []v1alpha1.Route{{Destination: "10.20.0.0/16", Gateway: "10.10.1.1"}}},
		VF: &v1alpha1.VFConfig{VLAN: new(100), SpoofChk: new(true)},
	})
	if err != nil {
		b.Fatal(err)
	}
	results := []resourceapi.DeviceRequestAllocationResult{{Request: "nic", Driver: devices.DriverName, Pool: "node-a", Device: devices.PCIDeviceName(sysfsfixture.Address(0, 0x3b, 1, 0))}}
	loopPrepare(b, benchDriver(b, inv, sysfs, others), prepareClaim(results, params))
}

// benchDriver is the driver of the benchmarks' Prepares, on the generated
// node (sysfs its tree, with a PF that does nothing) and a store of its
// own, with others claims of other pods prepared in it.
func benchDriver(b *testing.B, inv devices.Inventory, sysfs string, others int) *dra.Driver {
	b.Helper()
	dir := b.TempDir()
	store, err := claims.Open(dir+"/state/checkpoint.json", claims.Legacy{})
	if err != nil {
		b.Fatal(err)
	}
	fillStore(b, store, others)
	d, err := dra.New(dra.Options{NodeName: "node-a", PluginDir: dir + "/plugin", StateDir: dir + "/state", CDIDir: dir + "/cdi", PF: dratest.NopPF{},
		PCI: dataplane.PCIBinder{SysfsRoot: sysfs, DevRoot: sysfs}, Store: store})
	if err != nil {
		b.Fatal(err)
	}
	d.UseInventory(inv)
	return d
}

// prepareClaim is claim default/bench of one request, nic, of class netdev,
// for as many devices as results allocate it, with the claim's config
// params for all of them.
func prepareClaim(results []resourceapi.DeviceRequestAllocationResult, params []byte) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bench", UID: "uid-bench"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "nic", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "netdev.fastpath.dev", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(len(results))},
		}}}},
		Status: resourceapi.ResourceClaimStatus{
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "pod-uid"}},
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
				Results: results,
				Config: []resourceapi.DeviceAllocationConfiguration{{
					Source: resourceapi.AllocationConfigSourceClaim,
					DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
						Driver: devices.DriverName, Parameters: runtime.RawExtension{Raw: params},
					}},
				}},
			}},
		},
	}
}

// loopPrepare is the benchmark's loop: Prepare of the claim (each of its
// devices prepared), then its Unprepare.
func loopPrepare(b *testing.B, d *dra.Driver, claim *resourceapi.ResourceClaim) {
	ctx := klog.NewContext(b.Context(), logr.Discard())
	prepared := []*resourceapi.ResourceClaim{claim}
	refs := []kubeletplugin.NamespacedObject{{NamespacedName: types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}, UID: claim.UID}}
	want := len(claim.Status.Allocation.Devices.Results)
	b.ReportAllocs()
	for b.Loop() {
		res, err := d.PrepareResourceClaims(ctx, prepared)
		if err != nil || res[claim.UID].Err != nil || len(res[claim.UID].Devices) != want {
			b.Fatalf("prepare: %v %+v", err, res)
		}
		un, err := d.UnprepareResourceClaims(ctx, refs)
		if err != nil || un[claim.UID] != nil {
			b.Fatalf("unprepare: %v %v", err, un)
		}
	}
}

// BenchmarkPrepareCount prepares and unprepares a claim of one request for
// count VF netdevs, 1 and 8 in the same run, each with an interface name,
// an MTU, two addresses and a VLAN: what a request of several devices
// costs beside one of one (the 8-device claim's target: at most 8.5 times
// the one's).
func BenchmarkPrepareCount(b *testing.B) {
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("count=%d", n), func(b *testing.B) { benchPrepareCount(b, n) })
	}
}

func benchPrepareCount(b *testing.B, n int) {
	inv, sysfs := generatedNode(b, 16)
	var results []resourceapi.DeviceRequestAllocationResult
	var addrs []string
	for _, dev := range inv.Devices {
		if dev.VF != nil && dev.Netdev != nil && len(results) < n {
			i := len(results)
			results = append(results, resourceapi.DeviceRequestAllocationResult{Request: "nic", Driver: devices.DriverName, Pool: "node-a", Device: dev.Name})
			addrs = append(addrs, fmt.Sprintf("10.10.%d.2/24", i), fmt.Sprintf("fd00:%d::2/64", i+1))
		}
	}
	if len(results) != n {
		b.Fatalf("the generated node has %d VF netdevs, want %d", len(results), n)
	}
	params, err := json.Marshal(v1alpha1.InterfaceConfig{
		Interface: &v1alpha1.InterfaceSpec{Name: "net", MTU: 1500, Addresses: addrs},
		VF:        &v1alpha1.VFConfig{VLAN: new(100), SpoofChk: new(true)},
	})
	if err != nil {
		b.Fatal(err)
	}
	loopPrepare(b, benchDriver(b, inv, sysfs, 0), prepareClaim(results, params))
}
