package claimspec

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds/boundstest"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/dratest"
)

// FuzzDecodeConfig: any opaque parameters decode without panicking,
// within boundstest.Budget, the claim's error saying at most
// bounds.MessageBytes; a config that decodes and validates has the shape
// the dataplane relies on.
func FuzzDecodeConfig(f *testing.F) {
	for _, seed := range dratest.ConfigSeeds() {
		f.Add(seed)
	}
	f.Add(dratest.InterfaceConfig(`"mode": "netdev", "interface": {"name": "net1", "mtu": 9000, "addresses": ["10.0.0.2/24"]}`))
	f.Add(dratest.InterfaceConfig(`"mode": "afxdp", "xdp": {"program": "xsk-redirect", "queues": 2}`))
	f.Add(dratest.InterfaceConfig(`"vf": {"vlan": 100, "qos": 3, "vlanProto": "802.1ad", "minTxRateMbps": 10, "maxTxRateMbps": 5}`))
	f.Add(dratest.InterfaceConfig(`"interface": {"routes": [{"destination": "::/0", "gateway": "fd00::1"}]}`))
	f.Add(`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "mode": "netdev", "mode": "vfio"}`)
	f.Add(`[1, 2]`)
	inv := dratest.InventoryMap(dratest.Inventory(f))
	dev := inv[dratest.VFNetdev]
	f.Fuzz(func(t *testing.T, raw string) {
		var cfg v1alpha1.InterfaceConfig
		var errs field.ErrorList
		boundstest.Check(t, func() string {
			if errs = v1alpha1.DecodeInterfaceConfig([]byte(raw), &cfg, field.NewPath("parameters")); len(errs) == 0 {
				cfg, errs = ConfigFor(cfg, "nic", dev)
			}
			if len(errs) == 0 {
				return ""
			}
			return (&ClaimError{Claim: "default/c", Request: "nic", Device: dev.Name, Errs: errs}).Error()
		})
		if len(errs) > 0 {
			return
		}
		switch cfg.Mode {
		case v1alpha1.ModeNetdev, v1alpha1.ModeAFXDP:
			if cfg.Interface == nil || v1alpha1.ValidInterfaceName(cfg.Interface.Name) != nil {
				t.Errorf("accepted %s without a valid interface name: %+v", raw, cfg.Interface)
			}
			if m := cfg.Interface.MTU; m != 0 && (m < dev.Netdev.MinMTU || m > dev.Netdev.MaxMTU) {
				t.Errorf("accepted MTU %d outside the device's range", m)
			}
		case v1alpha1.ModeVFIO:
		default:
			t.Errorf("accepted mode %q", cfg.Mode)
		}
		if cfg.VF != nil && cfg.VF.VLAN != nil && (*cfg.VF.VLAN < 0 || *cfg.VF.VLAN > 4094) {
			t.Errorf("accepted VLAN %d", *cfg.VF.VLAN)
		}
	})
}
