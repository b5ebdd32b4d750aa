package cnipolicy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/api/bounds/boundstest"
)

// The configuration types of the reference plugins
// (containernetworking/plugins), as each plugin decodes its stdin with
// encoding/json: the fields that name host objects, change the node or
// name the executables to run.
type (
	netConf struct {
		Type string `json:"type"`
		IPAM struct {
			Type string `json:"type"`
		} `json:"ipam"`
	}
	macvlanConf struct { // plugins/main/macvlan and ipvlan
		netConf
		Master string `json:"master"`
		Mode   string `json:"mode"`
	}
	vlanConf struct { // plugins/main/vlan
		netConf
		Master string `json:"master"`
		VlanID int    `json:"vlanId"`
	}
	bridgeConf struct { // plugins/main/bridge
		netConf
		BrName       string `json:"bridge"`
		IsGW         bool   `json:"isGateway"`
		IsDefaultGW  bool   `json:"isDefaultGateway"`
		ForceAddress bool   `json:"forceAddress"`
		IPMasq       bool   `json:"ipMasq"`
		HairpinMode  bool   `json:"hairpinMode"`
		PromiscMode  bool   `json:"promiscMode"`
		Vlan         int    `json:"vlan"`
		VlanTrunk    []any  `json:"vlanTrunk,omitempty"`
		MacSpoofChk  bool   `json:"macspoofchk,omitempty"`
		PortIsolate  bool   `json:"portIsolation"`
	}
	hostDeviceConf struct { // plugins/main/host-device
		netConf
		Device        string `json:"device"`
		HWAddr        string `json:"hwaddr"`
		KernelPath    string `json:"kernelpath"`
		PCIAddr       string `json:"pciBusID"`
		RuntimeConfig struct {
			DeviceID string `json:"deviceID,omitempty"`
		} `json:"runtimeConfig,omitempty"`
	}
	hostLocalNet struct { // plugins/ipam/host-local/backend/allocator
		IPAM *struct {
			Type       string `json:"type"`
			DataDir    string `json:"dataDir"`
			ResolvConf string `json:"resolvConf"`
		} `json:"ipam"`
	}
	tuningConf struct { // plugins/meta/tuning
		netConf
		SysCtl   map[string]string `json:"sysctl"`
		Promisc  bool              `json:"promisc,omitempty"`
		Allmulti *bool             `json:"allmulti,omitempty"`
		Args     *struct {
			A *struct {
				SysCtl   *map[string]string `json:"sysctl"`
				Promisc  *bool              `json:"promisc,omitempty"`
				Allmulti *bool              `json:"allmulti,omitempty"`
			} `json:"cni"`
		} `json:"args"`
	}
	portMapConf struct { // plugins/meta/portmap
		netConf
		ConditionsV4         *[]string `json:"conditionsV4"`
		ConditionsV6         *[]string `json:"conditionsV6"`
		ExternalSetMarkChain *string   `json:"externalSetMarkChain"`
		RuntimeConfig        struct {
			PortMaps []struct {
				HostPort      int    `json:"hostPort"`
				ContainerPort int    `json:"containerPort"`
				Protocol      string `json:"protocol"`
				HostIP        string `json:"hostIP,omitempty"`
			} `json:"portMappings,omitempty"`
		} `json:"runtimeConfig,omitempty"`
	}
)

// effective are the sysctls tuning writes and the options it turns on,
// as its parseConf reads them: args.cni's sysctls merged into its own,
// args.cni's promisc and allmulti over its own.
func (c tuningConf) effective() (sysctls map[string]string, promisc, allmulti bool) {
	sysctls = map[string]string{}
	for k, v := range c.SysCtl {
		sysctls[k] = v
	}
	promisc = c.Promisc
	if c.Allmulti != nil {
		allmulti = *c.Allmulti
	}
	if c.Args != nil && c.Args.A != nil {
		if a := c.Args.A.SysCtl; a != nil {
			for k, v := range *a {
				sysctls[k] = v
			}
		}
		if a := c.Args.A.Promisc; a != nil {
			promisc = *a
		}
		if a := c.Args.A.Allmulti; a != nil {
			allmulti = *a
		}
	}
	return sysctls, promisc, allmulti
}

