package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestParseVLANRange(t *testing.T) {
	for s, want := range map[string]VLANRange{"100": {100, 100}, "1": {1, 1}, "4094": {4094, 4094}, "100-199": {100, 199}, "7-7": {7, 7}} {
		if got, err := ParseVLANRange(s, 1); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", s, got, err, want)
		}
	}
	if got, err := ParseVLANRange("0-9", 0); err != nil || got != (VLANRange{0, 9}) {
		t.Errorf("0-9 from 0: %v, %v", got, err)
	}
	for s, want := range map[string]string{
		"0": "VLAN ID 0 is not between 1 and 4094", "4095": "not between 1 and 4094", "-5": `"" is not a VLAN ID`,
		"199-100": "the range 199-100 ends below its start", "100-": `"" is not a VLAN ID`, "1-2-3": `"2-3" is not a VLAN ID`,
		"0100": `"0100" is not a VLAN ID`, " 5": `" 5" is not a VLAN ID`, "+5": `"+5" is not a VLAN ID`, "x": `"x" is not a VLAN ID`,
	} {
		if _, err := ParseVLANRange(s, 1); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", s, err, want)
		}
	}
	list := []string{"100-199", "300", "bad"}
	for id, want := range map[int]bool{99: false, 100: true, 150: true, 199: true, 200: false, 300: true, 301: false, 0: false} {
		if got := VLANIDsAllow(list, 1, id); got != want {
			t.Errorf("VLANIDsAllow(%v, %d) = %v", list, id, got)
		}
	}
}

