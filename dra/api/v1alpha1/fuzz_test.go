package v1alpha1

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/api/bounds/boundstest"
)

// FuzzDecode: any document decodes without panicking, within
// boundstest.Budget and saying at most bounds.MessageBytes; a config that
// decodes and validates has the shape the daemon relies on and survives a
// round trip through JSON.
func FuzzDecode(f *testing.F) {
	for _, seed := range boundSeeds() {
		f.Add(seed)
	}
	f.Add(`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "mode": "netdev", "interface": {"name": "net1", "mtu": 9000, "addresses": ["10.0.0.2/24"]}}`)
	f.Add(`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "mode": "afxdp", "xdp": {"program": "xsk-redirect", "queues": 2}}`)
	f.Add("apiVersion: fastpath.dev/v1alpha1\nkind: InterfaceConfig\nvf: {vlan: 100, qos: 3, vlanProto: 802.1ad, minTxRateMbps: 10, maxTxRateMbps: 5}\n")
	f.Add(`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "interface": {"routes": [{"destination": "::/0", "gateway": "fd00::1"}]}}`)
	f.Add(`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "mode": "netdev", "mode": "vfio"}`)
	f.Add(`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "mode": "vlan", "vlan": {"id": 100}, "ipam": {"pool": "fast"}}`)
	f.Add(`[1, 2]`)
	f.Fuzz(func(t *testing.T, doc string) {
		var cfg InterfaceConfig
		var errs field.ErrorList
		boundstest.Check(t, func() string {
			if errs = DecodeInterfaceConfig([]byte(doc), &cfg, field.NewPath("p")); len(errs) == 0 {
				cfg.Default("nic")
				errs = cfg.Validate()
			}
			return bounds.Join(errs)
		})
		if len(errs) > 0 {
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

// FuzzLoadMemifConfig: whatever the operator's file holds, loading it never
// panics, and what it accepts is valid. The file is in memory: the read is
// LoadMemifConfig's only other step.
func FuzzLoadMemifConfig(f *testing.F) {
	f.Add("apiVersion: fastpath.dev/v1alpha1\nkind: MemifConfig\nendpoints:\n- {name: fw0, role: slave, socketPath: /run/fw0.sock}\n")
	f.Add("apiVersion: fastpath.dev/v1alpha1\nkind: MemifConfig\nendpoints:\n- {name: a, role: master, mode: punt, socketPath: /a}\n- {name: b, role: slave, mode: ip, socketPath: /b}\n")
	f.Add(`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "MemifConfig", "endpoints": [{"name": "x"}]}`)
	f.Add("endpoints: [[[")
	const path = "/etc/fastpath/memif.yaml"
	f.Fuzz(func(t *testing.T, body string) {
		cfg, err := parseMemifConfig(path, []byte(body))
		if err != nil {
			if !strings.Contains(err.Error(), path) && !strings.Contains(err.Error(), "memif config") {
				t.Errorf("error %q names neither the file nor the memif config", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, e := range cfg.Endpoints {
			// A slave endpoint's socket is required; a master's is optional
			// (the pod creates the socket), and absolute when given.
			badPath := (e.Role == MemifRoleSlave || e.SocketPath != "") && !filepath.IsAbs(e.SocketPath)
			if len(validation.IsDNS1123Label(MemifDeviceName(e.Name))) > 0 || seen[e.Name] || badPath ||
				(e.Role != MemifRoleMaster && e.Role != MemifRoleSlave) ||
				(e.Mode != MemifModeEthernet && e.Mode != MemifModeIP && e.Mode != MemifModePunt) {
				t.Errorf("accepted an invalid endpoint %+v", e)
			}
			seen[e.Name] = true
		}
	})
}
