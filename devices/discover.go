package devices

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
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
	// MemifEndpoints are the operator's static memif endpoints, already
	// decoded, defaulted and validated by the caller (fastpathd reads them
	// from --memif-config, a v1alpha1.MemifConfig); their sockets must be in
	// MemifDir. A configured endpoint wins over a socket of the same name.
	MemifEndpoints []MemifEndpoint
	// MemifSource says where MemifEndpoints were read (the file's path),
	// for errors.
	MemifSource string
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
	// ResourceNames give devices the resource name NetworkAttachmentDefinitions
	// ask for (attribute k8s.cni.cncf.io/resourceName): the first whose
	// filter admits a device names it. A device none admits has
	// DefaultResourceName.
	ResourceNames []ResourceName
	// Compile compiles Filter, Share and the ResourceNames' filters
	// (fastpathd's is filter.Compile); required when any is set.
	Compile func(expr string) (Selector, error)
}

// A Selector is a compiled expression admitting devices by their
// attributes, as a DeviceClass selector does.
type Selector interface {
	Admits(ctx context.Context, driver string, attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) (bool, error)
}

// ResourceName is a resource name and the devices that have it.
type ResourceName struct {
	// Name is what the NetworkAttachmentDefinitions' annotation
	// k8s.v1.cni.cncf.io/resourceName says, e.g. intel.com/sriov_netdevice.
	Name string
	// Filter is a CEL expression, as Options.Filter.
	Filter string
}

// DefaultResourceName is the resource name of a device of kind kind when
// the operator gives it none: fastpath.dev/sriov-vf, fastpath.dev/nic, ...
func DefaultResourceName(kind Kind) string { return DriverName + "/" + string(kind) }

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
	opts  Options
	sysfs sysfs
	names *pciNames

	mu  sync.Mutex
	sel *selection
	// reselected wakes Watch when Select changed the selection; made by
	// Watch, nil before.
	reselected chan struct{}
	// known are the netdevs of the inventory Watch emitted last.
	known map[string]bool
}

// Selection is what of Options a node's configuration changes while the
// daemon runs (Discoverer.Select): which devices are published, which are
// shared and how, their resource names, the static memif endpoints.
type Selection struct {
	Filter, Share                       string
	ShareInterfaces, ShareBandwidthMbps int
	ResourceNames                       []ResourceName
	MemifEndpoints                      []MemifEndpoint
	// MemifSource says where MemifEndpoints were read, for errors.
	MemifSource string
}

// Selection is the part of o that Select changes.
func (o Options) Selection() Selection {
	return Selection{Filter: o.Filter, Share: o.Share, ShareInterfaces: o.ShareInterfaces, ShareBandwidthMbps: o.ShareBandwidthMbps,
		ResourceNames: o.ResourceNames, MemifEndpoints: o.MemifEndpoints, MemifSource: o.MemifSource}
}

// selection is a Selection compiled.
type selection struct {
	filter, share Selector
	// resourceNames are the ResourceNames compiled, in order.
	resourceNames                       []resourceName
	memif                               []MemifEndpoint
	shareInterfaces, shareBandwidthMbps int
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
	sel, err := d.compileSelection(opts.Selection())
	if err != nil {
		return nil, err
	}
	d.sel = sel
	d.names = newPCINames()
	return d, nil
}

// Select replaces the selection: the next discovery, which Watch runs at
// once, publishes by it. A selection with an error changes nothing; its
// errors wrap ErrBadOptions.
func (d *Discoverer) Select(s Selection) error {
	sel, err := d.compileSelection(s)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sel = sel
	select {
	case d.reselected <- struct{}{}:
	default: // no Watch (a nil channel), or a wake pending
	}
	return nil
}

// Rediscover has Watch discover again at once, not debounced: the caller
// changed the devices in a way no event may report (a VF bound to
// another driver on a node whose sysfs is not the live host's).
func (d *Discoverer) Rediscover() {
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case d.reselected <- struct{}{}:
	default:
	}
}

func (d *Discoverer) selection() *selection {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sel
}

// compileSelection checks and compiles s.
func (d *Discoverer) compileSelection(s Selection) (*selection, error) {
	opts := d.opts
	sel := &selection{shareInterfaces: s.ShareInterfaces, shareBandwidthMbps: s.ShareBandwidthMbps}
	var err error
	if sel.filter, err = opts.compile(s.Filter); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadOptions, err)
	}
	if sel.share, err = opts.compile(s.Share); err != nil {
		return nil, fmt.Errorf("%w: share: %w", ErrBadOptions, err)
	}
	for _, rn := range s.ResourceNames {
		if err := ValidResourceName(rn.Name); err != nil {
			return nil, fmt.Errorf("%w: resource name %q: %w", ErrBadOptions, rn.Name, err)
		}
		if rn.Filter == "" {
			return nil, fmt.Errorf("%w: resource name %s: needs a filter (\"true\" for every device)", ErrBadOptions, rn.Name)
		}
		f, err := opts.compile(rn.Filter)
		if err != nil {
			return nil, fmt.Errorf("%w: resource name %s: %w", ErrBadOptions, rn.Name, err)
		}
		sel.resourceNames = append(sel.resourceNames, resourceName{rn.Name, f})
	}
	switch {
	case s.ShareInterfaces < 0:
		return nil, fmt.Errorf("%w: share interfaces %d: must be at least 1", ErrBadOptions, s.ShareInterfaces)
	case s.ShareInterfaces == 0:
		sel.shareInterfaces = DefaultShareInterfaces
	}
	if s.ShareBandwidthMbps < 0 {
		return nil, fmt.Errorf("%w: share bandwidth %d Mbit/s: must not be negative", ErrBadOptions, s.ShareBandwidthMbps)
	}
	if err := checkMemifDir(s.MemifEndpoints, s.MemifSource, opts.MemifDir); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadOptions, err)
	}
	sel.memif = slices.Clone(s.MemifEndpoints)
	return sel, nil
}

