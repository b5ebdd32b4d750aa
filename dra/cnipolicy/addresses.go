package cnipolicy

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
)

// An Address is an IP address a configuration writes for the pod's
// interface, or a gateway it names, as its plugins read it.
type Address struct {
	// Plugin is the plugin's index in the list; Path the key's dotted
	// path in the plugin's configuration, as written
	// ("ipam.addresses[0].address"). An address of the runtimeConfig has
	// Plugin -1 and Path "ips[i]".
	Plugin int
	Path   string
	// Value is the value as written; Addr the address in it.
	Value string
	Addr  netip.Addr
}

// Field is where the address is written, in a configuration list
// (plugins[i].path), or for one of the runtimeConfig, its ips[i].
func (a Address) Field() string {
	if a.Plugin < 0 {
		return a.Path
	}
	return fmt.Sprintf("plugins[%d].%s", a.Plugin, a.Path)
}

// Addressing is what a configuration list gives the pod's interface, read
// from the list's first plugin, which makes the interface (the others of
// a list change it), and its IPAM.
type Addressing struct {
	// Parent is the host link the plugin makes the interface on, when it
	// is macvlan, ipvlan or vlan: its master. "" for another plugin, a
	// master left out (the node's default-route interface, which the
	// policy allows only to "*") or in the pod (linkInContainer).
	Parent string
	// VLAN is the vlan plugin's vlanId; 0 for the others.
	VLAN int
	// Static are the addresses the list gives whatever its IPAM has free:
	// a static IPAM's addresses, a host-local range of one address
	// (rangeStart equal to rangeEnd), args.cni.ips, and the "ips" of the
	// runtimeConfig.
	Static []Address
	// Gateways are the gateways it names: a static IPAM's addresses' and
	// routes', a host-local range's and its routes'.
	Gateways []Address
}

// ReadAddressing reads a configuration list (a conflist of a claim's
// record) as its plugins will, with the runtimeConfig values libcni gives
// them (capabilityArgs, nil for none). A list that does not decode gives
// an error.
func ReadAddressing(conflist []byte, capabilityArgs map[string]any) (Addressing, error) {
	var list struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(conflist, &list); err != nil {
		return Addressing{}, err
	}
	var a Addressing
	if len(list.Plugins) > 0 {
		a.plugin(0, list.Plugins[0])
	}
	if ips, ok := capabilityArgs["ips"].([]any); ok {
		for i, v := range ips {
			a.add(&a.Static, -1, fmt.Sprintf("ips[%d]", i), v)
		}
	}
	if ips, ok := capabilityArgs["ips"].([]string); ok {
		for i, v := range ips {
			a.add(&a.Static, -1, fmt.Sprintf("ips[%d]", i), v)
		}
	}
	return a, nil
}

// plugin reads the list's plugin i, conf.
func (a *Addressing) plugin(i int, conf map[string]any) {
	typ := String(conf, "type")
	if MakesOnMaster(typ) && !truthy(value(conf, "linkInContainer")) {
		a.Parent = String(conf, "master")
		if typ == "vlan" {
			if id, ok := value(conf, "vlanId").(float64); ok {
				a.VLAN = int(id)
			}
		}
	}
	if key, v, ok := Get(conf, "args"); ok {
		if args, isObject := v.(map[string]any); isObject {
			if ck, cv, ok := Get(args, "cni"); ok {
				if cni, isObject := cv.(map[string]any); isObject {
					ik, iv, _ := Get(cni, "ips")
					for j, ip := range list(iv) {
						a.add(&a.Static, i, fmt.Sprintf("%s.%s.%s[%d]", key, ck, ik, j), ip)
					}
				}
			}
		}
	}
	ipamKey, v, _ := Get(conf, "ipam")
	ipam, _ := v.(map[string]any)
	if ipam == nil {
		return
	}
	at := func(key string) string { return ipamKey + "." + key }
	switch Fold(String(ipam, "type")) {
	case Fold("static"):
		ak, av, _ := Get(ipam, "addresses")
		for j, e := range list(av) {
			obj, _ := e.(map[string]any)
			if k, v, ok := Get(obj, "address"); ok {
				a.add(&a.Static, i, fmt.Sprintf("%s[%d].%s", at(ak), j, k), v)
			}
			if k, v, ok := Get(obj, "gateway"); ok {
				a.add(&a.Gateways, i, fmt.Sprintf("%s[%d].%s", at(ak), j, k), v)
			}
		}
	case Fold("host-local"):
		a.hostLocalRange(i, ipamKey, ipam)
		rk, rv, _ := Get(ipam, "ranges")
		for j, set := range list(rv) {
			for k, r := range list(set) {
				if obj, ok := r.(map[string]any); ok {
					a.hostLocalRange(i, fmt.Sprintf("%s[%d][%d]", at(rk), j, k), obj)
				}
			}
		}
	default:
		return
	}
	rk, rv, _ := Get(ipam, "routes")
	for j, e := range list(rv) {
		obj, _ := e.(map[string]any)
		if k, v, ok := Get(obj, "gw"); ok {
			a.add(&a.Gateways, i, fmt.Sprintf("%s[%d].%s", at(rk), j, k), v)
		}
	}
}

// hostLocalRange reads a host-local range at path: its gateway, and its
// one address when rangeStart is rangeEnd.
func (a *Addressing) hostLocalRange(i int, path string, r map[string]any) {
	if k, v, ok := Get(r, "gateway"); ok {
		a.add(&a.Gateways, i, path+"."+k, v)
	}
	sk, start, _ := Get(r, "rangeStart")
	_, end, _ := Get(r, "rangeEnd")
	s, _ := start.(string)
	e, _ := end.(string)
	if s != "" && s == e {
		a.add(&a.Static, i, path+"."+sk, s)
	}
}

// add adds the address v, when it is one, at path of plugin i.
func (a *Addressing) add(to *[]Address, i int, path string, v any) {
	s, ok := v.(string)
	if !ok {
		return
	}
	if addr, ok := ParseAddress(s); ok {
		*to = append(*to, Address{Plugin: i, Path: path, Value: s, Addr: addr})
	}
}

// ParseAddress reads an address as the plugins write it: alone, or with
// its prefix length ("10.1.0.5/24"); an IPv4-mapped IPv6 address is the
// IPv4 one.
func ParseAddress(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr().Unmap().WithZone(""), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	return netip.Addr{}, false
}

// OwnGateway is a static address of the list that is also a gateway it
// names, for the first such one: a route through the interface's own
// address goes nowhere.
func (a Addressing) OwnGateway() (static, gateway Address, ok bool) {
	for _, s := range a.Static {
		for _, g := range a.Gateways {
			if s.Addr == g.Addr {
				return s, g, true
			}
		}
	}
	return Address{}, Address{}, false
}

// value is the value of the field name of obj, nil for none.
func value(obj map[string]any, name string) any {
	_, v, _ := Get(obj, name)
	return v
}

// list is v as a list, nil when it is not one.
func list(v any) []any {
	l, _ := v.([]any)
	return l
}
