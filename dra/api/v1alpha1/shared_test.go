package v1alpha1

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestDefaultShared(t *testing.T) {
	m := InterfaceConfig{Mode: ModeMacvlan}
	m.Default("net")
	if m.Macvlan == nil || m.Macvlan.Mode != MacvlanBridge || m.Interface.Name != "net" {
		t.Errorf("macvlan defaults = %+v %+v", m.Macvlan, m.Interface)
	}
	i := InterfaceConfig{Mode: ModeIPVLAN}
	i.Default("net")
	if i.IPVLAN == nil || i.IPVLAN.Mode != IPVLANL2 {
		t.Errorf("ipvlan defaults = %+v", i.IPVLAN)
	}
	v := InterfaceConfig{Mode: ModeVLAN, VLAN: &VLANConfig{ID: 7}}
	v.Default("net")
	if v.VLAN.Protocol != VLANProto8021Q {
		t.Errorf("vlan defaults = %+v", v.VLAN)
	}
}

func TestValidateShared(t *testing.T) {
	for name, c := range map[string]InterfaceConfig{
		"macvlan":          {Mode: ModeMacvlan, IPAM: &IPAMSpec{Pool: "fast"}, Interface: &InterfaceSpec{MAC: "02:00:00:00:00:09", MTU: 1400}},
		"macvlan private":  {Mode: ModeMacvlan, Macvlan: &MacvlanConfig{Mode: MacvlanPrivate}},
		"macvlan vepa":     {Mode: ModeMacvlan, Macvlan: &MacvlanConfig{Mode: MacvlanVEPA}},
		"macvlan passthru": {Mode: ModeMacvlan, Macvlan: &MacvlanConfig{Mode: MacvlanPassthru}},
		"ipvlan l3s":       {Mode: ModeIPVLAN, IPVLAN: &IPVLANConfig{Mode: IPVLANL3S}, Interface: &InterfaceSpec{Addresses: []string{"10.0.0.2/24"}}},
		"vlan":             {Mode: ModeVLAN, VLAN: &VLANConfig{ID: 4094, Protocol: VLANProto8021AD}},
		"netdev with ipam": {IPAM: &IPAMSpec{Pool: "p1"}},
	} {
		c.Default("net")
		if errs := c.Validate(); len(errs) > 0 {
			t.Errorf("%s: %v", name, errs)
		}
	}
	for name, tc := range map[string]struct {
		c    InterfaceConfig
		want string
	}{
		"macvlan mode":       {InterfaceConfig{Mode: ModeMacvlan, Macvlan: &MacvlanConfig{Mode: "source"}}, `macvlan.mode: Unsupported value: "source"`},
		"ipvlan mode":        {InterfaceConfig{Mode: ModeIPVLAN, IPVLAN: &IPVLANConfig{Mode: "l4"}}, `ipvlan.mode: Unsupported value: "l4"`},
		"vlan without id":    {InterfaceConfig{Mode: ModeVLAN}, "vlan.id: Required value"},
		"vlan 0":             {InterfaceConfig{Mode: ModeVLAN, VLAN: &VLANConfig{}}, "vlan.id: Invalid value: 0: must be between 1 and 4094"},
		"vlan 4095":          {InterfaceConfig{Mode: ModeVLAN, VLAN: &VLANConfig{ID: 4095}}, "vlan.id: Invalid value: 4095"},
		"vlan protocol":      {InterfaceConfig{Mode: ModeVLAN, VLAN: &VLANConfig{ID: 5, Protocol: "qinq"}}, "vlan.protocol: Unsupported value"},
		"section of another": {InterfaceConfig{Mode: ModeMacvlan, VLAN: &VLANConfig{ID: 5}}, "vlan: Forbidden: only for mode vlan"},
		"section in netdev":  {InterfaceConfig{Macvlan: &MacvlanConfig{}}, "macvlan: Forbidden: only for mode macvlan"},
		"vf when shared":     {InterfaceConfig{Mode: ModeMacvlan, VF: &VFConfig{Trust: new(true)}}, "vf: Forbidden: mode macvlan shares the device"},
		"ipvlan MAC":         {InterfaceConfig{Mode: ModeIPVLAN, Interface: &InterfaceSpec{MAC: "02:00:00:00:00:01"}}, "interface.mac: Forbidden: an ipvlan interface has its parent's MAC"},
		"passthru MAC":       {InterfaceConfig{Mode: ModeMacvlan, Macvlan: &MacvlanConfig{Mode: MacvlanPassthru}, Interface: &InterfaceSpec{MAC: "02:00:00:00:00:01"}}, "interface.mac: Forbidden: a passthru macvlan"},
		"xdp when shared":    {InterfaceConfig{Mode: ModeVLAN, VLAN: &VLANConfig{ID: 5}, XDP: &XDPConfig{}}, "xdp: Forbidden"},
		"ipam pool name":     {InterfaceConfig{Mode: ModeMacvlan, IPAM: &IPAMSpec{Pool: "Fast_Pool"}}, `ipam.pool: Invalid value: "Fast_Pool"`},
		"ipam no pool":       {InterfaceConfig{Mode: ModeMacvlan, IPAM: &IPAMSpec{}}, "ipam.pool: Required value"},
		"ipam in vfio":       {InterfaceConfig{Mode: ModeVFIO, IPAM: &IPAMSpec{Pool: "p"}}, "ipam: Forbidden: mode vfio"},
		"bad name":           {InterfaceConfig{Mode: ModeMacvlan, Interface: &InterfaceSpec{Name: "eth0"}}, "interface.name"},
	} {
		t.Run(name, func(t *testing.T) {
			tc.c.Default("net")
			if errs := tc.c.Validate(); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Errorf("errors = %v, want %q", errs, tc.want)
			}
		})
	}
}