// Discover returns what the node offers now. Devices that cannot be read
// are skipped with a warning (logged, and in Inventory.Warnings); only a
// failure to look at all is an error.
func (d *Discoverer) Discover(ctx context.Context) (Inventory, error) {
	logger := klog.FromContext(ctx)
	inv := Inventory{Taken: time.Now()}
	sel := d.selection()
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
	rdmaMode := ""
	if len(rdma) > 0 && d.sysfs.live() {
		if rdmaMode, err = netlink.RdmaSystemGetNetnsMode(); err != nil {
			warn(fmt.Errorf("RDMA network namespace mode unknown: %w", err))
		}
	}
	for i := range candidates {
		if n := candidates[i].Netdev; n != nil {
			n.RDMADevice = rdma[n.Name]
			if n.RDMADevice != "" {
				n.RDMANetnsMode = rdmaMode
			}
		}
	}
	memifs, warnings := discoverMemif(d.opts.MemifDir, sel.memif)
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
		if sel.filter == nil {
			if dev.Kind != KindNetdev {
				inv.Devices = append(inv.Devices, dev)
			}
			continue
		}
		ok, err := admits(ctx, sel.filter, dev)
		if err != nil {
			warn(err)
			continue
		}
		if ok {
			inv.Devices = append(inv.Devices, dev)
		}
	}
	if sel.share != nil {
		for i := range inv.Devices {
			dev := &inv.Devices[i]
			if dev.Netdev == nil || dev.Kind == KindMemif {
				continue
			}
			ok, err := admits(ctx, sel.share, *dev)
			if err != nil {
				warn(err)
				continue
			}
			if ok {
				dev.Share = &Share{Interfaces: sel.shareInterfaces, BandwidthMbps: sel.shareBandwidthMbps}
			}
		}
	}
	for i := range inv.Devices {
		if err := sel.nameResource(ctx, &inv.Devices[i]); err != nil {
			warn(err)
		}
	}
	slices.SortFunc(inv.Devices, func(a, b Device) int { return strings.Compare(a.Name, b.Name) })
	return inv, nil
}

// resourceName is a ResourceName compiled.
type resourceName struct {
	name   string
	filter Selector
}

// compile is expr compiled; nil for none.
func (o Options) compile(expr string) (Selector, error) {
	switch {
	case expr == "":
		return nil, nil
	case o.Compile == nil:
		return nil, fmt.Errorf("filter %q: no CEL compiler (Options.Compile)", expr)
	}
	return o.Compile(expr)
}

// admits evaluates s on dev; its errors name the device.
func admits(ctx context.Context, s Selector, dev Device) (bool, error) {
	ok, err := s.Admits(ctx, DriverName, dev.Attributes())
	if err != nil {
		return false, fmt.Errorf("device %s: %w", dev.Name, err)
	}
	return ok, nil
}

// nameResource gives a device with a PCI function or a netdev its
// resource name: the first of the operator's whose filter admits it,
// else the default of its kind. A filter that fails on the device is
// reported, and the next one tried.
func (sel *selection) nameResource(ctx context.Context, dev *Device) error {
	if dev.PCI == nil && dev.Netdev == nil {
		return nil
	}
	var errs []error
	for _, rn := range sel.resourceNames {
		ok, err := admits(ctx, rn.filter, *dev)
		if err != nil {
			errs = append(errs, fmt.Errorf("resource name %s: %w", rn.name, err))
			continue
		}
		if ok {
			dev.ResourceName = rn.name
			return errors.Join(errs...)
		}
	}
	dev.ResourceName = DefaultResourceName(dev.Kind)
	return errors.Join(errs...)
}

// ValidResourceName says why name cannot be a resource name, or nil: as
// a device plugin's, a qualified name with a domain (vendor.com/name).
func ValidResourceName(name string) error {
	domain, rest, ok := strings.Cut(name, "/")
	if !ok || domain == "" || rest == "" {
		return errors.New("must be DOMAIN/NAME, e.g. intel.com/sriov_netdevice")
	}
	if errs := validation.IsQualifiedName(name); len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

func (d Device) equal(o Device) bool {
	return d.Name == o.Name && d.Kind == o.Kind && eqPtr(d.PCI, o.PCI, (*PCI).equal) &&
		eqPtr(d.PF, o.PF, func(a, b *PF) bool { return *a == *b }) &&
		eqPtr(d.VF, o.VF, func(a, b *VF) bool { return *a == *b }) &&
		eqPtr(d.Netdev, o.Netdev, (*Netdev).equal) &&
		eqPtr(d.Memif, o.Memif, func(a, b *Memif) bool { return *a == *b }) && d.Health == o.Health &&
		eqPtr(d.Share, o.Share, func(a, b *Share) bool { return *a == *b }) && d.ResourceName == o.ResourceName
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
