package dra

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dataplane/fault"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/claimspec"
	"github.com/fastpath-dra/fastpath/dra/sharedl2"
)

// planShared is the record of a sub-interface of a shared device: the
// parent is not in it as a host netdev (it is not moved, nor restored),
// and no PCI address or device-info is given (the pod does not own the
// function).
func planShared(res resourceapi.DeviceRequestAllocationResult, dev devices.Device, cfg v1alpha1.InterfaceConfig, cdiDevice string) claims.Device {
	d := claims.Device{Request: res.Request, Pool: res.Pool, Device: res.Device, Kind: string(dev.Kind), Mode: cfg.Mode, CDIDevice: cdiDevice,
		Shared: &claims.SharedInterface{Parent: dev.Netdev.Name, Kind: cfg.Mode}}
	if res.ShareID != nil {
		d.Shared.ShareID = string(*res.ShareID)
	}
	if bw, ok := res.ConsumedCapacity[CapacityBandwidth]; ok {
		d.Shared.MaxTxRate = bw.Value()
	}
	switch {
	case cfg.Macvlan != nil:
		d.Shared.Mode = cfg.Macvlan.Mode
	case cfg.IPVLAN != nil:
		d.Shared.Mode = cfg.IPVLAN.Mode
	case cfg.VLAN != nil:
		d.Shared.VLANID, d.Shared.VLANProto = cfg.VLAN.ID, cfg.VLAN.Protocol
	}
	d.RDMA = planRDMA(dev, cfg)
	i := cfg.Interface
	d.Pod = &claims.PodInterface{Name: i.Name, MTU: i.MTU, MAC: i.MAC, Addresses: i.Addresses}
	for _, r := range i.Routes {
		d.Pod.Routes = append(d.Pod.Routes, claims.Route{Destination: r.Destination, Gateway: r.Gateway})
	}
	return d
}

// IPPools are the node's address pools by name (--ip-pools).
type IPPools map[string]v1alpha1.IPPool

// NewIPPools indexes a valid IPPoolConfig.
func NewIPPools(cfg v1alpha1.IPPoolConfig) IPPools {
	out := IPPools{}
	for _, p := range cfg.Pools {
		out[p.Name] = p
	}
	return out
}

// checkPool checks that a config's pool is one of the node's.
func (p IPPools) checkPool(cfg v1alpha1.InterfaceConfig) field.ErrorList {
	if cfg.IPAM == nil {
		return nil
	}
	if _, ok := p[cfg.IPAM.Pool]; !ok {
		return field.ErrorList{field.NotFound(field.NewPath("ipam", "pool"), cfg.IPAM.Pool)}
	}
	return nil
}

// containing is the pool whose subnet holds addr, first by name; false
// for none.
func (p IPPools) containing(addr netip.Addr) (v1alpha1.IPPool, bool) {
	for _, name := range slices.Sorted(maps.Keys(p)) {
		if pool := p[name]; pool.Prefix().Contains(addr) {
			return pool, true
		}
	}
	return v1alpha1.IPPool{}, false
}

// checkAddresses checks a valid config's static addresses against the
// node's pools: one of a pool's subnet must not be the pool's gateway,
// nor its subnet's network or broadcast address. (Whether another claim
// holds it is for assign, under the store's lock.)
func (p IPPools) checkAddresses(cfg v1alpha1.InterfaceConfig) field.ErrorList {
	if cfg.Interface == nil {
		return nil
	}
	var errs field.ErrorList
	for i, a := range cfg.Interface.Addresses {
		prefix, err := netip.ParsePrefix(a)
		if err != nil {
			continue // Validate says why
		}
		pool, ok := p.containing(prefix.Addr())
		if !ok {
			continue
		}
		if what := pool.Reserved(prefix.Addr()); what != "" {
			errs = append(errs, field.Invalid(field.NewPath("interface", "addresses").Index(i), a, fmt.Sprintf(
				"%s is %s of the node's IP pool %s (%s): choose another address, or ipam: {pool: %s} for a free one", prefix.Addr(), what, pool.Name, pool.Subnet, pool.Name)))
		}
	}
	return errs
}

// holdStatic checks the static addresses of c's devices that are of a
// pool's subnet against the addresses other claims hold (holders), and
// counts them as held by c: the store admits c with them, and from then
// on no pool leases them until c is forgotten (the records are the
// leases, claims.AddressHolders).
func (p IPPools) holdStatic(c *claims.Claim, holders map[netip.Addr]*claims.Claim) error {
	for _, d := range c.Devices {
		if d.Pod == nil {
			continue
		}
		for i, a := range d.Pod.Addresses {
			prefix, err := netip.ParsePrefix(a)
			if err != nil || d.IPAM != nil && d.IPAM.Address == a {
				continue
			}
			pool, ok := p.containing(prefix.Addr())
			if !ok {
				continue
			}
			if h, held := holders[prefix.Addr()]; held && h.Key() != c.Key() {
				return &claimspec.ClaimError{Claim: c.String(), Request: d.Request, Device: d.Device, Errs: field.ErrorList{field.Invalid(field.NewPath("interface", "addresses").Index(i), a,
					fmt.Sprintf("%s is of the node's IP pool %s (%s) and held by %s: an address is given to one claim at a time; choose another, or ipam: {pool: %s} for a free one",
						prefix.Addr(), pool.Name, pool.Subnet, sharedl2.HolderName(h, c.Namespace), pool.Name))}}
			}
			holders[prefix.Addr()] = c
		}
	}
	return nil
}

