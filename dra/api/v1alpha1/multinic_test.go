package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// multiNIC is a config of everything a pod of several interfaces sets on
// one of them, in its JSON form.
const multiNIC = `{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "interface": {
  "name": "net1", "addresses": ["10.0.0.2/24"],
  "routes": [{"destination": "10.9.0.0/16", "gateway": "10.0.0.1", "table": 100, "metric": 50},
             {"destination": "10.0.0.0/24", "source": "10.0.0.2", "scope": "link", "table": 100}],
  "rules": [{"priority": 100, "from": "10.0.0.2/32", "table": 100}, {"oif": "net1", "fwmark": 7, "fwmask": 255, "table": 254}],
  "vrf": {"name": "blue", "table": 200},
  "neighbors": [{"address": "10.0.0.9", "mac": "02:00:00:00:00:09"}],
  "sysctls": {"ipv4.arp_ignore": "1", "ipv4.arp_announce": "2"},
  "ethtool": {"features": {"rx-gro": true, "tcp-segmentation-offload": false}, "privateFlags": {"link-down-on-close": true}},
  "gsoMaxSize": 196608, "groMaxSize": 196608, "gsoIPv4MaxSize": 196608, "groIPv4MaxSize": 196608}}`

// TestMultiNICDecode: every field decodes strictly and validates; each
// bad value is refused with its field named; outside modes netdev and
// afxdp each is refused by name; an IP pool's route takes none of a
// claim's route fields.
func TestMultiNICDecode(t *testing.T) {
	var c InterfaceConfig
	if errs := DecodeInterfaceConfig([]byte(multiNIC), &c, field.NewPath("config")); len(errs) > 0 {
		t.Fatalf("decode: %v", errs)
	}
	c.Default("nic")
	if errs := c.Validate(); len(errs) > 0 {
		t.Fatalf("validate: %v", errs)
	}
	i := c.Interface
	if i.Routes[0].Table != 100 || i.Routes[1].Scope != ScopeLink || i.Rules[1].FWMark == nil || *i.Rules[1].FWMask != 255 || i.VRF.Table != 200 ||
		i.Sysctls["ipv4.arp_announce"] != "2" || !i.Ethtool.Features["rx-gro"] || i.GROIPv4MaxSize != 196608 {
		t.Errorf("decoded %+v", i)
	}
	if got := i.MultiNIC(); len(got) != 10 {
		t.Errorf("MultiNIC() = %v, want all ten", got)
	}

	for name, tc := range map[string]struct {
		change func(*InterfaceSpec)
		want   string
	}{
		"main table":        {func(s *InterfaceSpec) { s.Routes[0].Table = 254 }, "interface.routes[0].table: Invalid value: 254: 253 and 254 are the kernel's default and main tables"},
		"local table rule":  {func(s *InterfaceSpec) { s.Rules[0].Table = 255 }, "interface.rules[0].table: Invalid value: 255: 255 is the kernel's local table"},
		"no rule table":     {func(s *InterfaceSpec) { s.Rules[0].Table = 0 }, "interface.rules[0].table: Invalid value: 0: must be between 1 and 4294967295"},
		"foreign source":    {func(s *InterfaceSpec) { s.Routes[1].Source = "10.0.0.3" }, "interface.routes[1].source: Invalid value: \"10.0.0.3\": must be one of the interface's addresses"},
		"scope":             {func(s *InterfaceSpec) { s.Routes[1].Scope = "site" }, "interface.routes[1].scope: Unsupported value: \"site\""},
		"link via gateway":  {func(s *InterfaceSpec) { s.Routes[0].Scope = "link" }, "interface.routes[0].scope: Invalid value: \"link\": a route through a gateway has scope universe"},
		"metric":            {func(s *InterfaceSpec) { s.Routes[0].Metric = 1 << 32 }, "interface.routes[0].metric"},
		"rule matches none": {func(s *InterfaceSpec) { s.Rules[0].From = "" }, "interface.rules[0]: Required value: a rule matches on at least one of from, to, iif, oif and fwmark"},
		"rule priority":     {func(s *InterfaceSpec) { s.Rules[0].Priority = 32766 }, "interface.rules[0].priority"},
		"rule prefix":       {func(s *InterfaceSpec) { s.Rules[0].From = "10.0.0.2/24" }, "interface.rules[0].from: Invalid value: \"10.0.0.2/24\": must be a canonical CIDR prefix"},
		"rule families":     {func(s *InterfaceSpec) { s.Rules[0].To = "fd00::/64" }, "interface.rules[0].to: Invalid value: \"fd00::/64\": must be of from's address family"},
		"mask without mark": {func(s *InterfaceSpec) { s.Rules[1].FWMark = nil }, "interface.rules[1].fwmark: Required value: fwmask masks fwmark"},
		"rule oif":          {func(s *InterfaceSpec) { s.Rules[1].OIF = "net/1" }, "interface.rules[1].oif"},
		"vrf name":          {func(s *InterfaceSpec) { s.VRF.Name = "net1" }, "interface.vrf.name: Invalid value: \"net1\": must differ from the interface's name"},
		"vrf table":         {func(s *InterfaceSpec) { s.VRF.Table = 0 }, "interface.vrf.table"},
		"neighbour address": {func(s *InterfaceSpec) { s.Neighbors[0].Address = "10.0.0" }, "interface.neighbors[0].address"},
		"neighbour MAC":     {func(s *InterfaceSpec) { s.Neighbors[0].MAC = "01:00:5e:00:00:01" }, "interface.neighbors[0].mac"},
		"duplicate neighbour": {func(s *InterfaceSpec) { s.Neighbors = append(s.Neighbors, s.Neighbors[0]) },
			"interface.neighbors[1].address: Duplicate value"},
		"sysctl name":    {func(s *InterfaceSpec) { s.Sysctls["ipv4/../../kernel.core_pattern"] = "1" }, `interface.sysctls[ipv4/../../kernel.core_pattern]: Invalid value`},
		"sysctl family":  {func(s *InterfaceSpec) { s.Sysctls["core.somaxconn"] = "1" }, "must be ipv4.<name> or ipv6.<name>"},
		"sysctl value":   {func(s *InterfaceSpec) { s.Sysctls["ipv4.arp_ignore"] = "1; reboot" }, `interface.sysctls[ipv4.arp_ignore]: Invalid value: "1; reboot": must be an integer`},
		"feature name":   {func(s *InterfaceSpec) { s.Ethtool.Features["RX GRO"] = true }, "interface.ethtool.features[RX GRO]"},
		"flag name":      {func(s *InterfaceSpec) { s.Ethtool.PrivateFlags[strings.Repeat("f", 33)] = true }, "interface.ethtool.privateFlags"},
		"gso above 512K": {func(s *InterfaceSpec) { s.GSOMaxSize = MaxOffloadSize + 1 }, "interface.gsoMaxSize: Invalid value: 524289: must be between 1 and 524288 bytes"},
		"negative gro":   {func(s *InterfaceSpec) { s.GROIPv4MaxSize = -1 }, "interface.groIPv4MaxSize"},
	} {
		t.Run(name, func(t *testing.T) {
			var c InterfaceConfig
			if errs := DecodeInterfaceConfig([]byte(multiNIC), &c, field.NewPath("config")); len(errs) > 0 {
				t.Fatal(errs)
			}
			c.Default("nic")
			tc.change(c.Interface)
			if errs := c.Validate(); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Errorf("errors = %v, want %q", errs, tc.want)
			}
		})
	}

	shared := `{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "mode": "macvlan", "interface": {"name": "m0",
	  "rules": [{"from": "10.0.0.2/32", "table": 100}], "sysctls": {"ipv4.arp_ignore": "1"}, "gsoMaxSize": 131072}}`
	var m InterfaceConfig
	if errs := DecodeInterfaceConfig([]byte(shared), &m, field.NewPath("config")); len(errs) > 0 {
		t.Fatal(errs)
	}
	m.Default("nic")
	msg := m.Validate().ToAggregate().Error()
	for _, want := range []string{"interface.rules: Forbidden: only for modes netdev and afxdp", "interface.sysctls: Forbidden", "interface.gsoMaxSize: Forbidden"} {
		if !strings.Contains(msg, want) {
			t.Errorf("mode macvlan: %q lacks %q", msg, want)
		}
	}

	many := `{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "interface": {"rules": [` + strings.TrimSuffix(strings.Repeat(`{"oif": "x", "table": 1},`, 33), ",") + `]}}`
	var b InterfaceConfig
	if errs := DecodeInterfaceConfig([]byte(many), &b, field.NewPath("config")); len(errs) != 1 || !strings.Contains(errs[0].Error(), "config.interface.rules: Too many: 33") {
		t.Errorf("33 rules: %v", errs)
	}

	pool := IPPoolConfig{APIVersion: GroupVersion, Kind: KindIPPoolConfig, Pools: []IPPool{{Name: "p", Subnet: "10.5.0.0/24", Gateway: "10.5.0.1",
		Routes: []Route{{Destination: "10.6.0.0/16", Table: 100}}}}}
	if errs := pool.Validate(field.NewPath("pools")); !strings.Contains(errs.ToAggregate().Error(), "table, source, scope and metric are a claim's") {
		t.Errorf("a pool's route with a table: %v", errs)
	}
}
