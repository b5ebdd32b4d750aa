package devices

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// Options configure discovery.
type Options struct {
	// SysfsRoot is the directory sys/ lives in: "/" on a live host (the
	// default), a fixture tree in tests. Below any other root, netdev state
	// comes from class/net files and ethtool and XDP facts are unknown.
	SysfsRoot string
	// MemifDir is scanned for memif sockets; empty: none.
	MemifDir string
	// MemifConfig is a MemifConfig file; empty: none.
	MemifConfig string
	// Filter is a CEL expression over a device, as in a DeviceClass selector.
	// Without one, virtual netdevs are not published.
	Filter string
	// Share is a CEL expression, as Filter, choosing the published devices
	// with a netdev (NICs, PFs, VFs, virtual netdevs the filter admits)
	// that pods share: each gets sub-interfaces (macvlan, ipvlan, vlan) of
	// it and the device is never moved. Empty: none.
	Share string
	// ShareInterfaces is how many sub-interfaces a shared device gives
	// (its capacity "interfaces"); default DefaultShareInterfaces.
	ShareInterfaces int
	// ShareBandwidthMbps, when set, is the bandwidth a shared device gives
	// (its capacity "bandwidth", in bits per second): claims that ask for
	// some get their sub-interface's transmit rate limited to it. 0: none.
	ShareBandwidthMbps int
}

// DefaultShareInterfaces is the sub-interfaces a shared device gives when
// the operator does not say: a common NIC's unicast MAC filter holds 64
// entries or more, past which a macvlan parent turns promiscuous.
const DefaultShareInterfaces = 64

// ErrBadOptions marks errors in Options: the caller's input is wrong.
var ErrBadOptions = errors.New("bad discovery options")

// Inventory is the result of one discovery.
type Inventory struct {
	// Devices, sorted by name: what may be published.
	Devices []Device `json:"devices"`
	// Warnings name what was skipped and why.
	Warnings []string `json:"warnings,omitempty"`
	// Taken is when the discovery began: what it says of a device may be
	// older than a change made to it since (a bind to vfio-pci).
	Taken time.Time `json:"-"`
}

// Equal reports whether two inventories hold the same devices.
func (inv Inventory) Equal(other Inventory) bool {
	return slices.EqualFunc(inv.Devices, other.Devices, func(a, b Device) bool { return a.equal(b) })
}

// Discoverer discovers the node's devices. Make one with New.
type Discoverer struct {
	opts   Options
	sysfs  sysfs
	filter *Filter
	share  *Filter
	memif  *MemifConfig
	names  *pciNames
}

// New checks opts and returns a Discoverer. Errors wrap ErrBadOptions.
func New(opts Options) (*Discoverer, error) {
	if opts.SysfsRoot == "" {
		opts.SysfsRoot = "/"
	}
	if st, err := os.Stat(opts.SysfsRoot); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%w: sysfs root %q is not a directory", ErrBadOptions, opts.SysfsRoot)
	}
	if st, err := os.Stat((sysfs{opts.SysfsRoot}).path("bus", "pci", "devices")); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%w: sysfs root %q has no sys/bus/pci/devices", ErrBadOptions, opts.SysfsRoot)
	}
	d := &Discoverer{opts: opts, sysfs: sysfs{opts.SysfsRoot}}
	var err error
	if d.filter, err = NewFilter(opts.Filter); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadOptions, err)
	}
	if d.share, err = NewFilter(opts.Share); err != nil {
		return nil, fmt.Errorf("%w: share: %w", ErrBadOptions, err)
	}
	switch {
	case opts.ShareInterfaces < 0:
		return nil, fmt.Errorf("%w: share interfaces %d: must be at least 1", ErrBadOptions, opts.ShareInterfaces)
	case opts.ShareInterfaces == 0:
		d.opts.ShareInterfaces = DefaultShareInterfaces
	}
	if opts.ShareBandwidthMbps < 0 {
		return nil, fmt.Errorf("%w: share bandwidth %d Mbit/s: must not be negative", ErrBadOptions, opts.ShareBandwidthMbps)
	}
	if opts.MemifConfig != "" {
		if d.memif, err = LoadMemifConfig(opts.MemifConfig); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadOptions, err)
		}
		if err := checkMemifDir(d.memif, opts.MemifConfig, opts.MemifDir); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadOptions, err)
		}
	}
	d.names = newPCINames()
	return d, nil
}

