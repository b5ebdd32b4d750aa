package v1alpha1

import (
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// DecodeIPPoolConfig decodes a file of IP pools.
func DecodeIPPoolConfig(data []byte, path *field.Path) (IPPoolConfig, field.ErrorList) {
	var cfg IPPoolConfig
	errs := Decode(data, &cfg, path, GroupVersion, KindIPPoolConfig)
	return cfg, errs
}

// Validate checks the pools: DNS-label names, each once; canonical
// subnets; a range, gateway, exclusions and routes inside what they may
// be; at least one address to give.
func (c *IPPoolConfig) Validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c.APIVersion != GroupVersion || c.Kind != KindIPPoolConfig {
		errs = append(errs, field.Invalid(path.Child("apiVersion"), c.APIVersion+"/"+c.Kind, fmt.Sprintf("want apiVersion %s, kind %s", GroupVersion, KindIPPoolConfig)))
	}
	seen := map[string]bool{}
	for i := range c.Pools {
		p := path.Child("pools").Index(i)
		pool := &c.Pools[i]
		switch {
		case pool.Name == "":
			errs = append(errs, field.Required(p.Child("name"), ""))
		case len(validation.IsDNS1123Label(pool.Name)) > 0:
			errs = append(errs, field.Invalid(p.Child("name"), pool.Name, "must be lowercase letters, digits and '-', at most 63 characters"))
		case seen[pool.Name]:
			errs = append(errs, field.Duplicate(p.Child("name"), pool.Name))
		}
		seen[pool.Name] = true
		errs = append(errs, pool.validate(p)...)
	}
	return errs
}

func (pool *IPPool) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	subnet, err := netip.ParsePrefix(pool.Subnet)
	switch {
	case err != nil:
		return append(errs, field.Invalid(p.Child("subnet"), pool.Subnet, "must be a CIDR, like 10.56.0.0/24"))
	case subnet.Masked() != subnet || subnet.String() != pool.Subnet:
		return append(errs, field.Invalid(p.Child("subnet"), pool.Subnet, fmt.Sprintf("must be canonical: %s", subnet.Masked())))
	case subnet.Addr().Is4In6():
		return append(errs, field.Invalid(p.Child("subnet"), pool.Subnet, "must not be an IPv4-mapped IPv6 subnet"))
	}
	inSubnet := func(name, s string) (netip.Addr, bool) {
		a, err := netip.ParseAddr(s)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(p.Child(name), s, "must be an IP address"))
		case !subnet.Contains(a):
			errs = append(errs, field.Invalid(p.Child(name), s, "must be in subnet "+pool.Subnet))
		default:
			return a, true
		}
		return a, false
	}
	for _, f := range []struct{ name, v string }{{"rangeStart", pool.RangeStart}, {"rangeEnd", pool.RangeEnd}, {"gateway", pool.Gateway}} {
		if f.v != "" {
			inSubnet(f.name, f.v)
		}
	}
	for i, e := range pool.Exclude {
		if _, ok := parseExclusion(e); !ok {
			errs = append(errs, field.Invalid(p.Child("exclude").Index(i), e, "must be an address or a CIDR"))
		}
	}
	for i, r := range pool.Routes {
		rp := p.Child("routes").Index(i)
		dst, err := netip.ParsePrefix(r.Destination)
		if err != nil {
			errs = append(errs, field.Invalid(rp.Child("destination"), r.Destination, "must be a CIDR, like 10.57.0.0/16"))
			continue
		}
		if dst.Addr().Is4() != subnet.Addr().Is4() {
			errs = append(errs, field.Invalid(rp.Child("destination"), r.Destination, "must be of the subnet's address family"))
		}
		if r.Gateway != "" {
			if gw, err := netip.ParseAddr(r.Gateway); err != nil || gw.Is4() != subnet.Addr().Is4() {
				errs = append(errs, field.Invalid(rp.Child("gateway"), r.Gateway, "must be an IP address of the subnet's family"))
			}
		}
		if r.Table != 0 || r.Source != "" || r.Scope != "" || r.Metric != 0 {
			errs = append(errs, field.Forbidden(rp, "a pool's route has a destination and a gateway: table, source, scope and metric are a claim's (interface.routes)"))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	first, last := pool.Range()
	if last.Less(first) {
		errs = append(errs, field.Invalid(p.Child("rangeEnd"), last.String(), "must not be before rangeStart "+first.String()))
	}
	return errs
}

func parseExclusion(s string) (netip.Prefix, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a, a.BitLen()), true
	}
	return netip.Prefix{}, false
}

// Prefix is the pool's subnet (of a valid pool).
func (pool *IPPool) Prefix() netip.Prefix {
	p, _ := netip.ParsePrefix(pool.Subnet)
	return p
}

// Range is the first and last address the pool of a valid config gives:
// rangeStart and rangeEnd, by default the subnet's first and last hosts
// (IPv4 keeps its network and broadcast addresses out, but for /31 and
// /32).
func (pool *IPPool) Range() (first, last netip.Addr) {
	subnet := pool.Prefix()
	first = subnet.Addr()
	last = lastAddr(subnet)
	if subnet.Addr().Is4() && subnet.Bits() < 31 || subnet.Addr().Is6() && subnet.Bits() < 127 {
		first = first.Next()
		if subnet.Addr().Is4() {
			last = last.Prev()
		}
	}
	if a, err := netip.ParseAddr(pool.RangeStart); err == nil {
		first = a
	}
	if a, err := netip.ParseAddr(pool.RangeEnd); err == nil {
		last = a
	}
	return first, last
}

// Excluded reports whether a pool of a valid config never gives addr: its
// gateway, or an exclusion.
func (pool *IPPool) Excluded(addr netip.Addr) bool {
	if gw, err := netip.ParseAddr(pool.Gateway); err == nil && gw == addr {
		return true
	}
	for _, e := range pool.Exclude {
		if p, ok := parseExclusion(e); ok && p.Contains(addr) {
			return true
		}
	}
	return false
}

// Reserved says what addr is to a pool of a valid config when no
// interface may have it: "the gateway", "the network address" or "the
// broadcast address" (of an IPv4 subnet) of the pool's subnet, as Range
// leaves them out; "" otherwise.
func (pool *IPPool) Reserved(addr netip.Addr) string {
	subnet := pool.Prefix()
	whole := subnet.Addr().Is4() && subnet.Bits() < 31 || subnet.Addr().Is6() && subnet.Bits() < 127
	switch gw, err := netip.ParseAddr(pool.Gateway); {
	case err == nil && gw == addr:
		return "the gateway"
	case whole && addr == subnet.Addr():
		return "the network address"
	case whole && subnet.Addr().Is4() && addr == lastAddr(subnet):
		return "the broadcast address"
	}
	return ""
}

// Free is the lowest address a pool of a valid config gives that is not
// held.
func (pool *IPPool) Free(held map[netip.Addr]bool) (netip.Addr, bool) {
	first, last := pool.Range()
	for a := first; a.IsValid() && !last.Less(a); a = a.Next() {
		if !held[a] && !pool.Excluded(a) {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// Gives reports whether a pool of a valid config may give addr: in its
// range, not excluded.
func (pool *IPPool) Gives(addr netip.Addr) bool {
	first, last := pool.Range()
	return addr.IsValid() && addr.BitLen() == first.BitLen() && !addr.Less(first) && !last.Less(addr) && !pool.Excluded(addr)
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
