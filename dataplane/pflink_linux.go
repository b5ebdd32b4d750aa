package dataplane

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// PFLinks reads and sets the MTU and state of a netdev of the host's
// namespace: a PF's, as a FastpathNodeConfig asks.
type PFLinks struct{}

// Link is the netdev's MTU and whether it is administratively up.
func (PFLinks) Link(name string) (mtu int, up bool, err error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return 0, false, fmt.Errorf("netdev %s: %w", name, err)
	}
	return l.Attrs().MTU, l.Attrs().Flags&net.FlagUp != 0, nil
}

// SetMTU sets the netdev's MTU.
func (PFLinks) SetMTU(name string, mtu int) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("netdev %s: %w", name, err)
	}
	if err := netlink.LinkSetMTU(l, mtu); err != nil {
		return fmt.Errorf("setting the MTU of %s to %d: %w", name, mtu, err)
	}
	return nil
}

// SetUp sets the netdev up or down.
func (PFLinks) SetUp(name string, up bool) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("netdev %s: %w", name, err)
	}
	if up {
		err = netlink.LinkSetUp(l)
	} else {
		err = netlink.LinkSetDown(l)
	}
	if err != nil {
		return fmt.Errorf("setting %s %s: %w", name, map[bool]string{true: "up", false: "down"}[up], err)
	}
	return nil
}
