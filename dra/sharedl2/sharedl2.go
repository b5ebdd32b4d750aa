package sharedl2

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
)

// L2 is the link a pod's sub-interface is on: its parent, the host's
// netdev, and the VLAN on it (0: untagged). Pods on different VLANs of
// one parent are on different links, and may have the same address.
type L2 struct {
	Parent string
	VLAN   int
}

func (l L2) String() string {
	if l.VLAN == 0 {
		return "parent " + l.Parent
	}
	return fmt.Sprintf("parent %s, VLAN %d", l.Parent, l.VLAN)
}

// Holding is an address a record gives a pod's interface on an L2.
type Holding struct {
	L2   L2
	Addr netip.Addr
	// Claim is the record. Request and Device say where in it: a
	// fastpath.dev device's request and device, a CNI network's request
	// and device, an NPWG attachment's network (namespace/name) and
	// interface.
	Claim           *claims.Claim
	Request, Device string
	// Field is where the record's config writes the address
	// ("interface.addresses[1]", "ipam.pool" for one a node pool gave,
	// "plugins[0].config.ipam.addresses[0].address"; an NPWG
	// attachment's "plugins[0].ipam..." of its network, or "ips[0]" of
	// its element), Value as written there. Static: written, not given
	// by a pool.
	Field, Value string
	Static       bool
}

// Of are the addresses a record gives pods on shared parents: a
// fastpath.dev claim's sub-interfaces' (static or from a node pool), a
// CNI claim's and an NPWG record's networks made on a host link (macvlan,
// ipvlan, vlan) with the addresses their configs write
// (cnipolicy.Addressing). An address its IPAM will choose is not known
// here, and not held.
func Of(c *claims.Claim) []Holding {
	var out []Holding
	for _, d := range c.Devices {
		if d.Shared == nil || d.Pod == nil {
			continue
		}
		l2 := L2{Parent: d.Shared.Parent}
		if d.Shared.Kind == v1alpha1.ModeVLAN {
			l2.VLAN = d.Shared.VLANID
		}
		for i, a := range d.Pod.Addresses {
			addr, ok := cnipolicy.ParseAddress(a)
			if !ok {
				continue
			}
			h := Holding{L2: l2, Addr: addr, Claim: c, Request: d.Request, Device: d.Device, Value: a,
				Field: fmt.Sprintf("interface.addresses[%d]", i), Static: true}
			if d.IPAM != nil && d.IPAM.Address == a {
				h.Field, h.Static = "ipam.pool", false
			}
			out = append(out, h)
		}
	}
	for _, n := range c.Networks {
		a, err := cnipolicy.ReadAddressing(n.Conflist, n.CapabilityArgs)
		if err != nil || a.Parent == "" {
			continue
		}
		for _, s := range a.Static {
			h := Holding{L2: L2{Parent: a.Parent, VLAN: a.VLAN}, Addr: s.Addr, Claim: c, Request: n.Request, Device: n.Device,
				Field: s.Field(), Value: s.Value, Static: true}
			if c.Driver == claims.DriverCNI && s.Plugin >= 0 {
				h.Field = cnipolicy.ConfigPath(nil, s).String()
			}
			out = append(out, h)
		}
	}
	return out
}

// All are the holdings of the records (Of), in their order.
func All(cls []*claims.Claim) []Holding {
	var out []Holding
	for _, c := range cls {
		out = append(out, Of(c)...)
	}
	return out
}

// Held are the addresses of the holdings (on any parent), for a node pool
// not to give them.
func Held(hs []Holding) map[netip.Addr]bool {
	held := map[netip.Addr]bool{}
	for _, h := range hs {
		held[h.Addr] = true
	}
	return held
}

// Taken is the first static address of own (a record's holdings, Of)
// that another holding on its L2 has: one of others (other records'), or
// one of another interface of own's record (two of its interfaces on one
// link; one interface may write its address twice, as a range of one
// address and the ips asking for it). ok is false when there is none.
func Taken(own, others []Holding) (mine, theirs Holding, ok bool) {
	byL2 := map[L2]map[netip.Addr]Holding{}
	hold := func(h Holding) {
		m := byL2[h.L2]
		if m == nil {
			m = map[netip.Addr]Holding{}
			byL2[h.L2] = m
		}
		if _, dup := m[h.Addr]; !dup {
			m[h.Addr] = h
		}
	}
	for _, h := range others {
		hold(h)
	}
	// own's first, then its static ones in order: one a pool gave was
	// free when given.
	for _, h := range own {
		if !h.Static {
			hold(h)
		}
	}
	for _, h := range own {
		if !h.Static {
			continue
		}
		if other, held := byL2[h.L2][h.Addr]; held && !sameInterface(h, other) {
			return h, other, true
		}
		hold(h)
	}
	return Holding{}, Holding{}, false
}

