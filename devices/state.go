package devices

import (
	"context"
	"fmt"
)

// netdevState fills in the netdev state of the PCI devices and adds the
// virtual netdevs: from netlink, ethtool and the kernel's XDP features on a
// live host, from class/net files below a fixture root.
func (d *Discoverer) netdevState(ctx context.Context, pciDevs []Device, virtual []string, warn func(error)) ([]Device, error) {
	if d.sysfs.live() {
		return liveNetdevState(ctx, pciDevs, warn)
	}
	errs := make([]error, len(pciDevs))
	parallel(len(pciDevs), func(i int) {
		dev := &pciDevs[i]
		if dev.Netdev == nil {
			return
		}
		l, err := sysfsLink(d.sysfs, dev.Netdev.Name)
		if err != nil {
			errs[i] = fmt.Errorf("skipping PCI device %s: %w", dev.PCI.Address, err)
			return
		}
		dev.Netdev = l.netdev()
		dev.Netdev.SpeedMbps = sysfsSpeed(d.sysfs, l.Name)
	})
	out := make([]Device, 0, len(pciDevs))
	for i, dev := range pciDevs {
		if errs[i] != nil {
			warn(errs[i])
			continue
		}
		out = append(out, dev)
	}
	for _, name := range virtual {
		l, err := sysfsLink(d.sysfs, name)
		if err != nil {
			warn(fmt.Errorf("skipping netdev %s: %w", name, err))
			continue
		}
		out = append(out, Device{Name: NetdevDeviceName(name), Kind: KindNetdev, Netdev: l.netdev()})
	}
	return out, nil
}