// admitter is what the claim store runs to admit c (Store.AdmitWith):
// assign, or nil when the node has no IP pools and c no sub-interface of
// a shared device (no address of c is then the node's to give or to
// check, and the store need not show c every other claim). avoid are
// addresses no pool gives c: those of the parents of its sub-interfaces.
func (p IPPools) admitter(c *claims.Claim, avoid []netip.Addr) func(c *claims.Claim, others []*claims.Claim) error {
	if len(p) == 0 && !slices.ContainsFunc(c.Devices, func(d claims.Device) bool { return d.Shared != nil }) {
		return nil
	}
	return func(c *claims.Claim, others []*claims.Claim) error { return p.assign(c, others, avoid) }
}

// assign counts the static addresses of c's devices that are of a pool's
// subnet as held by c, refusing one another claim holds (holdStatic), and
// refuses a static address of a sub-interface that another record holds
// on the same shared parent (sharedl2.Taken: a fastpath.dev claim's, a
// CNI claim's or a pod's network's); then gives each device of c that
// asks a pool for an address the pool's lowest address that no record
// holds and that is not among avoid (the claim store admits c with it in
// the same write), and the pool's routes. The records of the other claims
// are the leases: an address is free again when its claim is forgotten.
func (p IPPools) assign(c *claims.Claim, others []*claims.Claim, avoid []netip.Addr) error {
	holders := claims.AddressHolders(others)
	if err := p.holdStatic(c, holders); err != nil {
		return err
	}
	holdings := sharedl2.All(others)
	if mine, theirs, taken := sharedl2.Taken(sharedl2.Of(c), holdings); taken {
		return &claimspec.ClaimError{Claim: c.String(), Request: mine.Request, Device: mine.Device, Errs: field.ErrorList{
			field.Invalid(field.NewPath(mine.Field), mine.Value, sharedl2.TakenDetail(mine, theirs, c.Namespace))}}
	}
	held := sharedl2.Held(holdings)
	for a := range holders {
		held[a] = true
	}
	for _, a := range avoid {
		held[a] = true
	}
	for i := range c.Devices {
		d := &c.Devices[i]
		if d.IPAM == nil || d.IPAM.Address != "" {
			continue
		}
		pool, ok := p[d.IPAM.Pool]
		if !ok {
			return &claimspec.ClaimError{Claim: c.String(), Request: d.Request, Device: d.Device,
				Errs: field.ErrorList{field.NotFound(field.NewPath("ipam", "pool"), d.IPAM.Pool)}}
		}
		addr, ok := pool.Free(held)
		if !ok {
			return &claimspec.ClaimError{Claim: c.String(), Request: d.Request, Device: d.Device, Errs: field.ErrorList{field.Invalid(field.NewPath("ipam", "pool"), d.IPAM.Pool,
				"the pool has no free address: every one is held by a prepared claim; it is free again when one is unprepared")}}
		}
		held[addr] = true
		// Killed here, nothing is written: the address is not taken.
		fault.Point("ipam.assigned")
		d.IPAM.Address = netip.PrefixFrom(addr, pool.Prefix().Bits()).String()
		d.Pod.Addresses = append(d.Pod.Addresses, d.IPAM.Address)
		for _, r := range pool.Routes {
			gw := r.Gateway
			if gw == "" {
				gw = pool.Gateway
			}
			d.Pod.Routes = append(d.Pod.Routes, claims.Route{Destination: r.Destination, Gateway: gw})
		}
	}
	return nil
}

// checkHost reads the own addresses of the parents of c's sub-interfaces
// (Options.HostAddresses), and refuses a static address of c that is one
// of them, or the gateway of one of the node's IP pools: the node's
// addresses on a shared parent are no pod's. It returns the parents'
// addresses, for no pool to give them.
func (d *Driver) checkHost(c *claims.Claim) ([]netip.Addr, error) {
	host := sharedl2.Host{Parents: map[string][]netip.Addr{}, Gateways: sharedl2.GatewaysOf(d.ipPools())}
	var avoid []netip.Addr
	for _, dev := range c.Devices {
		if dev.Shared == nil {
			continue
		}
		parent := dev.Shared.Parent
		if _, read := host.Parents[parent]; read {
			continue
		}
		addrs, err := d.opts.HostAddresses(parent)
		if err != nil {
			return nil, fmt.Errorf("claim %s, request %q, device %s: read the addresses of the parent %s: %w", c, dev.Request, dev.Device, parent, err)
		}
		host.Parents[parent] = addrs
		avoid = append(avoid, addrs...)
	}
	if h, why, refused := host.Refused(sharedl2.Of(c)); refused {
		return nil, &claimspec.ClaimError{Claim: c.String(), Request: h.Request, Device: h.Device,
			Errs: field.ErrorList{field.Invalid(field.NewPath(h.Field), h.Value, why)}}
	}
	return avoid, nil
}
