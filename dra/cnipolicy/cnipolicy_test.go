package cnipolicy

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// Fold agrees with strings.EqualFold, which is how encoding/json matches
// an object's keys to a struct's fields.
func TestFold(t *testing.T) {
	for _, pair := range [][2]string{
		{"master", "MASTER"}, {"master", "maſter"}, {"kernelpath", "Kernelpath"}, {"ipam", "IPAM"},
		{"runtimeConfig", "RUNTIMECONFIG"}, {"pciBusID", "PCIBUSID"}, {"master", "master"},
	} {
		if Fold(pair[0]) != Fold(pair[1]) || !strings.EqualFold(pair[0], pair[1]) {
			t.Errorf("%q and %q: folds %q and %q", pair[0], pair[1], Fold(pair[0]), Fold(pair[1]))
		}
	}
	for _, pair := range [][2]string{{"master", "mastr"}, {"ipam", "ipam "}, {"dataDir", "dataDır"}} {
		if Fold(pair[0]) == Fold(pair[1]) {
			t.Errorf("%q and %q fold alike", pair[0], pair[1])
		}
	}
	// encoding/json itself reads these keys into the field master.
	for _, key := range []string{"Master", "MASTER", "maſter", "mAsTeR"} {
		var c struct {
			Master string `json:"master"`
		}
		if err := json.Unmarshal([]byte(`{"`+key+`": "eth0"}`), &c); err != nil || c.Master != "eth0" {
			t.Errorf("encoding/json read %q as %q (%v)", key, c.Master, err)
		}
		if String(map[string]any{key: "eth0"}, "master") != "eth0" {
			t.Errorf("String does not read %q as master", key)
		}
	}
}

