package dataplane

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/fastpath-dra/fastpath/dataplane/nldump"
)

// SetDefaultRoute makes the pod's default route go through gateways on its
// interface ifName, as the Network Plumbing WG's "default-route" asks: for
// each address family of the gateways, every other default route of the
// family in the pod's namespace (the cluster network's, on eth0) is deleted
// and one through the gateway added. Done again, it changes nothing.
func SetDefaultRoute(podNetNS, ifName string, gateways []net.IP) error {
	if len(gateways) == 0 {
		return errors.New("no gateway for the default route")
	}
	ns, pod, err := podHandle(podNetNS)
	if err != nil {
		return err
	}
	defer func() { pod.Close(); _ = ns.Close() }()
	link, err := pod.LinkByName(ifName)
	if err != nil {
		return fmt.Errorf("interface %s in the pod: %w", ifName, err)
	}
	done := map[int]bool{}
	for _, gw := range gateways {
		family := netlink.FAMILY_V6
		if gw.To4() != nil {
			family = netlink.FAMILY_V4
		}
		if done[family] {
			continue // one default route per family: the first gateway's
		}
		done[family] = true
		routes, err := nldump.Read(func() ([]netlink.Route, error) { return pod.RouteListFiltered(family, &netlink.Route{Table: 0}, 0) })
		if err != nil {
			return fmt.Errorf("list the pod's routes: %w", err)
		}
		for _, r := range routes {
			if !isDefault(r) || (r.LinkIndex == link.Attrs().Index && r.Gw.Equal(gw)) {
				continue
			}
			if err := pod.RouteDel(&r); err != nil {
				return fmt.Errorf("delete the pod's default route via %s: %w", r.Gw, err)
			}
		}
		route := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw, Family: family}
		if err := pod.RouteReplace(route); err != nil {
			return fmt.Errorf("default route via %s on %s: %w", gw, ifName, err)
		}
	}
	return nil
}

// isDefault says whether r is a default route of the main table.
func isDefault(r netlink.Route) bool {
	if r.Table != 0 && r.Table != 254 {
		return false
	}
	if r.Dst == nil {
		return true
	}
	ones, _ := r.Dst.Mask.Size()
	return ones == 0
}

// PodLink is a pod's interface as the node sees it now.
type PodLink struct {
	MAC string
	MTU int
	// Addresses are its global addresses (no link-local ones).
	Addresses []netip.Addr
}

// InspectPodLink reads the interface ifName in the pod's network namespace.
func InspectPodLink(podNetNS, ifName string) (PodLink, error) {
	ns, pod, err := podHandle(podNetNS)
	if err != nil {
		return PodLink{}, err
	}
	defer func() { pod.Close(); _ = ns.Close() }()
	link, err := pod.LinkByName(ifName)
	if err != nil {
		return PodLink{}, fmt.Errorf("interface %s in the pod: %w", ifName, err)
	}
	out := PodLink{MAC: link.Attrs().HardwareAddr.String(), MTU: link.Attrs().MTU}
	addrs, err := nldump.Read(func() ([]netlink.Addr, error) { return pod.AddrList(link, netlink.FAMILY_ALL) })
	if err != nil {
		return PodLink{}, fmt.Errorf("addresses of %s in the pod: %w", ifName, err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && !ip.Unmap().IsLinkLocalUnicast() {
			out.Addresses = append(out.Addresses, ip.Unmap())
		}
	}
	return out, nil
}
