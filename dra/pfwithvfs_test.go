package dra

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/status"
	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
)

// TestPreparePFWithVFs: Prepare refuses a PF that has VFs in every mode
// that hands it over whole (netdev, afxdp, delegate) unless the driver
// allows it (--allow-pf-with-vfs), and in mode vfio always, with the
// claim, request, device, field, VF count and flag named and nothing of
// the claim left. The count is read at Prepare: VFs made on a PF after
// it was published count. A PF without VFs, a VF, and a sub-interface on
// a shared PF with VFs are prepared as before.
func TestPreparePFWithVFs(t *testing.T) {
	const pf0, pf1 = pfDevice, "pci-0000-3b-00-1" // ens1f0 with 4 VFs, ens1f1 with none
	refusedWhole := []string{"mode", "is a PF with 4 VFs (sriov_numvfs)", "--allow-pf-with-vfs", "allowPFWithVFs"}
	for _, tc := range []struct {
		name    string
		device  string
		config  string
		allow   bool
		numVFs  string // written to ens1f1's sriov_numvfs after discovery
		wantErr []string
	}{
		{name: "netdev", device: pf0, wantErr: refusedWhole},
		{name: "afxdp", device: pf0, config: `"mode": "afxdp"`, wantErr: refusedWhole},
		{name: "delegate", device: pf0, config: `"mode": "delegate"`, wantErr: refusedWhole},
		{name: "vfio", device: pf0, config: `"mode": "vfio"`, wantErr: []string{"mode", "PF with 4 VFs", "vfio-pci"}},
		{name: "netdev allowed", device: pf0, allow: true},
		{name: "delegate allowed", device: pf0, config: `"mode": "delegate"`, allow: true},
		{name: "vfio allowed", device: pf0, config: `"mode": "vfio"`, allow: true, wantErr: []string{"mode", "PF with 4 VFs", "vfio-pci"}},
		{name: "PF without VFs", device: pf1},
		{name: "VFs made after publishing", device: pf1, numVFs: "2",
			wantErr: []string{"mode", "is a PF with 2 VFs (sriov_numvfs)", "--allow-pf-with-vfs"}},
		{name: "VFs made after publishing, vfio allowed", device: pf1, config: `"mode": "vfio"`, allow: true, numVFs: "2",
			wantErr: []string{"mode", "PF with 2 VFs", "vfio-pci"}},
		{name: "VF count unreadable", device: pf1, numVFs: "two",
			wantErr: []string{"read the VF count of PF 0000:3b:00.1", "sriov_numvfs"}},
		{name: "VF", device: vfNetdev},
		{name: "shared PF with VFs", device: pf0, config: `"mode": "macvlan"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			sysfs := sysfsfixture.TempDir(t)
			if err := sysfsfixture.E810().Write(sysfs); err != nil {
				t.Fatal(err)
			}
			disc, err := devices.New(devices.Options{SysfsRoot: sysfs})
			if err != nil {
				t.Fatal(err)
			}
			inv, err := disc.Discover(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i := range inv.Devices {
				dev := &inv.Devices[i]
				if dev.Name != pf0 {
					continue
				}
				if dev.PF == nil || dev.PF.NumVFs != 4 {
					t.Fatalf("the fixture's %s is %+v, want a PF with 4 VFs", pf0, dev.PF)
				}
				// What a live host reports: XDP redirect, for mode afxdp.
				dev.Netdev.XDP.Supported = new(true)
				if tc.config == `"mode": "macvlan"` {
					dev.Share = &devices.Share{Interfaces: 8}
				}
			}
			if tc.numVFs != "" {
				path := filepath.Join(sysfs, "sys", "bus", "pci", "devices", "0000:3b:00.1", "sriov_numvfs")
				if err := os.WriteFile(path, []byte(tc.numVFs), 0o644); err != nil {
					t.Fatal(err)
				}
			}

			claim := testClaim("pf", []alloc{{Request: "nic", Device: tc.device}}, fromClaim(config(tc.config)))
			dir := t.TempDir()
			client := fake.NewClientset(claim)
			d, err := New(Options{NodeName: testNode, Client: client, PluginDir: filepath.Join(dir, "plugins"),
				StateDir: filepath.Join(dir, "state"), CDIDir: filepath.Join(dir, "cdi"), Store: testStore(t), Status: status.NewWriter(client),
				PCI: dataplane.PCIBinder{SysfsRoot: sysfs, DevRoot: sysfs}, BootID: "boot", DeviceInfoDir: filepath.Join(dir, "devinfo"),
				AllowPFWithVFs: tc.allow})
			if err != nil {
				t.Fatal(err)
			}
			d.opts.Status.Start(ctx)
			d.UseInventory(inv)

			res := d.prepareClaim(ctx, claim)
			_, recorded := d.opts.Store.Get(claims.Key{Driver: claims.DriverFastpath, UID: claim.UID})
			if tc.wantErr == nil {
				if res.Err != nil {
					t.Fatalf("prepare: %v", res.Err)
				}
				if !recorded || !exists(cdiSpecPath(d.opts.CDIDir, claim.UID)) || len(res.Devices) != 1 || res.Devices[0].DeviceName != tc.device {
					t.Errorf("prepared %+v, recorded %v: want %s prepared with its CDI spec", res.Devices, recorded, tc.device)
				}
				return
			}
			if res.Err == nil {
				t.Fatalf("%s prepared: want it refused", tc.device)
			}
			for _, want := range append([]string{`claim default/pf`, `request "nic"`, "device " + tc.device}, tc.wantErr...) {
				if !strings.Contains(res.Err.Error(), want) {
					t.Errorf("the error does not say %q: %v", want, res.Err)
				}
			}
			if recorded || exists(cdiSpecPath(d.opts.CDIDir, claim.UID)) || exists(d.claimDir(claim)) {
				t.Errorf("a refused claim left its record (%v), CDI spec or directory", recorded)
			}
			if entries, _ := os.ReadDir(filepath.Join(dir, "devinfo")); len(entries) > 0 {
				t.Errorf("a refused claim left device-info: %v", entries)
			}
		})
	}
}