func TestInspect(t *testing.T) {
	for name, tc := range map[string]struct {
		config   string
		types    []string
		refs     []string // Kind Path=Value, "*" after the kind for omitted
		problems []string
	}{
		"macvlan named":  {config: `{"type": "macvlan", "master": "ens1f0"}`, types: []string{"macvlan"}, refs: []string{"host device master=ens1f0"}},
		"macvlan Master": {config: `{"type": "macvlan", "Master": "eth0"}`, types: []string{"macvlan"}, refs: []string{"host device Master=eth0"}},
		"macvlan left out": {config: `{"type": "macvlan", "ipam": {"type": "static"}}`, types: []string{"macvlan", "static"},
			refs: []string{"host device* master=" + DefaultRouteLink}},
		"macvlan empty": {config: `{"type": "macvlan", "master": ""}`, types: []string{"macvlan"}, refs: []string{"host device* master=" + DefaultRouteLink}},
		"vlan null":     {config: `{"type": "vlan", "MASTER": null, "vlanId": 4}`, types: []string{"vlan"}, refs: []string{"host device* master=" + DefaultRouteLink, "host VLAN vlanId=4"}},
		"IPAM's type": {config: `{"type": "macvlan", "master": "x", "IPAM": {"TYPE": "host-device"}, "Device": "eth0"}`, types: []string{"macvlan", "host-device"},
			refs: []string{"host device Device=eth0", "host device master=x"}},
		"bridge": {config: `{"type": "bridge", "isGateway": true, "ipMasq": false, "HairpinMode": true, "vlan": 0}`, types: []string{"bridge"},
			refs: []string{"host option HairpinMode=true", "host device* bridge=cni0", "host option isGateway=true"}},
		"host-local": {config: `{"type": "macvlan", "master": "x", "ipam": {"type": "host-local", "dataDir": "/var/lib/x", "ranges": [[{"subnet": "/etc"}]]}}`,
			types: []string{"macvlan", "host-local"}, refs: []string{"host path ipam.dataDir=/var/lib/x", "host path ipam.ranges[0][0].subnet=/etc", "host device master=x"}},
		"tuning": {config: `{"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.rp_filter": "0", "kernel.core_pattern": "x", "net/../kernel": "y"}}`, types: []string{"tuning"},
			refs: []string{"host option sysctl[kernel.core_pattern]=kernel.core_pattern", "host option sysctl[net/../kernel]=net/../kernel"}},
		// tuning reads args.cni (where a pod's cni-args go) over its own
		// fields, and merges its sysctls.
		"tuning's args.cni": {config: `{"type": "tuning", "sysctl": {"net.ipv4.ip_forward": "1"}, "args": {"cni": {"sysctl": {"kernel.core_pattern": "|/x", "net.core.somaxconn": "9"}, "promisc": true}}}`,
			types: []string{"tuning"}, refs: []string{"host option args.cni.promisc=true", "host option args.cni.sysctl[kernel.core_pattern]=kernel.core_pattern"}},
		"tuning's ARGS.Cni in capitals": {config: `{"type": "tuning", "ARGS": {"Cni": {"SYSCTL": {"vm.overcommit_memory": "1"}, "AllMulti": true}}}`,
			types: []string{"tuning"}, refs: []string{"host option ARGS.Cni.AllMulti=true", "host option ARGS.Cni.SYSCTL[vm.overcommit_memory]=vm.overcommit_memory"}},
		"tuning's args.cni turning promisc off": {config: `{"type": "tuning", "promisc": true, "args": {"cni": {"promisc": false}}}`, types: []string{"tuning"}},
		"tuning's args.cni null":                {config: `{"type": "tuning", "promisc": true, "args": {"cni": {"promisc": null}}}`, types: []string{"tuning"}, refs: []string{"host option promisc=true"}},
		"args.cni of a plugin that does not read it": {config: `{"type": "bridge", "bridge": "br1", "args": {"cni": {"sysctl": {"kernel.x": "1"}, "isGateway": true}}}`,
			types: []string{"bridge"}, refs: []string{"host device bridge=br1"}},
		"portmap": {config: `{"type": "portmap", "RuntimeConfig": {"portMappings": [{"hostPort": 22, "containerPort": 2222}]}, "conditionsV4": ["-s", "10.0.0.0/8"]}`,
			types: []string{"portmap"}, refs: []string{"host option RuntimeConfig.portMappings=[map[containerPort:2222 hostPort:22]]", "host option conditionsV4=[-s 10.0.0.0/8]"}},
		"spelled twice": {config: `{"type": "macvlan", "master": "a", "Master": "b"}`, types: []string{"macvlan"},
			refs: []string{"host device Master=b", "host device master=a"}, problems: []string{`the keys "Master" and "master" set one field`}},
		"macvlan passthru": {config: `{"type": "macvlan", "master": "x", "MODE": "PassThru"}`, types: []string{"macvlan"},
			refs: []string{"host option MODE=PassThru", "host device master=x"}},
		"macvlan bridge":  {config: `{"type": "macvlan", "master": "x", "mode": "bridge"}`, types: []string{"macvlan"}, refs: []string{"host device master=x"}},
		"ipvlan passthru": {config: `{"type": "ipvlan", "master": "x", "mode": "passthru"}`, types: []string{"ipvlan"}, refs: []string{"host device master=x"}},
		"vlan":            {config: `{"type": "vlan", "master": "x", "VlanID": 7}`, types: []string{"vlan"}, refs: []string{"host VLAN VlanID=7", "host device master=x"}},
		"vlan left out":   {config: `{"type": "vlan", "master": "x"}`, types: []string{"vlan"}, refs: []string{"host device master=x", "host VLAN* vlanId=0"}},
		"vlan a string":   {config: `{"type": "vlan", "master": "x", "vlanId": "7"}`, types: []string{"vlan"}, refs: []string{"host device master=x", "host VLAN vlanId=7"}},
		"vlan a fraction": {config: `{"type": "vlan", "master": "x", "vlanId": 7.5}`, types: []string{"vlan"}, refs: []string{"host device master=x", "host VLAN vlanId=7.5"}},
		"type spelled twice": {config: `{"type": "macvlan", "Type": "host-device"}`,
			refs: nil, problems: []string{`the keys "Type" and "type" set one field`}},
	} {
		t.Run(name, func(t *testing.T) {
			var conf map[string]any
			if err := json.Unmarshal([]byte(tc.config), &conf); err != nil {
				t.Fatal(err)
			}
			v := Inspect(conf)
			var types, refs []string
			for _, tr := range v.Types {
				types = append(types, tr.Name)
			}
			for _, r := range v.Refs {
				omitted := ""
				if r.Omitted {
					omitted = "*"
				}
				refs = append(refs, r.Kind.String()+omitted+" "+r.Path+"="+r.Value)
			}
			if !slices.Equal(types, tc.types) {
				t.Errorf("types %q, want %q", types, tc.types)
			}
			if !slices.Equal(refs, tc.refs) {
				t.Errorf("refs %q, want %q", refs, tc.refs)
			}
			if len(v.Problems) != len(tc.problems) {
				t.Fatalf("problems %q, want %q", v.Problems, tc.problems)
			}
			for i, p := range tc.problems {
				if !strings.Contains(v.Problems[i], p) {
					t.Errorf("problem %q, want %q in it", v.Problems[i], p)
				}
			}
		})
	}
}

