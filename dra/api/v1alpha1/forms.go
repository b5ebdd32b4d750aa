package v1alpha1

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	sigsjson "sigs.k8s.io/json"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The forms of other network drivers' configs fastpath takes as they are,
// each decoded strictly and turned into an InterfaceConfig, one model:
//
//   - dranet's (kubernetes-sigs/dranet): parameters without apiVersion and
//     kind, {"interface": {...}, "routes": [...], "rules": [...],
//     "neighbors": [...], "ethtool": {...}};
//   - dra-driver-sriov's VfConfig (apiVersion
//     sriovnetwork.k8snetworkplumbingwg.io/v1alpha1).
//
// What fastpath cannot honour is refused by its name in the form.

// Forms fastpath decodes besides its own.
const (
	FormNative = "fastpath"
	FormDranet = "dranet"
	FormVF     = "dra-driver-sriov"
	// VFConfigAPIVersion is dra-driver-sriov's config API.
	VFConfigAPIVersion = "sriovnetwork.k8snetworkplumbingwg.io/v1alpha1"
	VFConfigKind       = "VfConfig"
)

// dranetKeys are the fields of dranet's config.
var dranetKeys = []string{"profile", "interface", "routes", "rules", "neighbors", "ethtool"}

// FormOf says which form a config's JSON is in: dranet's has no
// apiVersion and kind, and only dranet's fields.
func FormOf(js []byte) string {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &meta); err != nil {
		return FormNative
	}
	switch {
	case meta.APIVersion == "" && meta.Kind == "":
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(js, &keys); err != nil || len(keys) == 0 {
			return FormNative
		}
		for k := range keys {
			if !slices.Contains(dranetKeys, k) {
				return FormNative
			}
		}
		return FormDranet
	case meta.APIVersion == VFConfigAPIVersion && meta.Kind == VFConfigKind:
		return FormVF
	}
	return FormNative
}

// nativeJSON turns a config in another driver's form into fastpath's,
// as JSON; a native config is returned as it is.
func nativeJSON(js []byte, path *field.Path) ([]byte, field.ErrorList) {
	var cfg InterfaceConfig
	var errs field.ErrorList
	switch FormOf(js) {
	case FormDranet:
		var d dranetConfig
		if errs = decodeStrict(js, &d, path); len(errs) > 0 {
			return nil, errs
		}
		cfg, errs = d.native(path)
	case FormVF:
		var v vfConfig
		if errs = decodeStrict(js, &v, path); len(errs) > 0 {
			return nil, errs
		}
		cfg, errs = v.native(path)
	default:
		return js, nil
	}
	if len(errs) > 0 {
		return nil, errs
	}
	cfg.APIVersion, cfg.Kind = GroupVersion, KindInterfaceConfig
	out, err := json.Marshal(cfg)
	if err != nil {
		return nil, field.ErrorList{field.InternalError(path, err)}
	}
	return out, nil
}

// Native is a config in any form fastpath takes, as fastpath's own
// InterfaceConfig, in JSON (for `fastpathd validate` to show).
func Native(data []byte, path *field.Path) ([]byte, string, field.ErrorList) {
	js, errs, _ := boundedJSON(data, path, len(data)+1, "a config")
	if len(errs) > 0 {
		return nil, "", errs
	}
	form := FormOf(js)
	out, errs := nativeJSON(js, path)
	return out, form, errs
}

// dranetConfig is dranet's NetworkConfig, as its users write it.
type dranetConfig struct {
	Profile   string           `json:"profile,omitempty"`
	Interface dranetInterface  `json:"interface"`
	Routes    []dranetRoute    `json:"routes,omitempty"`
	Rules     []dranetRule     `json:"rules,omitempty"`
	Neighbors []dranetNeighbor `json:"neighbors,omitempty"`
	Ethtool   *EthtoolConfig   `json:"ethtool,omitempty"`
}