func TestValidateSharedParent(t *testing.T) {
	ok := InterfaceConfig{Mode: ModeMacvlan, SharedParent: &SharedParent{MacvlanModes: []string{MacvlanBridge, MacvlanPassthru},
		VLANIDs: []string{"1", "100-199", "4094"}, VLANProtocols: []string{VLANProto8021Q, VLANProto8021AD}, RDMAUMAD: true}}
	ok.Default("net1")
	if errs := ok.Validate(); len(errs) > 0 {
		t.Errorf("valid section: %v", errs)
	}
	bad := InterfaceConfig{Mode: ModeMacvlan, SharedParent: &SharedParent{MacvlanModes: []string{"source", MacvlanBridge, MacvlanBridge},
		VLANIDs: []string{"0", "200-100", "4095", "5"}, VLANProtocols: []string{"qinq", VLANProto8021AD}}}
	bad.Default("net1")
	want := []string{
		`sharedParent.macvlanModes[0]: Unsupported value: "source"`,
		`sharedParent.macvlanModes[2]: Duplicate value: "bridge"`,
		`sharedParent.vlanProtocols[0]: Unsupported value: "qinq"`,
		`sharedParent.vlanIDs[0]: Invalid value: "0": VLAN ID 0 is not between 1 and 4094`,
		`sharedParent.vlanIDs[1]: Invalid value: "200-100": the range 200-100 ends below its start`,
		`sharedParent.vlanIDs[2]: Invalid value: "4095"`,
	}
	errs := bad.Validate()
	if len(errs) != len(want) {
		t.Fatalf("errors %v, want %d", errs, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(errs[i].Error(), w) {
			t.Errorf("error %d:\n%s\nwant\n%s", i, errs[i], w)
		}
	}
}

// A DeviceClass's sharedParent says what its claims may do to a shared
// device: left out, bridge, private and vepa macvlans, no VLAN, 802.1q
// only, no RDMA management devices; a claim asking for more is refused
// naming the field, the class and what it allows; a class may allow more;
// a claim's config may not set sharedParent, in any spelling.
func TestMergeSharedParent(t *testing.T) {
	head := `"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig"`
	chart := `{` + head + `, "mode": "macvlan", "pinned": ["mode"]}`
	free := `{` + head + `, "mode": "macvlan"}`
	allowing := `{` + head + `, "mode": "macvlan", "sharedParent": {"macvlanModes": ["bridge", "passthru"], "vlanIDs": ["100-199", "300"], ` +
		`"vlanProtocols": ["802.1q", "802.1ad"], "rdmaUMAD": true}}`
	for _, tc := range []struct {
		name    string
		classes []string
		claims  []string
		want    []string // errors, whole; none: merged
	}{
		{"bridge by default", []string{chart}, []string{`{` + head + `, "interface": {"name": "net1"}}`}, nil},
		{"private and vepa", []string{chart}, []string{`{` + head + `, "macvlan": {"mode": "private"}}`, `{` + head + `, "macvlan": {"mode": "vepa"}}`}, nil},
		{"passthru", []string{chart}, []string{`{` + head + `, "macvlan": {"mode": "passthru"}}`}, []string{
			`claim[0].macvlan.mode: Forbidden: macvlan mode passthru is not among those DeviceClass shared.example.com allows on its shared devices (bridge, private, vepa): ` +
				`a passthru macvlan takes the device from every claim sharing it (the device turns promiscuous, its MAC is the pod's to change, and no other macvlan can be made on it); ` +
				`use one of them, or ask the operator for a DeviceClass whose config allows it (sharedParent.macvlanModes; for the chart's shared.fastpath.dev, value share.class.macvlanModes)`}},
		{"passthru allowed", []string{allowing}, []string{`{` + head + `, "macvlan": {"mode": "passthru"}}`}, nil},
		{"private, where the class allows bridge and passthru", []string{allowing}, []string{`{` + head + `, "macvlan": {"mode": "private"}}`}, []string{
			`claim[0].macvlan.mode: Forbidden: macvlan mode private is not among those DeviceClass shared.example.com allows on its shared devices (bridge, passthru); use one of them`}},
		{"bridge left out, where the class allows passthru alone", []string{`{` + head + `, "mode": "macvlan", "sharedParent": {"macvlanModes": ["passthru"]}}`}, nil, []string{
			`macvlan.mode: Forbidden: macvlan mode bridge is not among those DeviceClass shared.example.com allows on its shared devices (passthru)`}},
		{"a VLAN", []string{free}, []string{`{` + head + `, "mode": "vlan", "vlan": {"id": 42}}`}, []string{
			`claim[0].vlan.id: Forbidden: VLAN 42 is not among the VLAN IDs DeviceClass shared.example.com allows on its shared devices (none): ` +
				`a VLAN of a shared device is a network of the node's, the operator's to give; ask the operator for a DeviceClass whose config allows it (sharedParent.vlanIDs; ` +
				`for the chart's shared.fastpath.dev, value share.class.vlanIDs)`}},
		{"VLANs allowed", []string{allowing}, []string{`{` + head + `, "mode": "vlan", "vlan": {"id": 150}}`, `{` + head + `, "vlan": {"id": 300, "protocol": "802.1ad"}}`}, nil},
		{"a VLAN outside the class's", []string{allowing}, []string{`{` + head + `, "mode": "vlan", "vlan": {"id": 200}}`}, []string{
			`claim[0].vlan.id: Forbidden: VLAN 200 is not among the VLAN IDs DeviceClass shared.example.com allows on its shared devices (100-199, 300)`}},
		{"802.1ad", []string{`{` + head + `, "mode": "vlan", "sharedParent": {"vlanIDs": ["7"]}}`}, []string{`{` + head + `, "vlan": {"id": 7, "protocol": "802.1ad"}}`}, []string{
			`claim[0].vlan.protocol: Forbidden: VLAN protocol 802.1ad is not among those DeviceClass shared.example.com allows on its shared devices (802.1q): an 802.1ad sub-interface carries every VLAN inside its own`}},
		{"the class's VLAN IDs and a later class config's protocols", []string{`{` + head + `, "mode": "vlan", "sharedParent": {"vlanIDs": ["7"]}}`, `{` + head + `, "sharedParent": {"vlanProtocols": ["802.1ad"]}}`},
			[]string{`{` + head + `, "vlan": {"id": 7, "protocol": "802.1ad"}}`}, nil},
		{"RDMA management devices", []string{free}, []string{`{` + head + `, "rdma": {"umad": true}}`}, []string{
			`claim[0].rdma.umad: Forbidden: DeviceClass shared.example.com does not allow the management datagram devices (umadN) of its shared devices' RDMA devices: ` +
				`every claim on the device would hold them, and with them InfiniBand management of its ports; leave umad out`}},
		{"RDMA management devices allowed", []string{allowing}, []string{`{` + head + `, "rdma": {"umad": true}}`}, nil},
		{"RDMA management devices of a device of its own", []string{`{` + head + `, "mode": "netdev"}`}, []string{`{` + head + `, "rdma": {"umad": true}}`}, nil},
		{"the class's own passthru", []string{`{` + head + `, "mode": "macvlan", "macvlan": {"mode": "passthru"}}`}, nil, []string{
			`class[0].macvlan.mode: Forbidden: macvlan mode passthru is not among those DeviceClass shared.example.com allows`}},
		{"sharedParent in a claim", []string{chart}, []string{`{` + head + `, "sharedParent": {"macvlanModes": ["passthru"]}, "macvlan": {"mode": "passthru"}}`}, []string{
			`claim[0].sharedParent: Forbidden: only a DeviceClass's config says what its claims may do to a shared device: a claim's config may not set sharedParent`,
			`claim[0].macvlan.mode: Forbidden: macvlan mode passthru is not among those DeviceClass shared.example.com allows on its shared devices (bridge, private, vepa)`}},
		{"sharedParent null in a claim", []string{allowing}, []string{`{` + head + `, "sharedParent": null, "macvlan": {"mode": "passthru"}}`}, []string{
			`claim[0].sharedParent: Forbidden: only a DeviceClass's config`}},
		{"SharedParent in a claim", []string{chart}, []string{`{` + head + `, "SharedParent": {"rdmaUMAD": true}}`}, []string{
			`claim[0].SharedParent: Forbidden: unknown field`}},
		{"sharedparent in YAML", []string{chart}, []string{"apiVersion: fastpath.dev/v1alpha1\nkind: InterfaceConfig\nsharedparent: {rdmaUMAD: true}\n"}, []string{
			`claim[0].sharedparent: Forbidden: unknown field`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := Merge{ClassName: "shared.example.com"}
			var errs field.ErrorList
			for i, c := range tc.classes {
				errs = append(errs, m.AddClass([]byte(c), field.NewPath("class").Index(i))...)
			}
			for i, c := range tc.claims {
				errs = append(errs, m.AddClaim([]byte(c), field.NewPath("claim").Index(i))...)
			}
			cfg, mergeErrs := m.Config()
			errs = append(errs, mergeErrs...)
			if len(errs) != len(tc.want) {
				t.Fatalf("errors %v, want %d: %q", errs, len(tc.want), tc.want)
			}
			for i, want := range tc.want {
				if !strings.HasPrefix(errs[i].Error(), want) {
					t.Errorf("error %d:\n%s\nwant\n%s", i, errs[i], want)
				}
			}
			if strings.Contains(tc.name, "in a claim") && cfg.SharedParent != nil && len(cfg.SharedParent.MacvlanModes) == 1 {
				t.Errorf("the claim's sharedParent was kept: %+v", cfg.SharedParent)
			}
		})
	}
}