// The shared sections decode strictly, as the rest of the config.
func TestDecodeShared(t *testing.T) {
	doc := "apiVersion: fastpath.dev/v1alpha1\nkind: InterfaceConfig\nmode: vlan\nvlan: {id: 100}\nipam: {pool: fast}\n"
	var c InterfaceConfig
	if errs := DecodeInterfaceConfig([]byte(doc), &c, field.NewPath("p")); len(errs) > 0 || c.VLAN.ID != 100 || c.IPAM.Pool != "fast" {
		t.Fatalf("decode: %+v, %v", c, errs)
	}
	for name, tc := range map[string]struct{ doc, want string }{
		"vlan vid":    {`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "mode": "vlan", "vlan": {"vid": 3}}`, "p.vlan.vid: Forbidden: unknown field"},
		"ipam type":   {`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "ipam": {"type": "host-local"}}`, "p.ipam.type: Forbidden: unknown field"},
		"macvlan dup": {`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "macvlan": {"mode": "vepa", "mode": "bridge"}}`, "p.macvlan.mode: Forbidden: duplicate field"},
	} {
		t.Run(name, func(t *testing.T) {
			var c InterfaceConfig
			if errs := DecodeInterfaceConfig([]byte(tc.doc), &c, field.NewPath("p")); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Errorf("errors = %v, want %q", errs, tc.want)
			}
		})
	}
}