// FuzzPluginView: the policy's view of a configuration (Inspect) and what
// the plugins' own decoding reads from it never disagree on a plugin
// type, a host device, a host path, a host-changing option (a passthru
// macvlan among them) or a VLAN of the master. A view with problems is
// refused whatever the policy, so it need not agree. The view and a
// claim's refusal of it take at most boundstest.Budget and say at most
// bounds.MessageBytes.
func FuzzPluginView(f *testing.F) {
	for _, seed := range []string{
		`{"type": "macvlan", "master": "eth0", "ipam": {"type": "host-local", "dataDir": "/var/lib/cni"}}`,
		`{"type": "macvlan", "IPAM": {"type": "host-device"}, "Device": "eth0"}`,
		`{"Type": "ipvlan", "MASTER": "eth0"}`,
		`{"type": "vlan", "maſter": "eth0", "vlanId": 7}`,
		`{"type": "macvlan", "master": null}`,
		`{"type": "bridge", "isGateway": true, "IPMASQ": true, "vlan": 3, "vlanTrunk": [{"id": 4}], "ipam": {"type": "host-local", "ResolvConf": "/etc/resolv.conf"}}`,
		`{"type": "host-device", "PCIBusID": "0000:00:03.0", "RuntimeConfig": {"DeviceID": "0000:00:04.0"}, "KERNELPATH": "/sys/x"}`,
		`{"type": "tuning", "sysctl": {"kernel.core_pattern": "|/x", "net.ipv4.ip_forward": "1"}}`,
		`{"type": "bridge", "bridge": "", "hairpinMode": false}`,
		`{"type": "macvlan", "master": "a", "master": "b"}`,
		`{"type": "macvlan", "Master": "ens1f0", "MODE": "passthru"}`,
		`{"type": "macvlan", "master": "ens1f0", "mode": "PASSTHRU"}`,
		`{"type": "vlan", "master": "ens1f0", "VLANID": 42}`,
		`{"type": "vlan", "master": "ens1f0", "vlanId": -0}`,
		`{"type": "vlan", "master": "ens1f0", "vlanId": null}`,
		`{"type": "vlan", "master": "ens1f0", "vlanId": 1e2}`,
		`{"type": "tuning", "sysctl": {}, "args": {"cni": {"sysctl": {"kernel.core_pattern": "|/x"}, "promisc": true}}}`,
		`{"type": "tuning", "promisc": true, "ARGS": {"Cni": {"PROMISC": false, "allmulti": true}}}`,
		`{"type": "tuning", "args": {"cni": {"promisc": null}}, "promisc": true}`,
		`{"type": "portmap", "runtimeConfig": {"portMappings": [{"hostPort": 22, "containerPort": 22}]}, "conditionsV4": ["-s", "1.2.3.4"]}`,
		`{"type": "portmap", "externalSetMarkChain": "KUBE-MARK-MASQ", "RUNTIMECONFIG": {"PortMappings": []}}`,
		`{"type": "macvlan", "a": [` + strings.TrimSuffix(strings.Repeat(`"/a",`, 2000), ",") + `]}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data string) {
		var conf map[string]any
		if json.Unmarshal([]byte(data), &conf) != nil {
			return
		}
		var v View
		boundstest.Check(t, func() string {
			v = Inspect(conf)
			return bounds.Join(hostObjects(v, nil, field.NewPath("plugins").Index(0), nil, false))
		})
		if len(v.Problems) > 0 {
			return
		}
		var nc netConf
		if json.Unmarshal([]byte(data), &nc) != nil {
			return
		}
		var want []string
		if nc.Type != "" {
			want = append(want, nc.Type)
		}
		if nc.IPAM.Type != "" {
			want = append(want, nc.IPAM.Type)
		}
		var got []string
		for _, tr := range v.Types {
			got = append(got, tr.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: the plugin runs %q, the policy sees %q", data, want, got)
		}
		has := func(kind Kind, field, value string, omitted bool) {
			t.Helper()
			if !slices.ContainsFunc(v.Refs, func(r Ref) bool {
				return r.Kind == kind && r.Value == value && r.Omitted == omitted && (field == "" || r.Field == field)
			}) {
				t.Errorf("%s: the plugin reads %s %q (omitted %v), the policy sees %+v", data, field, value, omitted, v.Refs)
			}
		}
		decode := func(into any) bool { return json.Unmarshal([]byte(data), into) == nil }
		master := func(m string) {
			t.Helper()
			if m == "" {
				has(HostDevice, "master", DefaultRouteLink, true)
			} else {
				has(HostDevice, "master", m, false)
			}
		}
		switch nc.Type {
		case "macvlan", "ipvlan":
			var c macvlanConf
			if !decode(&c) {
				return
			}
			master(c.Master)
			if nc.Type == "macvlan" && c.Mode == "passthru" &&
				!slices.ContainsFunc(v.Refs, func(r Ref) bool { return r.Kind == HostOption && r.Field == "passthru" && r.OfMaster }) {
				t.Errorf("%s: macvlan takes its master whole (passthru), the policy sees %+v", data, v.Refs)
			}
		case "vlan":
			var c vlanConf
			if !decode(&c) {
				return
			}
			master(c.Master)
			if id := strconv.Itoa(c.VlanID); !slices.ContainsFunc(v.Refs, func(r Ref) bool { return r.Kind == HostVLAN && r.Value == id && r.OfMaster }) {
				t.Errorf("%s: vlan makes VLAN %s of its master, the policy sees %+v", data, id, v.Refs)
			}
		case "bridge":
			var c bridgeConf
			if !decode(&c) {
				return
			}
			if c.BrName == "" {
				has(HostDevice, "bridge", "cni0", true)
			} else {
				has(HostDevice, "bridge", c.BrName, false)
			}
			for field, on := range map[string]bool{"isGateway": c.IsGW, "isDefaultGateway": c.IsDefaultGW, "forceAddress": c.ForceAddress,
				"ipMasq": c.IPMasq, "hairpinMode": c.HairpinMode, "promiscMode": c.PromiscMode, "vlan": c.Vlan != 0,
				"vlanTrunk": len(c.VlanTrunk) > 0, "macspoofchk": c.MacSpoofChk, "portIsolation": c.PortIsolate} {
				if on && !slices.ContainsFunc(v.Refs, func(r Ref) bool { return r.Kind == HostOption && r.Field == field }) {
					t.Errorf("%s: bridge turns on %s, the policy sees %+v", data, field, v.Refs)
				}
			}
		case "host-device":
			var c hostDeviceConf
			if !decode(&c) {
				return
			}
			for field, value := range map[string]string{"device": c.Device, "hwaddr": c.HWAddr, "kernelpath": c.KernelPath,
				"pciBusID": c.PCIAddr, "deviceID": c.RuntimeConfig.DeviceID} {
				if value != "" {
					has(HostDevice, field, value, false)
				}
			}
		case "tuning":
			var c tuningConf
			if !decode(&c) {
				return
			}
			sysctls, promisc, allmulti := c.effective()
			for name := range sysctls {
				if !podSysctl(name) {
					has(HostOption, "sysctl", name, false)
				}
			}
			hasOption := func(field string, on bool) {
				t.Helper()
				if on && !slices.ContainsFunc(v.Refs, func(r Ref) bool { return r.Kind == HostOption && r.Field == field }) {
					t.Errorf("%s: tuning turns on %s, the policy sees %+v", data, field, v.Refs)
				}
			}
			hasOption("promisc", promisc)
			hasOption("allmulti", allmulti)
		case "portmap":
			var c portMapConf
			if !decode(&c) {
				return
			}
			for field, on := range map[string]bool{"portMappings": len(c.RuntimeConfig.PortMaps) > 0,
				"conditionsV4": c.ConditionsV4 != nil && len(*c.ConditionsV4) > 0, "conditionsV6": c.ConditionsV6 != nil && len(*c.ConditionsV6) > 0,
				"externalSetMarkChain": c.ExternalSetMarkChain != nil && *c.ExternalSetMarkChain != ""} {
				if on && !slices.ContainsFunc(v.Refs, func(r Ref) bool { return r.Kind == HostOption && r.Field == field }) {
					t.Errorf("%s: portmap sets %s, the policy sees %+v", data, field, v.Refs)
				}
			}
		}
		if nc.IPAM.Type == "host-local" {
			var n hostLocalNet
			if !decode(&n) || n.IPAM == nil {
				return
			}
			for _, p := range []string{n.IPAM.DataDir, n.IPAM.ResolvConf} {
				if p != "" {
					has(HostPath, "", p, false)
				}
			}
		}
	})
}

// The fuzz target's decoders are the plugins': a key in any letter case
// sets the field.
func TestPluginDecodersFold(t *testing.T) {
	var c hostDeviceConf
	if err := json.Unmarshal([]byte(`{"TYPE": "host-device", "DEVICE": "eth0", "ruNtimeconfig": {"DEVICEID": "x"}}`), &c); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintln(c.Type, c.Device, c.RuntimeConfig.DeviceID); got != "host-device eth0 x\n" {
		t.Errorf("decoded %q", got)
	}
}