type dranetInterface struct {
	Name                string     `json:"name,omitempty"`
	Addresses           []string   `json:"addresses,omitempty"`
	DHCP                *bool      `json:"dhcp,omitempty"`
	MTU                 *int32     `json:"mtu,omitempty"`
	HardwareAddr        *string    `json:"hardwareAddr,omitempty"`
	GSOMaxSize          *int32     `json:"gsoMaxSize,omitempty"`
	GROMaxSize          *int32     `json:"groMaxSize,omitempty"`
	GSOIPv4MaxSize      *int32     `json:"gsoIPv4MaxSize,omitempty"`
	GROIPv4MaxSize      *int32     `json:"groIPv4MaxSize,omitempty"`
	DisableEBPFPrograms *bool      `json:"disableEbpfPrograms,omitempty"`
	Forwarding          *bool      `json:"forwarding,omitempty"`
	ARPIgnore           *int32     `json:"arpIgnore,omitempty"`
	ARPAnnounce         *int32     `json:"arpAnnounce,omitempty"`
	VRF                 *dranetVRF `json:"vrf,omitempty"`
}

type dranetVRF struct {
	Name  string `json:"name,omitempty"`
	Table *int64 `json:"table,omitempty"`
}

type dranetRoute struct {
	Destination string `json:"destination,omitempty"`
	Gateway     string `json:"gateway,omitempty"`
	Source      string `json:"source,omitempty"`
	// Scope is the kernel's number: 0 universe, 253 link, 254 host.
	Scope uint8 `json:"scope,omitempty"`
	Table int64 `json:"table,omitempty"`
}

type dranetRule struct {
	Priority    int    `json:"priority,omitempty"`
	Source      string `json:"source,omitempty"`
	Destination string `json:"destination,omitempty"`
	Table       int64  `json:"table,omitempty"`
}

type dranetNeighbor struct {
	Destination  string `json:"destination,omitempty"`
	HardwareAddr string `json:"hardwareAddr,omitempty"`
}

// native is the dranet config as fastpath's: mode netdev, every setting
// in its place in InterfaceSpec.
func (d dranetConfig) native(path *field.Path) (InterfaceConfig, field.ErrorList) {
	var errs field.ErrorList
	i := d.Interface
	ip := path.Child("interface")
	if d.Profile != "" {
		errs = append(errs, field.Forbidden(path.Child("profile"), "fastpath has no provider profiles: write the interface's settings, or put them in a DeviceClass's config"))
	}
	if i.DHCP != nil && *i.DHCP {
		errs = append(errs, field.Forbidden(ip.Child("dhcp"), "fastpath runs no DHCP client in the pod: give addresses, or ipam with a pool of the node"))
	}
	if i.DisableEBPFPrograms != nil && *i.DisableEBPFPrograms {
		errs = append(errs, field.Forbidden(ip.Child("disableEbpfPrograms"), "fastpath leaves the device's TC programs as they are: detach them on the node"))
	}
	s := &InterfaceSpec{Name: i.Name, Addresses: i.Addresses}
	if i.MTU != nil {
		s.MTU = int(*i.MTU)
	}
	if i.HardwareAddr != nil {
		s.MAC = *i.HardwareAddr
	}
	for _, o := range []struct {
		from *int32
		to   *int
	}{{i.GSOMaxSize, &s.GSOMaxSize}, {i.GROMaxSize, &s.GROMaxSize}, {i.GSOIPv4MaxSize, &s.GSOIPv4MaxSize}, {i.GROIPv4MaxSize, &s.GROIPv4MaxSize}} {
		if o.from != nil {
			*o.to = int(*o.from)
		}
	}
	sysctl := func(k string, v int64) {
		if s.Sysctls == nil {
			s.Sysctls = map[string]string{}
		}
		s.Sysctls[k] = strconv.FormatInt(v, 10)
	}
	if i.Forwarding != nil {
		on := int64(0)
		if *i.Forwarding {
			on = 1
		}
		sysctl("ipv4.forwarding", on)
		sysctl("ipv6.forwarding", on)
	}
	if i.ARPIgnore != nil {
		sysctl("ipv4.arp_ignore", int64(*i.ARPIgnore))
	}
	if i.ARPAnnounce != nil {
		sysctl("ipv4.arp_announce", int64(*i.ARPAnnounce))
	}
	var vrfTable int64
	if v := i.VRF; v != nil {
		vp := ip.Child("vrf")
		if v.Name == "" {
			errs = append(errs, field.Required(vp.Child("name"), "fastpath makes the VRF by the name given: give one"))
		}
		if v.Table == nil {
			errs = append(errs, field.Required(vp.Child("table"), "fastpath makes the VRF with the table given: give one"))
		} else {
			vrfTable = *v.Table
		}
		s.VRF = &VRF{Name: v.Name, Table: vrfTable}
	}
	for n, r := range d.Routes {
		rp := path.Child("routes").Index(n)
		route := Route{Destination: r.Destination, Gateway: r.Gateway, Source: r.Source, Table: r.Table}
		if vrfTable != 0 {
			// As dranet does: a VRF's interface has its routes in the
			// VRF's table.
			route.Table = vrfTable
		}
		if route.Destination == "" {
			gw, err := netip.ParseAddr(r.Gateway)
			switch {
			case err != nil:
				errs = append(errs, field.Required(rp.Child("destination"), "a route without a destination is a default route: give its gateway"))
			case gw.Is4():
				route.Destination = "0.0.0.0/0"
			default:
				route.Destination = "::/0"
			}
		}
		switch r.Scope {
		case 0:
		case 253:
			route.Scope = ScopeLink
		case 254:
			route.Scope = ScopeHost
		default:
			errs = append(errs, field.NotSupported(rp.Child("scope"), r.Scope, []string{"0 (universe)", "253 (link)", "254 (host)"}))
		}
		s.Routes = append(s.Routes, route)
	}
	for n, r := range d.Rules {
		rp := path.Child("rules").Index(n)
		rule := Rule{Priority: r.Priority, Table: r.Table}
		var err error
		if rule.From, err = hostPrefix(r.Source); err != nil {
			errs = append(errs, field.Invalid(rp.Child("source"), r.Source, err.Error()))
		}
		if rule.To, err = hostPrefix(r.Destination); err != nil {
			errs = append(errs, field.Invalid(rp.Child("destination"), r.Destination, err.Error()))
		}
		s.Rules = append(s.Rules, rule)
	}
	for _, n := range d.Neighbors {
		s.Neighbors = append(s.Neighbors, Neighbor{Address: n.Destination, MAC: n.HardwareAddr})
	}
	s.Ethtool = d.Ethtool
	return InterfaceConfig{Interface: s}, errs
}