// sameInterface says whether two holdings are of one interface of one
// record.
func sameInterface(a, b Holding) bool {
	return a.Claim.Key() == b.Claim.Key() && a.Request == b.Request && a.Device == b.Device
}

// TakenDetail says why mine is refused: theirs holds it. The holder is
// named for the tenant of namespace, whose error it is: another
// namespace's claim or pod only as such, so that no tenant learns the
// names of another's objects.
func TakenDetail(mine, theirs Holding, namespace string) string {
	holder := HolderName(theirs.Claim, namespace)
	if theirs.Claim.Key() == mine.Claim.Key() {
		holder = fmt.Sprintf("this %s's %s", kindOf(theirs.Claim), where(theirs))
	} else if theirs.Claim.Namespace == namespace && theirs.Claim.Driver == claims.DriverNPWG {
		holder += ", network " + theirs.Request
	}
	return fmt.Sprintf("%s is already the address of %s on %s: an address on a shared parent is one interface's at a time; choose another address",
		mine.Addr, holder, mine.L2)
}

// where names a holding in its record.
func where(h Holding) string {
	if h.Claim.Driver == claims.DriverNPWG {
		return fmt.Sprintf("network %s (interface %s)", h.Request, h.Device)
	}
	return fmt.Sprintf("request %q, device %s", h.Request, h.Device)
}

func kindOf(c *claims.Claim) string {
	if c.Driver == claims.DriverNPWG {
		return "pod"
	}
	return "claim"
}

// HolderName names a record for the tenant of namespace: "claim ns/name",
// "pod ns/name", "IPAMClaim ns/name"; of another namespace, only as "a
// claim (pod, IPAMClaim) of another namespace".
func HolderName(c *claims.Claim, namespace string) string {
	kind := kindOf(c)
	if c.Driver == claims.DriverIPAMClaim {
		kind = "IPAMClaim"
	}
	if c.Namespace != namespace {
		article := "a"
		if kind == "IPAMClaim" {
			article = "an"
		}
		return fmt.Sprintf("%s %s of another namespace", article, kind)
	}
	return kind + " " + c.String()
}

// Host are the addresses no pod may have on a parent: the parent's own,
// by parent, and the gateways of the node's IP pools, on every parent.
type Host struct {
	Parents  map[string][]netip.Addr
	Gateways Gateways
}

// Gateways are the gateways of the node's IP pools, each with the pool.
type Gateways map[netip.Addr]v1alpha1.IPPool

// GatewaysOf are the gateways of valid pools.
func GatewaysOf[M ~map[string]v1alpha1.IPPool](pools M) Gateways {
	out := Gateways{}
	for _, name := range slices.Sorted(maps.Keys(pools)) {
		p := pools[name]
		if gw, err := netip.ParseAddr(p.Gateway); err == nil {
			if _, dup := out[gw]; !dup {
				out[gw] = p
			}
		}
	}
	return out
}

// Refused is the first static address of own the host refuses, with why
// and what to do; ok is false when there is none.
func (h Host) Refused(own []Holding) (_ Holding, detail string, ok bool) {
	for _, o := range own {
		if !o.Static {
			continue
		}
		if slices.Contains(h.Parents[o.L2.Parent], o.Addr) {
			return o, fmt.Sprintf("%s is an address of the parent %s itself, the node's: choose another address", o.Addr, o.L2.Parent), true
		}
		if p, ok := h.Gateways[o.Addr]; ok {
			return o, fmt.Sprintf("%s is the gateway of the node's IP pool %s (%s): choose another address", o.Addr, p.Name, p.Subnet), true
		}
	}
	return Holding{}, "", false
}

// Parents are the parents of the holdings, sorted, once each.
func Parents(hs []Holding) []string {
	var out []string
	for _, h := range hs {
		if h.Static && !slices.Contains(out, h.L2.Parent) {
			out = append(out, h.L2.Parent)
		}
	}
	slices.Sort(out)
	return out
}
