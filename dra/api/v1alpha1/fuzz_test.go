package v1alpha1

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// FuzzDecode: any document decodes without panicking, and a config that
// decodes and validates has the shape the daemon relies on and survives a
// round trip through JSON.
func FuzzDecode(f *testing.F) {
	f.Add(`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "mode": "netdev", "interface": {"name": "net1", "mtu": 9000, "addresses": ["10.0.0.2/24"]}}`)
	f.Add(`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "mode": "afxdp", "xdp": {"program": "xsk-redirect", "queues": 2}}`)
	f.Add("apiVersion: fastpath.dev/v1alpha1\nkind: InterfaceConfig\nvf: {vlan: 100, qos: 3, vlanProto: 802.1ad, minTxRateMbps: 10, maxTxRateMbps: 5}\n")
	f.Add(`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "interface": {"routes": [{"destination": "::/0", "gateway": "fd00::1"}]}}`)
	f.Add(`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "mode": "netdev", "mode": "vfio"}`)
	f.Add(`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "mode": "vlan", "vlan": {"id": 100}, "ipam": {"pool": "fast"}}`)
	f.Add(`[1, 2]`)
	f.Fuzz(func(t *testing.T, doc string) {
		var cfg InterfaceConfig
		if errs := DecodeInterfaceConfig([]byte(doc), &cfg, field.NewPath("p")); len(errs) > 0 {
			return
		}
		cfg.Default("nic")
		if errs := cfg.Validate(); len(errs) > 0 {
			return
		}
		switch cfg.Mode {
		case ModeNetdev, ModeAFXDP, ModeMacvlan, ModeIPVLAN, ModeVLAN:
			if cfg.Interface == nil || ValidInterfaceName(cfg.Interface.Name) != nil {
				t.Errorf("accepted %q without a valid interface name: %+v", doc, cfg.Interface)
			}
		case ModeVFIO:
		default:
			t.Errorf("accepted mode %q", cfg.Mode)
		}
		if v := cfg.VF; v != nil && v.VLAN != nil && (*v.VLAN < 0 || *v.VLAN > 4094) {
			t.Errorf("accepted VLAN %d", *v.VLAN)
		}
		data, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var again InterfaceConfig
		if errs := DecodeInterfaceConfig(data, &again, field.NewPath("p")); len(errs) > 0 {
			t.Fatalf("%s does not decode again: %v", data, errs)
		}
		if errs := again.Validate(); len(errs) > 0 {
			t.Fatalf("%s does not validate again: %v", data, errs)
		}
	})
}
