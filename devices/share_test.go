package devices

import (
	"errors"
	"testing"
)

// The share expression marks the published netdevs it matches as shared,
// with the capacity asked for (or the default); the others, and devices
// the filter leaves out, are not.
func TestShare(t *testing.T) {
	inv := discover(t, Options{SysfsRoot: fixture("e810"), Share: `device.attributes["fastpath.dev"].ifName == "ens1f0"`, ShareInterfaces: 8,
		ShareBandwidthMbps: 25000})
	var shared []string
	for _, d := range inv.Devices {
		a := d.Attributes()
		if d.Share != nil {
			shared = append(shared, d.Name)
			if d.Share.Interfaces != 8 || d.Share.BandwidthMbps != 25000 || a["shareable"].BoolValue == nil || !*a["shareable"].BoolValue {
				t.Errorf("%s: share %+v, attribute %v", d.Name, d.Share, a["shareable"])
			}
			continue
		}
		if _, ok := a["shareable"]; ok {
			t.Errorf("%s is not shared but says shareable", d.Name)
		}
	}
	if len(shared) != 1 || shared[0] != "pci-0000-3b-00-0" {
		t.Errorf("shared = %v, want the PF ens1f0 (pci-0000-3b-00-0)", shared)
	}

	inv = discover(t, Options{SysfsRoot: fixture("e810"), Share: `device.attributes["fastpath.dev"].kind == "sriov-vf"`})
	n := 0
	for _, d := range inv.Devices {
		if d.Share != nil {
			n++
			if d.Share.Interfaces != DefaultShareInterfaces {
				t.Errorf("%s: %d interfaces, want the default %d", d.Name, d.Share.Interfaces, DefaultShareInterfaces)
			}
		}
	}
	if n == 0 {
		t.Error("no VF shared")
	}

	inv = discover(t, Options{SysfsRoot: fixture("e810"), Filter: `device.attributes["fastpath.dev"].kind == "sriov-vf"`,
		Share: `device.attributes["fastpath.dev"].kind == "nic"`})
	for _, d := range inv.Devices {
		if d.Share != nil || d.Kind == KindNIC {
			t.Errorf("%s published or shared though the filter leaves NICs out", d.Name)
		}
	}

	for name, opts := range map[string]Options{
		"bad CEL":             {SysfsRoot: fixture("e810"), Share: "device.nope =="},
		"negative interfaces": {SysfsRoot: fixture("e810"), Share: "true", ShareInterfaces: -1},
		"negative bandwidth":  {SysfsRoot: fixture("e810"), Share: "true", ShareBandwidthMbps: -1},
	} {
		if _, err := New(withCEL(opts)); !errors.Is(err, ErrBadOptions) {
			t.Errorf("%s: New = %v, want ErrBadOptions", name, err)
		}
	}
}
