package v1alpha1

import (
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// DefaultSysctls are the interface sysctls (below net.ipv4.conf.<if> and
// net.ipv6.conf.<if>) a claim may set on any node: what a pod of several
// interfaces tunes on each (ARP flux, reverse-path filtering, router
// advertisements, forwarding). The operator allows more with
// --interface-sysctls.
var DefaultSysctls = []string{
	"ipv4.accept_local", "ipv4.accept_redirects", "ipv4.arp_accept", "ipv4.arp_announce", "ipv4.arp_filter", "ipv4.arp_ignore",
	"ipv4.arp_notify", "ipv4.forwarding", "ipv4.proxy_arp", "ipv4.rp_filter", "ipv4.send_redirects",
	"ipv6.accept_dad", "ipv6.accept_ra", "ipv6.accept_redirects", "ipv6.addr_gen_mode", "ipv6.autoconf", "ipv6.disable_ipv6",
	"ipv6.forwarding", "ipv6.use_tempaddr",
}

// MaxOffloadSize bounds GSO and GRO maximum sizes: the kernel's
// GSO_MAX_SIZE with BIG TCP, 512 KiB.
const MaxOffloadSize = 512 << 10

var (
	sysctlName  = regexp.MustCompile(`^ipv[46]\.[a-z0-9_]{1,64}$`)
	sysctlValue = regexp.MustCompile(`^-?[0-9]{1,10}$`)
	featureName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)
	privFlag    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$`)
)

// ValidSysctlName says what is wrong with an interface sysctl's name
// ("ipv4.arp_ignore"), nil when it is one.
func ValidSysctlName(name string) error {
	if !sysctlName.MatchString(name) {
		return fmt.Errorf("must be ipv4.<name> or ipv6.<name>, the name below net.ipv4.conf.<interface> or net.ipv6.conf.<interface>, like ipv4.arp_ignore")
	}
	return nil
}

// MultiNIC says whether the spec sets any of what only a netdev moved into
// the pod takes: rules, a VRF, neighbours, sysctls, ethtool settings,
// offload sizes, or routes beyond a destination and a gateway.
func (s *InterfaceSpec) MultiNIC() []string {
	var set []string
	for _, f := range []struct {
		name string
		on   bool
	}{{"rules", len(s.Rules) > 0}, {"vrf", s.VRF != nil}, {"neighbors", len(s.Neighbors) > 0}, {"sysctls", len(s.Sysctls) > 0},
		{"ethtool", s.Ethtool != nil}, {"gsoMaxSize", s.GSOMaxSize != 0}, {"groMaxSize", s.GROMaxSize != 0},
		{"gsoIPv4MaxSize", s.GSOIPv4MaxSize != 0}, {"groIPv4MaxSize", s.GROIPv4MaxSize != 0},
		{"routes", slices.ContainsFunc(s.Routes, func(r Route) bool { return r.Table != 0 || r.Source != "" || r.Scope != "" || r.Metric != 0 })}} {
		if f.on {
			set = append(set, f.name)
		}
	}
	return set
}

// validTable says what is wrong with a routing table number, "" for
// nothing.
func validTable(t int64, rule bool) string {
	switch {
	case t < 1 || t > 1<<32-1:
		return "must be between 1 and 4294967295"
	case t == 255:
		return "255 is the kernel's local table"
	case !rule && (t == 253 || t == 254):
		return "253 and 254 are the kernel's default and main tables: leave table out for main"
	}
	return ""
}

// validateMultiNIC checks what MultiNIC names.
func (s *InterfaceSpec) validateMultiNIC(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	own := map[netip.Addr]bool{}
	for _, a := range s.Addresses {
		if p, err := netip.ParsePrefix(a); err == nil {
			own[p.Addr()] = true
		}
	}
	for i, r := range s.Routes {
		p := path.Child("routes").Index(i)
		if r.Table != 0 {
			if msg := validTable(r.Table, false); msg != "" {
				errs = append(errs, field.Invalid(p.Child("table"), r.Table, msg))
			}
		}
		if r.Source != "" {
			src, err := netip.ParseAddr(r.Source)
			switch {
			case err != nil:
				errs = append(errs, field.Invalid(p.Child("source"), r.Source, "must be an IP address"))
			case !own[src]:
				errs = append(errs, field.Invalid(p.Child("source"), r.Source, "must be one of the interface's addresses"))
			}
		}
		if r.Scope != "" {
			switch {
			case !slices.Contains(RouteScopes, r.Scope):
				errs = append(errs, field.NotSupported(p.Child("scope"), r.Scope, RouteScopes))
			case r.Scope != ScopeUniverse && r.Gateway != "":
				errs = append(errs, field.Invalid(p.Child("scope"), r.Scope, "a route through a gateway has scope universe"))
			}
		}
		if r.Metric < 0 || r.Metric > 1<<32-1 {
			errs = append(errs, field.Invalid(p.Child("metric"), r.Metric, "must be between 0 and 4294967295"))
		}
	}
	for i, r := range s.Rules {
		p := path.Child("rules").Index(i)
		if r.Priority < 0 || r.Priority > 32765 {
			errs = append(errs, field.Invalid(p.Child("priority"), r.Priority, "must be between 1 and 32765 (0: the kernel chooses)"))
		}
		if msg := validTable(r.Table, true); msg != "" {
			errs = append(errs, field.Invalid(p.Child("table"), r.Table, msg))
		}
		if r.From == "" && r.To == "" && r.IIF == "" && r.OIF == "" && r.FWMark == nil {
			errs = append(errs, field.Required(p, "a rule matches on at least one of from, to, iif, oif and fwmark"))
		}
		for _, c := range []struct{ name, v string }{{"from", r.From}, {"to", r.To}} {
			if c.v == "" {
				continue
			}
			if pre, err := netip.ParsePrefix(c.v); err != nil || pre.Masked().String() != c.v {
				errs = append(errs, field.Invalid(p.Child(c.name), c.v, "must be a canonical CIDR prefix, like 10.1.0.0/24 or 10.1.0.5/32"))
			}
		}
		if from, err := netip.ParsePrefix(r.From); err == nil {
			if to, err := netip.ParsePrefix(r.To); err == nil && from.Addr().Is4() != to.Addr().Is4() {
				errs = append(errs, field.Invalid(p.Child("to"), r.To, "must be of from's address family"))
			}
		}
		for _, c := range []struct{ name, v string }{{"iif", r.IIF}, {"oif", r.OIF}} {
			if c.v == "" {
				continue
			}
			if err := ValidInterfaceName(c.v); err != nil {
				errs = append(errs, field.Invalid(p.Child(c.name), c.v, err.Error()))
			}
		}
		if r.FWMask != nil && r.FWMark == nil {
			errs = append(errs, field.Required(p.Child("fwmark"), "fwmask masks fwmark"))
		}
	}
	if v := s.VRF; v != nil {
		p := path.Child("vrf")
		if err := ValidInterfaceName(v.Name); err != nil || v.Name == "" {
			msg := "required"
			if err != nil {
				msg = err.Error()
			}
			errs = append(errs, field.Invalid(p.Child("name"), v.Name, msg))
		} else if v.Name == s.Name {
			errs = append(errs, field.Invalid(p.Child("name"), v.Name, "must differ from the interface's name"))
		}
		if msg := validTable(v.Table, false); msg != "" {
			errs = append(errs, field.Invalid(p.Child("table"), v.Table, msg))
		}
	}
	seen := map[string]bool{}
	for i, n := range s.Neighbors {
		p := path.Child("neighbors").Index(i)
		a, err := netip.ParseAddr(n.Address)
		switch {
		case err != nil || a.Zone() != "":
			errs = append(errs, field.Invalid(p.Child("address"), n.Address, "must be an IP address"))
		case seen[a.String()]:
			errs = append(errs, field.Duplicate(p.Child("address"), n.Address))
		}
		seen[a.String()] = true
		if msg := validUnicastMAC(n.MAC); msg != "" {
			errs = append(errs, field.Invalid(p.Child("mac"), n.MAC, msg))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Sysctls)) {
		p := path.Child("sysctls").Key(k)
		if err := ValidSysctlName(k); err != nil {
			errs = append(errs, field.Invalid(p, k, err.Error()))
		}
		if !sysctlValue.MatchString(s.Sysctls[k]) {
			errs = append(errs, field.Invalid(p, s.Sysctls[k], "must be an integer"))
		}
	}
	if e := s.Ethtool; e != nil {
		for _, k := range slices.Sorted(maps.Keys(e.Features)) {
			if !featureName.MatchString(k) {
				errs = append(errs, field.Invalid(path.Child("ethtool", "features").Key(k), k, "must be an ethtool feature's name, like rx-gro"))
			}
		}
		for _, k := range slices.Sorted(maps.Keys(e.PrivateFlags)) {
			if !privFlag.MatchString(k) {
				errs = append(errs, field.Invalid(path.Child("ethtool", "privateFlags").Key(k), k, "must be a private flag's name, at most 32 characters"))
			}
		}
	}
	for _, o := range []struct {
		name string
		v    int
	}{{"gsoMaxSize", s.GSOMaxSize}, {"groMaxSize", s.GROMaxSize}, {"gsoIPv4MaxSize", s.GSOIPv4MaxSize}, {"groIPv4MaxSize", s.GROIPv4MaxSize}} {
		if o.v < 0 || o.v > MaxOffloadSize {
			errs = append(errs, field.Invalid(path.Child(o.name), o.v, fmt.Sprintf("must be between 1 and %d bytes (0: the device's)", MaxOffloadSize)))
		}
	}
	return errs
}

// multiNICModes are the modes whose pod gets the device's own netdev.
var multiNICModes = []string{ModeNetdev, ModeAFXDP}

// validateMultiNICMode refuses what MultiNIC names in other modes.
func (c *InterfaceConfig) validateMultiNICMode() field.ErrorList {
	if c.Interface == nil || slices.Contains(multiNICModes, c.Mode) || c.Mode == "" {
		return nil
	}
	var errs field.ErrorList
	for _, f := range c.Interface.MultiNIC() {
		errs = append(errs, field.Forbidden(field.NewPath("interface", f), fmt.Sprintf("only for modes %s, which give the pod the device's own netdev: mode %s does not", strings.Join(multiNICModes, " and "), c.Mode)))
	}
	return errs
}