func TestIPPoolConfig(t *testing.T) {
	doc := `apiVersion: fastpath.dev/v1alpha1
kind: IPPoolConfig
pools:
- name: fast
  subnet: 10.56.0.0/24
  gateway: 10.56.0.1
  exclude: [10.56.0.100/30, 10.56.0.7]
  routes: [{destination: 10.57.0.0/16}]
- name: v6
  subnet: fd00:56::/64
  rangeStart: "fd00:56::10"
  rangeEnd: "fd00:56::1f"
`
	c, errs := DecodeIPPoolConfig([]byte(doc), field.NewPath("f"))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if errs := c.Validate(field.NewPath("f")); len(errs) > 0 {
		t.Fatal(errs)
	}
	fast, v6 := c.Pools[0], c.Pools[1]
	if first, last := fast.Range(); first != netip.MustParseAddr("10.56.0.1") || last != netip.MustParseAddr("10.56.0.254") {
		t.Errorf("fast range = %s-%s", first, last)
	}
	if first, last := v6.Range(); first != netip.MustParseAddr("fd00:56::10") || last != netip.MustParseAddr("fd00:56::1f") {
		t.Errorf("v6 range = %s-%s", first, last)
	}
	for addr, want := range map[string]bool{"10.56.0.1": true, "10.56.0.7": true, "10.56.0.101": true, "10.56.0.104": false, "10.56.0.2": false} {
		if got := fast.Excluded(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Excluded(%s) = %v", addr, got)
		}
	}
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if again, errs := DecodeIPPoolConfig(data, field.NewPath("f")); len(errs) > 0 || len(again.Pools) != 2 {
		t.Errorf("round trip %s: %v", data, errs)
	}
	pool := func(p IPPool) IPPoolConfig {
		return IPPoolConfig{APIVersion: GroupVersion, Kind: KindIPPoolConfig, Pools: []IPPool{p}}
	}
	for name, tc := range map[string]struct {
		c    IPPoolConfig
		want string
	}{
		"no name":         {pool(IPPool{Subnet: "10.0.0.0/24"}), "f.pools[0].name: Required"},
		"bad name":        {pool(IPPool{Name: "A", Subnet: "10.0.0.0/24"}), "f.pools[0].name: Invalid"},
		"duplicate":       {IPPoolConfig{APIVersion: GroupVersion, Kind: KindIPPoolConfig, Pools: []IPPool{{Name: "a", Subnet: "10.0.0.0/24"}, {Name: "a", Subnet: "10.1.0.0/24"}}}, "f.pools[1].name: Duplicate"},
		"host bits":       {pool(IPPool{Name: "a", Subnet: "10.0.0.1/24"}), "must be canonical: 10.0.0.0/24"},
		"not a CIDR":      {pool(IPPool{Name: "a", Subnet: "10.0.0.0"}), "f.pools[0].subnet: Invalid"},
		"gateway outside": {pool(IPPool{Name: "a", Subnet: "10.0.0.0/24", Gateway: "10.0.1.1"}), "f.pools[0].gateway: Invalid value: \"10.0.1.1\": must be in subnet"},
		"start outside":   {pool(IPPool{Name: "a", Subnet: "10.0.0.0/24", RangeStart: "10.9.0.1"}), "f.pools[0].rangeStart"},
		"end before":      {pool(IPPool{Name: "a", Subnet: "10.0.0.0/24", RangeStart: "10.0.0.9", RangeEnd: "10.0.0.8"}), "f.pools[0].rangeEnd: Invalid value: \"10.0.0.8\": must not be before rangeStart"},
		"exclusion":       {pool(IPPool{Name: "a", Subnet: "10.0.0.0/24", Exclude: []string{"ten"}}), "f.pools[0].exclude[0]"},
		"route family":    {pool(IPPool{Name: "a", Subnet: "10.0.0.0/24", Routes: []Route{{Destination: "fd00::/8"}}}), "f.pools[0].routes[0].destination"},
		"wrong kind":      {IPPoolConfig{APIVersion: GroupVersion, Kind: KindMemifConfig}, "f.apiVersion"},
	} {
		t.Run(name, func(t *testing.T) {
			if errs := tc.c.Validate(field.NewPath("f")); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Errorf("errors = %v, want %q", errs, tc.want)
			}
		})
	}
	small := IPPool{Name: "p2p", Subnet: "10.9.9.0/31"}
	if first, last := small.Range(); first.String() != "10.9.9.0" || last.String() != "10.9.9.1" {
		t.Errorf("/31 range = %s-%s", first, last)
	}
}