func TestPolicy(t *testing.T) {
	ref := func(kind Kind, field, value string, omitted bool) Ref {
		return Ref{Kind: kind, Path: field, Field: field, Value: value, Omitted: omitted}
	}
	p := Policy{Devices: []string{"ens1f*", "cni0"}, Paths: []string{"/var/lib/cni"}, Options: []string{"bridge.ipMasq", "macvlan.passthru"}, VLANIDs: []string{"7", "100-199"}}
	for _, tc := range []struct {
		typ  string
		ref  Ref
		want bool
	}{
		{"macvlan", ref(HostDevice, "master", "ens1f0", false), true},
		{"macvlan", ref(HostDevice, "master", "eth0", false), false},
		{"macvlan", ref(HostDevice, "master", DefaultRouteLink, true), false},
		{"bridge", ref(HostDevice, "bridge", "cni0", true), true},
		{"bridge", ref(HostOption, "ipMasq", "true", false), true},
		{"bridge", ref(HostOption, "isGateway", "true", false), false},
		{"host-local", ref(HostPath, "dataDir", "/var/lib/cni/x", false), true},
		{"host-local", ref(HostPath, "dataDir", "/var/lib/cni/../../etc", false), false},
		{"host-local", ref(HostPath, "dataDir", "/var/lib/cnix", false), false},
		{"macvlan", ref(HostOption, "passthru", "passthru", false), true},
		{"vlan", ref(HostVLAN, "vlanId", "150", false), true},
		{"vlan", ref(HostVLAN, "vlanId", "7", false), true},
		{"vlan", ref(HostVLAN, "vlanId", "8", false), false},
		{"vlan", ref(HostVLAN, "vlanId", "0", true), false},
		{"vlan", ref(HostVLAN, "vlanId", "7.5", false), false},
	} {
		if got := p.Allows(tc.typ, tc.ref); got != tc.want {
			t.Errorf("%s %+v: allowed %v, want %v", tc.typ, tc.ref, got, tc.want)
		}
	}
	all := Policy{Devices: []string{AllowAll}, Paths: []string{"/"}, Options: []string{AllowAll}}
	if !all.Allows("macvlan", ref(HostDevice, "master", DefaultRouteLink, true)) || !all.Allows("tuning", ref(HostOption, "sysctl", "kernel.x", false)) {
		t.Error("* does not allow all")
	}
	if err := (Policy{Devices: []string{"["}, Paths: []string{"rel", "/a/../b"}, Options: []string{"ipMasq"}, VLANIDs: []string{"0-4094", "5000", "9-1"}}).Validate(); err == nil ||
		!strings.Contains(err.Error(), `host device "["`) || !strings.Contains(err.Error(), `host path "rel"`) ||
		!strings.Contains(err.Error(), `host path "/a/../b"`) || !strings.Contains(err.Error(), `host option "ipMasq"`) ||
		strings.Contains(err.Error(), `"0-4094"`) || !strings.Contains(err.Error(), `VLAN IDs "5000": VLAN ID 5000 is not between 0 and 4094`) ||
		!strings.Contains(err.Error(), `VLAN IDs "9-1": the range 9-1 ends below its start`) {
		t.Errorf("Validate: %v", err)
	}
}

func TestMentionsFold(t *testing.T) {
	for data, want := range map[string]bool{
		`{"runtimeConfig": {}}`:       true,
		`{"RUNTIMECONFIG": {}}`:       true,
		`{"\u0052untimeConfig": {}}`:  true,
		`{"runtimeConfiG": {}}`:       true,
		`{"ſ": 1}`:                    true,
		`{"type": "macvlan"}`:         false,
		`{"runtime": {"config": {}}}`: false,
	} {
		if got := MentionsFold([]byte(data), "runtimeConfig"); got != want {
			t.Errorf("%s: %v, want %v", data, got, want)
		}
	}
}
