package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/fastpath-dra/fastpath/dataplane/nldump"
)

// LinkAddresses are the addresses of the host's link name (in this
// process's network namespace: the host's, for the node daemon), IPv4
// and IPv6, link-local ones included, each once; none for a link the host
// does not have.
func LinkAddresses(name string) ([]netip.Addr, error) {
	return LinkAddressesAt("", name)
}

// LinkAddressesAt are the addresses of link name in the network namespace
// at nsPath ("" this process's), as LinkAddresses.
func LinkAddressesAt(nsPath, name string) ([]netip.Addr, error) {
	var h *netlink.Handle
	var err error
	if nsPath == "" {
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	} else {
		var ns netns.NsHandle
		if ns, err = netns.GetFromPath(nsPath); err != nil {
			return nil, fmt.Errorf("open network namespace %s: %w", nsPath, err)
		}
		defer ns.Close()
		h, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	}
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	link, err := h.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("find %s: %w", name, err)
	}
	addrs, err := nldump.Read(func() ([]netlink.Addr, error) { return h.AddrList(link, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("list addresses of %s: %w", name, err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		if ip = ip.Unmap(); !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	return out, nil
}
