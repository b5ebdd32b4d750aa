package chart

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/devices/filter"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
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

// TestDeviceClassesPinMode: every class of the chart that sets a mode pins
// it (its selector is written for that mode), and a claim asking another
// mode of it is refused naming the class.
func TestDeviceClassesPinMode(t *testing.T) {
	classes := deviceClasses(t, render(t))
	pinned := 0
	for name, class := range classes {
		if len(class.Spec.Config) == 0 {
			continue
		}
		m := v1alpha1.Merge{ClassName: name}
		for i, c := range class.Spec.Config {
			if errs := m.AddClass(c.Opaque.Parameters.Raw, field.NewPath("class").Index(i)); len(errs) > 0 {
				t.Fatalf("%s: %v", name, errs)
			}
		}
		other := v1alpha1.ModeVFIO
		if name == "vfio.fastpath.dev" {
			other = v1alpha1.ModeNetdev
		}
		m.AddClaim([]byte(`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "mode": "`+other+`"}`), field.NewPath("claim"))
		cfg, errs := m.Config()
		if cfg.Mode == "" || !slices.Contains(cfg.Pinned, "mode") {
			t.Errorf("%s: mode %q, pinned %q", name, cfg.Mode, cfg.Pinned)
			continue
		}
		if len(errs) == 0 || !strings.Contains(errs[0].Error(), "claim.mode: Forbidden: DeviceClass "+name+" pins mode") {
			t.Errorf("%s: a claim asking mode %s: %v", name, other, errs)
		}
		pinned++
	}
	if pinned != 6 {
		t.Errorf("%d classes pin their mode, want 6 (every class but memif's)", pinned)
	}
}

// TestSharedClass: the chart's shared.fastpath.dev pins the mode of
// share.class.mode and says in its sharedParent what claims may do to the
// shared device: by default a bridge, private or vepa macvlan, no
// passthru, no VLAN, no RDMA management devices (a config's without a
// sharedParent, which the class leaves out); with the values, what they
// allow.
func TestSharedClass(t *testing.T) {
	head := `"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig"`
	for _, tc := range []struct {
		name   string
		args   []string
		parent bool              // the class's config has a sharedParent
		claims map[string]string // claim config -> the error it gets, "" none
	}{
		{name: "default", claims: map[string]string{
			`"macvlan": {"mode": "bridge"}`:                  "",
			`"macvlan": {"mode": "vepa"}`:                    "",
			`"macvlan": {"mode": "passthru"}`:                "claim.macvlan.mode: Forbidden: macvlan mode passthru is not among those DeviceClass shared.fastpath.dev allows on its shared devices (bridge, private, vepa)",
			`"rdma": {"umad": true}`:                         "claim.rdma.umad: Forbidden: DeviceClass shared.fastpath.dev does not allow the management datagram devices",
			`"mode": "vlan", "vlan": {"id": 100}`:            `claim.mode: Forbidden: DeviceClass shared.fastpath.dev pins mode to "macvlan"`,
			`"mode": "ipvlan"`:                               `claim.mode: Forbidden: DeviceClass shared.fastpath.dev pins mode to "macvlan"`,
			`"sharedParent": {"macvlanModes": ["passthru"]}`: "claim.sharedParent: Forbidden: only a DeviceClass's config",
		}},
		{name: "all values", args: []string{"--values", chartFile(t, "ci/all-values.yaml")}, parent: true, claims: map[string]string{
			`"vlan": {"id": 100}`:                         "",
			`"vlan": {"id": 250, "protocol": "802.1ad"}`:  "",
			`"vlan": {"id": 300}`:                         "claim.vlan.id: Forbidden: VLAN 300 is not among the VLAN IDs DeviceClass shared.fastpath.dev allows on its shared devices (100, 200-299)",
			`"vlan": {"id": 100}, "rdma": {"umad": true}`: "",
			`"mode": "macvlan"`:                           `claim.mode: Forbidden: DeviceClass shared.fastpath.dev pins mode to "vlan"`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class := deviceClasses(t, render(t, tc.args...))["shared.fastpath.dev"]
			if class == nil || len(class.Spec.Config) != 1 {
				t.Fatalf("shared.fastpath.dev = %+v", class)
			}
			// The defaults are a config's without one: left out, a
			// release older than sharedParent prepares the class's claims.
			var cfg v1alpha1.InterfaceConfig
			if err := json.Unmarshal(class.Spec.Config[0].Opaque.Parameters.Raw, &cfg); err != nil {
				t.Fatal(err)
			}
			if (cfg.SharedParent != nil) != tc.parent {
				t.Errorf("sharedParent %+v, want one: %v", cfg.SharedParent, tc.parent)
			}
			for claim, want := range tc.claims {
				m := v1alpha1.Merge{ClassName: class.Name}
				errs := m.AddClass(class.Spec.Config[0].Opaque.Parameters.Raw, field.NewPath("class"))
				errs = append(errs, m.AddClaim([]byte(`{`+head+`, `+claim+`}`), field.NewPath("claim"))...)
				cfg, merged := m.Config()
				errs = append(errs, merged...)
				if len(errs) == 0 {
					cfg.Default("net1")
					errs = cfg.Validate()
				}
				switch {
				case want == "" && len(errs) > 0:
					t.Errorf("%s: %v", claim, errs)
				case want != "" && (len(errs) == 0 || !strings.HasPrefix(errs[0].Error(), want)):
					t.Errorf("%s: errors %v, want %q", claim, errs, want)
				}
			}
		})
	}
}
