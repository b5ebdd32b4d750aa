package chart

import (
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/devices/filter"
)

// deviceClasses are the DeviceClasses the chart renders with args, by name.
func deviceClasses(t *testing.T, objs []runtime.Object) map[string]*resourceapi.DeviceClass {
	t.Helper()
	out := map[string]*resourceapi.DeviceClass{}
	for _, o := range objs {
		if c, ok := o.(*resourceapi.DeviceClass); ok {
			out[c.Name] = c
		}
	}
	return out
}

// TestDeviceClassesPFWithVFs: the chart's DeviceClass selectors, compiled
// and run as the scheduler runs them, leave a PF that has VFs out of every
// class that hands a device over whole, while a PF without VFs and a VF
// stay in; with allowPFWithVFs the PF with VFs is in netdev, afxdp, rdma
// and delegate, never in vfio (bound to vfio-pci it would take its VFs away),
// and the daemon runs with --allow-pf-with-vfs.
func TestDeviceClassesPFWithVFs(t *testing.T) {
	pf := func(name, addr string, group, numVFs int) devices.Device {
		return devices.Device{Name: name, Kind: devices.KindNIC, ResourceName: devices.DefaultResourceName(devices.KindNIC),
			PCI: &devices.PCI{Address: addr, Vendor: "8086", Device: "1592", Driver: "ice", NUMANode: 0, IOMMUGroup: new(group)},
			PF:  &devices.PF{TotalVFs: 128, NumVFs: numVFs},
			Netdev: &devices.Netdev{Name: "ens1f" + addr[len(addr)-1:], MTU: 1500, MAC: "02:00:00:00:00:0" + addr[len(addr)-1:],
				XDP: devices.XDP{Supported: new(true)}, RDMADevice: "mlx5_" + addr[len(addr)-1:]}}
	}
	withVFs, withoutVFs := pf("pf-with-vfs", "0000:3b:00.0", 40, 4), pf("pf-without-vfs", "0000:3b:00.1", 60, 0)
	vf := devices.Device{Name: "vf", Kind: devices.KindSRIOVVF, ResourceName: devices.DefaultResourceName(devices.KindSRIOVVF),
		PCI: &devices.PCI{Address: "0000:3b:01.0", Vendor: "8086", Device: "1889", Driver: "iavf", NUMANode: 0, IOMMUGroup: new(41)},
		VF:  &devices.VF{ID: 0, PFPCIAddress: "0000:3b:00.0", PFName: "ens1f0"},
		Netdev: &devices.Netdev{Name: "ens1f0v0", MTU: 1500, MAC: "02:00:00:00:01:00",
			XDP: devices.XDP{Supported: new(true)}, RDMADevice: "mlx5_2"}}
	whole := []string{"netdev.fastpath.dev", "afxdp.fastpath.dev", "rdma.fastpath.dev", "delegate.fastpath.dev", "vfio.fastpath.dev"}

	for _, tc := range []struct {
		name string
		args []string
		// want lists, per class that hands devices over whole, the
		// devices it selects; the other classes select none of them.
		want     map[string][]string
		wantFlag bool
	}{
		{name: "default", want: map[string][]string{
			"netdev.fastpath.dev":   {"pf-without-vfs", "vf"},
			"afxdp.fastpath.dev":    {"pf-without-vfs", "vf"},
			"rdma.fastpath.dev":     {"pf-without-vfs", "vf"},
			"delegate.fastpath.dev": {"pf-without-vfs", "vf"},
			"vfio.fastpath.dev":     {"pf-without-vfs", "vf"},
		}},
		{name: "allowPFWithVFs", args: []string{"--set", "allowPFWithVFs=true"}, wantFlag: true, want: map[string][]string{
			"netdev.fastpath.dev":   {"pf-with-vfs", "pf-without-vfs", "vf"},
			"afxdp.fastpath.dev":    {"pf-with-vfs", "pf-without-vfs", "vf"},
			"rdma.fastpath.dev":     {"pf-with-vfs", "pf-without-vfs", "vf"},
			"delegate.fastpath.dev": {"pf-with-vfs", "pf-without-vfs", "vf"},
			"vfio.fastpath.dev":     {"pf-without-vfs", "vf"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.args...)
			classes := deviceClasses(t, objs)
			for _, name := range whole {
				if classes[name] == nil {
					t.Fatalf("no DeviceClass %s rendered: %v", name, classes)
				}
			}
			for name, class := range classes {
				var got []string
				for _, sel := range class.Spec.Selectors {
					selector, err := filter.Compile(sel.CEL.Expression)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					for _, dev := range []devices.Device{withVFs, withoutVFs, vf} {
						ok, err := selector.Admits(t.Context(), devices.DriverName, dev.Attributes())
						if err != nil {
							t.Errorf("%s on %s: %v", name, dev.Name, err)
						}
						if ok {
							got = append(got, dev.Name)
						}
					}
				}
				if !slices.Equal(got, tc.want[name]) {
					t.Errorf("%s selects %q, want %q\n%s", name, got, tc.want[name], class.Spec.Selectors[0].CEL.Expression)
				}
			}
			args := daemonSet(t, objs).Spec.Template.Spec.Containers[0].Args
			if slices.Contains(args, "--allow-pf-with-vfs") != tc.wantFlag {
				t.Errorf("the daemon's args %q: --allow-pf-with-vfs should be there: %v", args, tc.wantFlag)
			}
		})
	}
}
