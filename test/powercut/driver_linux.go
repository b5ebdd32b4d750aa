package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

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

// The daemon's side of the churn: beside the workers that change the
// store as Prepare and Unprepare do, one prepares and unprepares claims
// through fastpathd's DRA driver itself (dra.Driver, on the same store),
// each claim of one VF of a node the guest's sysfs tree describes (the
// VM's own igb VFs belong to the SR-IOV tests): the validation, the plan,
// the VF's state saved, the record admitted and its steps, the CDI spec
// and the device-info file, then their removal. After each boot the
// driver must start on the store (check), and each claim it prepared
// (acknowledged) must be held prepared.

// driverNamespace is the namespace of the driver's claims: check tells
// their records by it.
const driverNamespace = "powercut-driver"

// driverVFs is how many VFs of the guest's sysfs tree (those with a
// netdev) the driver prepares claims on: one claim each.
const driverVFs = 4

// sysfsRoot writes the sysfs tree of the driver's VFs under base, made
// again at each start, as the kernel's is at each boot; in the guest,
// base is its tmpfs (/run): on the store's disk, a power cut would take
// what was not synced of it. The tree, so the devices and their names, is
// the same each time.
func sysfsRoot(base string) (string, error) {
	root := filepath.Join(base, "powercut-sysfs")
	if err := os.RemoveAll(root); err != nil {
		return "", err
	}
	if err := sysfsfixture.Generated(4 * driverVFs).Write(root); err != nil {
		return "", fmt.Errorf("the sysfs tree of the driver's VFs: %w", err)
	}
	return root, nil
}

// newDriver starts fastpathd's DRA driver on store, its directories
// under dir, with the VFs of a sysfs tree under sysfsBase, and returns
// them, one a claim.
func newDriver(dir, sysfsBase string, store *claims.Store) (*dra.Driver, []devices.Device, error) {
	root, err := sysfsRoot(sysfsBase)
	if err != nil {
		return nil, nil, err
	}
	disc, err := devices.New(devices.Options{SysfsRoot: root})
	if err != nil {
		return nil, nil, err
	}
	inv, err := disc.Discover(klog.NewContext(context.Background(), logr.Discard()))
	if err != nil {
		return nil, nil, err
	}
	var vfs []devices.Device
	for _, d := range inv.Devices {
		if d.VF != nil && d.Netdev != nil {
			vfs = append(vfs, d)
		}
	}
	if len(vfs) < driverVFs {
		return nil, nil, fmt.Errorf("the sysfs tree gives %d VFs with a netdev, want %d", len(vfs), driverVFs)
	}
	state := filepath.Join(dir, "state")
	d, err := dra.New(dra.Options{NodeName: "powercut", PluginDir: filepath.Join(dir, "plugin"), StateDir: state,
		CDIDir: filepath.Join(dir, "cdi"), PF: dratest.NopPF{}, PCI: dataplane.PCIBinder{SysfsRoot: root, DevRoot: root}, Store: store})
	if err != nil {
		return nil, nil, fmt.Errorf("start the DRA driver on the store (fastpathd would not start): %w", err)
	}
	d.UseInventory(inv)
	return d, vfs[:driverVFs], nil
}

// driverClaim is the ResourceClaim of the driver's claim i, allocated VF
// vf with a full config.
func driverClaim(i int, vf devices.Device) (*resourceapi.ResourceClaim, error) {
	params, err := json.Marshal(v1alpha1.InterfaceConfig{
		Interface: &v1alpha1.InterfaceSpec{Name: "net1", MTU: 1500, MAC: "02:00:00:00:00:01", Addresses: []string{"10.10.1.2/24", "fd00::2/64"},
			Routes: []v1alpha1.Route{{Destination: "10.20.0.0/16", Gateway: "10.10.1.1"}}},
		VF: &v1alpha1.VFConfig{VLAN: new(100), SpoofChk: new(true)},
	})
	if err != nil {
		return nil, err
	}
	uid := types.UID(fmt.Sprintf("%s%d", driverClaimPrefix, i))
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: driverNamespace, Name: fmt.Sprintf("claim-%d", i), UID: uid},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "nic", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "netdev.fastpath.dev", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		}}}},
		Status: resourceapi.ResourceClaimStatus{
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: fmt.Sprintf("pod-%d", i), UID: types.UID(fmt.Sprintf("powercut-pod-%d", i))}},
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
				Results: []resourceapi.DeviceRequestAllocationResult{{Request: "nic", Driver: devices.DriverName, Pool: "powercut", Device: vf.Name}},
				Config: []resourceapi.DeviceAllocationConfiguration{{
					Source: resourceapi.AllocationConfigSourceClaim,
					DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
						Driver: devices.DriverName, Parameters: runtime.RawExtension{Raw: params},
					}},
				}},
			}},
		},
	}, nil
}

// churnDriver prepares and unprepares the driver's claims, one change at a
// time, as worker w of the report, until ctx ends or a change fails.
func churnDriver(ctx context.Context, d *dra.Driver, vfs []devices.Device, f churnFlags, w int, say func(string, ...any) error) error {
	ctx = klog.NewContext(ctx, logr.Discard())
	rng := rand.New(rand.NewPCG(f.seed, uint64(w)))
	cls := make([]*resourceapi.ResourceClaim, len(vfs))
	for i, vf := range vfs {
		var err error
		if cls[i], err = driverClaim(i, vf); err != nil {
			return err
		}
	}
	for n := 0; ctx.Err() == nil; n++ {
		c := cls[rng.IntN(len(cls))]
		key := claims.Key{Driver: claims.DriverFastpath, UID: c.UID}
		prepare := rng.IntN(2) == 0
		version := absent
		if prepare {
			version = versionPrepared
		}
		if err := say("try %d %d %s %s", w, n, key, version); err != nil {
			return err
		}
		var err error
		if prepare {
			res, perr := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
			err = perr
			if err == nil {
				err = res[c.UID].Err
			}
		} else {
			ref := kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, UID: c.UID}
			res, uerr := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{ref})
			err = uerr
			if err == nil {
				err = res[c.UID]
			}
		}
		if err != nil {
			return fmt.Errorf("driver change %d.%d of claim %s (%s): %w", w, n, key, version, err)
		}
		if err := say("ack %d %d", w, n); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// sysfsBase is where the sysfs tree of the driver's VFs goes: the
// guest's tmpfs when the store is on the VM's disk (mount), else beside
// the store.
func sysfsBase(dir string, mount bool) string {
	if mount {
		return "/run"
	}
	return dir
}
