package testbed

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/fastpath-dra/fastpath/dataplane/nldump"
)

// setupNodeLink puts the node IP on a veth of the bed's own: the kernel may
// have no dummy link type, and loopback addresses make a poor node IP.
func setupNodeLink(cfg Config) error {
	name := cfg.nodeLink()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: cfg.LinkPrefix + "node1"}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("create node link %s: %w", name, err)
	}
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find node link %s: %w", name, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(cfg.NodeIP.AsSlice()), Mask: net.CIDRMask(32, 32)}}
	if err := netlink.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("add %s to %s: %w", cfg.NodeIP, name, err)
	}
	peer, err := netlink.LinkByName(veth.PeerName)
	if err != nil {
		return fmt.Errorf("find node link peer %s: %w", veth.PeerName, err)
	}
	for _, l := range []netlink.Link{peer, link} {
		if err := netlink.LinkSetUp(l); err != nil {
			return fmt.Errorf("set %s up: %w", l.Attrs().Name, err)
		}
	}
	return nil
}

// removeLinks deletes the pod veths still enslaved to the bed's bridge, then
// every link whose name starts with cfg.LinkPrefix.
func removeLinks(cfg Config) error {
	links, err := nldump.Read(netlink.LinkList)
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	bridgeIndex := -1
	for _, l := range links {
		if l.Attrs().Name == cfg.bridge() {
			bridgeIndex = l.Attrs().Index
		}
	}
	var errs []error
	for _, l := range links {
		a := l.Attrs()
		ours := strings.HasPrefix(a.Name, cfg.LinkPrefix) || (bridgeIndex > 0 && a.MasterIndex == bridgeIndex)
		if !ours {
			continue
		}
		if err := netlink.LinkDel(l); err != nil && !errors.Is(err, netlink.ErrNotImplemented) {
			// A veth's peer goes with it: deleting it twice is not an error.
			if _, lookErr := netlink.LinkByIndex(a.Index); lookErr == nil {
				errs = append(errs, fmt.Errorf("delete link %s: %w", a.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// leftoverLinks lists links that removeLinks would delete.
func leftoverLinks(cfg Config) []string {
	links, err := nldump.Read(netlink.LinkList)
	if err != nil {
		return []string{fmt.Sprintf("list links: %v", err)}
	}
	var out []string
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, cfg.LinkPrefix) {
			out = append(out, "link "+l.Attrs().Name)
		}
	}
	return out
}