// Discover returns what the node offers now. Devices that cannot be read
// are skipped with a warning (logged, and in Inventory.Warnings); only a
// failure to look at all is an error.
func (d *Discoverer) Discover(ctx context.Context) (Inventory, error) {
	logger := klog.FromContext(ctx)
	inv := Inventory{Taken: time.Now()}
	warn := func(err error) {
		logger.Info("Warning: skipped during discovery", "reason", err.Error())
		inv.Warnings = append(inv.Warnings, err.Error())
	}
	netdevs, virtual, err := classNet(d.sysfs)
	if err != nil {
		return Inventory{}, err
	}
	pciDevs, warnings, err := discoverPCI(ctx, d.sysfs, d.names, netdevs)
	if err != nil {
		return Inventory{}, err
	}
	for _, w := range warnings {
		warn(w)
	}
	candidates, err := d.netdevState(ctx, pciDevs, virtual, warn)
	if err != nil {
		return Inventory{}, err
	}
	rdma, err := rdmaDevices(d.sysfs)
	if err != nil {
		warn(fmt.Errorf("RDMA devices unknown: %w", err))
	}
	for i := range candidates {
		if n := candidates[i].Netdev; n != nil {
			n.RDMADevice = rdma[n.Name]
		}
	}
	memifs, warnings := discoverMemif(d.opts.MemifDir, d.memif)
	for _, w := range warnings {
		warn(w)
	}
	probeMemif(ctx, memifs)
	candidates = append(candidates, memifs...)
	assessHealth(candidates)

	for _, dev := range candidates {
		if err := validName(dev.Name); err != nil {
			warn(err)
			continue
		}
		if d.filter == nil {
			if dev.Kind != KindNetdev {
				inv.Devices = append(inv.Devices, dev)
			}
			continue
		}
		ok, err := d.filter.Admits(ctx, dev)
		if err != nil {
			warn(err)
			continue
		}
		if ok {
			inv.Devices = append(inv.Devices, dev)
		}
	}
	if d.share != nil {
		for i := range inv.Devices {
			dev := &inv.Devices[i]
			if dev.Netdev == nil || dev.Kind == KindMemif {
				continue
			}
			ok, err := d.share.Admits(ctx, *dev)
			if err != nil {
				warn(err)
				continue
			}
			if ok {
				dev.Share = &Share{Interfaces: d.opts.ShareInterfaces, BandwidthMbps: d.opts.ShareBandwidthMbps}
			}
		}
	}
	slices.SortFunc(inv.Devices, func(a, b Device) int { return strings.Compare(a.Name, b.Name) })
	return inv, nil
}

func (d Device) equal(o Device) bool {
	return d.Name == o.Name && d.Kind == o.Kind && eqPtr(d.PCI, o.PCI, (*PCI).equal) &&
		eqPtr(d.PF, o.PF, func(a, b *PF) bool { return *a == *b }) &&
		eqPtr(d.VF, o.VF, func(a, b *VF) bool { return *a == *b }) &&
		eqPtr(d.Netdev, o.Netdev, (*Netdev).equal) &&
		eqPtr(d.Memif, o.Memif, func(a, b *Memif) bool { return *a == *b }) && d.Health == o.Health &&
		eqPtr(d.Share, o.Share, func(a, b *Share) bool { return *a == *b })
}

func (p *PCI) equal(o *PCI) bool {
	a, b := *p, *o
	a.IOMMUGroup, b.IOMMUGroup = nil, nil
	return a == b && eqPtr(p.IOMMUGroup, o.IOMMUGroup, func(x, y *int) bool { return *x == *y })
}

func (n *Netdev) equal(o *Netdev) bool {
	a, b := *n, *o
	a.XDP, b.XDP = XDP{}, XDP{}
	same := func(x, y *bool) bool { return *x == *y }
	return a == b && eqPtr(n.XDP.Supported, o.XDP.Supported, same) && eqPtr(n.XDP.ZeroCopy, o.XDP.ZeroCopy, same)
}

func eqPtr[T any](a, b *T, eq func(a, b *T) bool) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return eq(a, b)
}
