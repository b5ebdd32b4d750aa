package dra

import (
	"context"
	"errors"
	"slices"
	"time"

	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// What the driver publishes is discovery's inventory, merged here with the
// devices claims hold. Moved into a pod, bound to vfio-pci, handed to a
// CNI plugin, a device leaves the host's sight (or its netdev does) until
// it is released: it stays published as it was when its claim was
// planned (claims.Device.Published), so that a pod costs no write of the
// node's slices and no attribute flips while the device is allocated. A
// device really gone is not held, and is unpublished as discovery says: a
// PCI function gone from sysfs (removed, its PF's VF count lowered), a
// virtual netdev that health last found neither in the host nor in its
// pod (deleted).

// releasedGrace is how long, at most, a device released stays published as
// it was while no discovery begun after its release has been published:
// the netdev Unprepare gives back reaches discovery a debounce later.
const releasedGrace = 10 * time.Second

// releasedDevice is a device of a claim just unprepared, as it was
// published.
type releasedDevice struct {
	published  *claims.PublishedDevice
	pciAddress string
	at         time.Time
}

// resources are what the node publishes now: the last inventory, with the
// devices claims hold as they were published when prepared (held), and
// the devices' taints. False before the first inventory.
func (d *Driver) resources(ctx context.Context) (resourceslice.DriverResources, bool) {
	d.mu.Lock()
	inv := d.published
	d.mu.Unlock()
	if inv == nil {
		return resourceslice.DriverResources{}, false
	}
	taints := d.health.taints()
	d.binder.taints(taints)
	res := ResourcesWith(d.opts.NodeName, *inv, d.held(ctx), taints, PublishOptions{PFCounters: d.opts.PFCounters, NUMANodeLists: d.opts.NUMANodeLists, Binding: d.opts.Binding.Selector})
	byKind := map[string]int{}
	for _, s := range res.Pools[d.opts.NodeName].Slices {
		for _, dev := range s.Devices {
			if k := dev.Attributes["kind"].StringValue; k != nil {
				byKind[*k]++
			}
		}
	}
	d.mu.Lock()
	d.publishedKinds = byKind
	d.mu.Unlock()
	return res, true
}

// held are the devices published as they were, by name: those the store's
// claims hold, and those just released that discovery has not seen back.
func (d *Driver) held(ctx context.Context) map[string]*claims.PublishedDevice {
	held := map[string]*claims.PublishedDevice{}
	for _, c := range d.opts.Store.View() {
		if c.Driver != claims.DriverFastpath {
			continue
		}
		for i := range c.Devices {
			if dev := &c.Devices[i]; d.holds(ctx, c, dev) {
				held[dev.Device] = dev.Published
			}
		}
	}
	for name, r := range d.stillReleased() {
		if _, ok := held[name]; ok || d.pciGone(r.pciAddress) {
			continue
		}
		held[name] = r.published
	}
	return held
}

// holds says whether dev, a device of claim c, is published as it was.
func (d *Driver) holds(ctx context.Context, c *claims.Claim, dev *claims.Device) bool {
	switch {
	case dev.Published == nil || dev.Shared != nil:
		return false
	case dev.PCIAddress != "":
		if d.pciGone(dev.PCIAddress) {
			klog.FromContext(ctx).V(2).Info("Not publishing a claimed device whose PCI function is gone", "device", dev.Device, "claim", c.String(), "pciAddress", dev.PCIAddress)
			return false
		}
	case d.health.lost(dev.Device):
		klog.FromContext(ctx).V(2).Info("Not publishing a claimed device that is gone", "device", dev.Device, "claim", c.String())
		return false
	}
	return true
}

// pciGone says whether the PCI function at addr is no longer in sysfs;
// false for "".
func (d *Driver) pciGone(addr string) bool {
	if addr == "" {
		return false
	}
	_, err := d.opts.PCI.Driver(addr)
	return errors.Is(err, dataplane.ErrDeviceGone)
}

// releasing are the devices of claim c, being unprepared, that stay
// published as they were until discovery sees them back: all but those
// the undo found gone, PCI functions gone from sysfs, and virtual netdevs
// still recorded in their pod when the unprepare began (inPod) that
// health found there no more (deleted with it). Health's word on a netdev given back to the host (no longer
// recorded in the pod) does not count: its last look may have been taken
// while the netdev was on its way out of the pod, and the inventory it
// compared with is older than the return.
func (d *Driver) releasing(ctx context.Context, c *claims.Claim, gone []*claims.Device, inPod map[string]bool) []claims.Device {
	logger := klog.FromContext(ctx)
	var out []claims.Device
	for i := range c.Devices {
		dev := &c.Devices[i]
		switch {
		case dev.Published == nil || dev.Shared != nil,
			slices.ContainsFunc(gone, func(g *claims.Device) bool { return g.Device == dev.Device }):
			continue
		case d.pciGone(dev.PCIAddress):
			logger.V(2).Info("Not publishing a released device whose PCI function is gone", "device", dev.Device, "claim", c.String(), "pciAddress", dev.PCIAddress)
			continue
		case dev.PCIAddress == "" && inPod[dev.Device] && d.health.lost(dev.Device):
			logger.V(2).Info("Not publishing a released device that is gone", "device", dev.Device, "claim", c.String())
			continue
		}
		out = append(out, *dev)
	}
	return out
}

// release publishes again once a claim is unprepared: its devices (back,
// from releasing) stay published as they were until discovery has seen
// them back, or a discovery begun after now has been published, or for
// releasedGrace at most.
func (d *Driver) release(ctx context.Context, back []claims.Device) {
	now := time.Now()
	d.mu.Lock()
	for _, dev := range back {
		d.released[dev.Device] = releasedDevice{published: dev.Published, pciAddress: dev.PCIAddress, at: now}
	}
	d.mu.Unlock()
	d.republish(ctx)
	if len(back) > 0 {
		bg := context.WithoutCancel(ctx)
		time.AfterFunc(releasedGrace, func() { d.republish(bg) })
	}
}

// stillReleased are the released devices discovery has not seen back, by
// name; it forgets the others.
func (d *Driver) stillReleased() map[string]releasedDevice {
	d.mu.Lock()
	defer d.mu.Unlock()
	var taken time.Time
	if d.published != nil {
		taken = d.published.Taken
	}
	out := map[string]releasedDevice{}
	for name, r := range d.released {
		dev, seen := d.inventory[name]
		_, hadNetdev := r.published.Attributes["ifName"]
		if (seen && (dev.Netdev != nil || !hadNetdev)) || taken.After(r.at) || time.Since(r.at) >= releasedGrace {
			delete(d.released, name)
			continue
		}
		out[name] = r
	}
	return out
}