// hostPrefix is an address or a prefix as a canonical prefix: an address
// is its host's (/32, /128).
func hostPrefix(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a, a.BitLen()).String(), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return "", fmt.Errorf("must be an IP address or a CIDR prefix")
	}
	return p.Masked().String(), nil
}

// vfConfig is dra-driver-sriov's VfConfig, as its users write it.
type vfConfig struct {
	APIVersion            string `json:"apiVersion"`
	Kind                  string `json:"kind"`
	Driver                string `json:"driver,omitempty"`
	AddVhostMount         bool   `json:"addVhostMount,omitempty"`
	IfName                string `json:"ifName,omitempty"`
	NetAttachDefName      string `json:"netAttachDefName,omitempty"`
	NetAttachDefNamespace string `json:"netAttachDefNamespace,omitempty"`
}

// native is the VfConfig as fastpath's: driver vfio-pci is mode vfio, no
// driver (or "default") mode netdev with ifName the interface's name.
func (v vfConfig) native(path *field.Path) (InterfaceConfig, field.ErrorList) {
	var errs field.ErrorList
	cfg := InterfaceConfig{}
	switch v.Driver {
	case "", "default":
		if v.IfName != "" {
			cfg.Interface = &InterfaceSpec{Name: v.IfName}
		}
	case "vfio-pci":
		cfg.Mode = ModeVFIO
		if v.IfName != "" {
			errs = append(errs, field.Forbidden(path.Child("ifName"), "driver vfio-pci: a VF bound to vfio-pci has no interface to name"))
		}
	default:
		errs = append(errs, field.NotSupported(path.Child("driver"), v.Driver, []string{"", "default", "vfio-pci"}))
	}
	if v.AddVhostMount {
		errs = append(errs, field.Forbidden(path.Child("addVhostMount"), "fastpath gives no /dev/vhost-net or /dev/net/tun: mount them into the pod as a volume where the node allows it"))
	}
	if v.NetAttachDefName != "" || v.NetAttachDefNamespace != "" {
		errs = append(errs, field.Forbidden(path.Child("netAttachDefName"), "fastpath runs a NetworkAttachmentDefinition's plugins for the networks the pod selects (k8s.v1.cni.cncf.io/networks), on devices claimed in mode delegate: "+
			"claim the VF from class delegate.fastpath.dev and name the network in the pod's annotation, or give the interface's settings here"))
	}
	return cfg, errs
}
