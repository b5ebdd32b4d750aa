package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane/fault"
)

// Kinds of sub-interface.
const (
	KindMacvlan = "macvlan"
	KindIPVLAN  = "ipvlan"
	KindVLAN    = "vlan"
)

// SubInterface is an interface a pod gets on a device it shares with
// others: made in the pod's network namespace on the parent, which stays
// in the host as it is.
type SubInterface struct {
	// Parent is the host netdev.
	Parent string
	// Kind is macvlan, ipvlan or vlan; Mode the macvlan mode (bridge,
	// private, vepa, passthru) or the ipvlan mode (l2, l3, l3s).
	Kind string
	Mode string
	// VLANID and VLANProto (802.1q, 802.1ad) of a vlan.
	VLANID    int
	VLANProto string
	// The interface in the pod.
	Name      string
	MTU       int    // 0: the parent's
	MAC       string // "": the kernel's choice (macvlan, vlan)
	Addresses []string
	Routes    []Route
	// Alias marks the interface as this one: it is found again by it,
	// and deleted only with it.
	Alias string
}

// link is the sub-interface as netlink makes it, in namespace ns, on the
// parent of index parent.
func (s SubInterface) link(parent int, ns int) (netlink.Link, error) {
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.MTU, attrs.ParentIndex = s.Name, s.MTU, parent
	attrs.Namespace = netlink.NsFd(ns)
	if s.MAC != "" {
		mac, err := net.ParseMAC(s.MAC)
		if err != nil {
			return nil, fmt.Errorf("MAC %q: %w", s.MAC, err)
		}
		attrs.HardwareAddr = mac
	}
	switch s.Kind {
	case KindMacvlan:
		modes := map[string]netlink.MacvlanMode{"bridge": netlink.MACVLAN_MODE_BRIDGE, "private": netlink.MACVLAN_MODE_PRIVATE,
			"vepa": netlink.MACVLAN_MODE_VEPA, "passthru": netlink.MACVLAN_MODE_PASSTHRU}
		mode, ok := modes[s.Mode]
		if !ok {
			return nil, fmt.Errorf("macvlan mode %q: not one of bridge, private, vepa, passthru", s.Mode)
		}
		return &netlink.Macvlan{LinkAttrs: attrs, Mode: mode}, nil
	case KindIPVLAN:
		modes := map[string]netlink.IPVlanMode{"l2": netlink.IPVLAN_MODE_L2, "l3": netlink.IPVLAN_MODE_L3, "l3s": netlink.IPVLAN_MODE_L3S}
		mode, ok := modes[s.Mode]
		if !ok {
			return nil, fmt.Errorf("ipvlan mode %q: not one of l2, l3, l3s", s.Mode)
		}
		return &netlink.IPVlan{LinkAttrs: attrs, Mode: mode}, nil
	case KindVLAN:
		proto := netlink.VLAN_PROTOCOL_8021Q
		if s.VLANProto == "802.1ad" {
			proto = netlink.VLAN_PROTOCOL_8021AD
		}
		return &netlink.Vlan{LinkAttrs: attrs, VlanId: s.VLANID, VlanProtocol: proto}, nil
	}
	return nil, fmt.Errorf("sub-interface kind %q: not one of macvlan, ipvlan, vlan", s.Kind)
}

// AttachShared makes the sub-interface in the pod's network namespace with
// one RTM_NEWLINK sent in the host that names the pod's namespace (no
// move: no RCU grace period), then adds its addresses, sets it up and adds
// its routes. The parent is not changed. A retry finds the interface by
// its alias and completes it. On failure the interface is deleted.
func (a *Attacher) AttachShared(ctx context.Context, podNetNS string, s SubInterface) (_ Attached, err error) {
	logger := klog.FromContext(ctx).WithValues("parent", s.Parent, "netns", podNetNS)
	ns, pod, err := podHandle(podNetNS)
	if err != nil {
		return Attached{}, err
	}
	defer ns.Close()
	defer pod.Close()

	link, err := findSubInterface(pod, s)
	if err != nil {
		return Attached{}, err
	}
	if link == nil {
		parent, err := netlink.LinkByName(s.Parent)
		var notFound netlink.LinkNotFoundError
		switch {
		case errors.As(err, &notFound):
			return Attached{}, fmt.Errorf("%w: parent interface %s: %w", ErrDeviceGone, s.Parent, err)
		case err != nil:
			return Attached{}, fmt.Errorf("parent interface %s: %w", s.Parent, err)
		}
		l, err := s.link(parent.Attrs().Index, int(ns))
		if err != nil {
			return Attached{}, err
		}
		if err := netlink.LinkAdd(l); err != nil {
			return Attached{}, fmt.Errorf("make %s %s on %s in the pod: %w", s.Kind, s.Name, s.Parent, err)
		}
		logger.V(2).Info("Made sub-interface in pod", "name", s.Name, "kind", s.Kind)
		fault.Point("attach.shared.created")
	}
	defer func() {
		if err != nil {
			if rbErr := a.DetachShared(ctx, podNetNS, s); rbErr != nil {
				err = fmt.Errorf("%w; deleting it also failed: %w", err, rbErr)
			}
		}
	}()
	if link, err = pod.LinkByName(s.Name); err != nil {
		return Attached{}, fmt.Errorf("find %s in the pod: %w", s.Name, err)
	}
	// The kernel takes no alias with a new link: it is set after.
	if link.Attrs().Alias != s.Alias {
		if err := pod.LinkSetAlias(link, s.Alias); err != nil {
			return Attached{}, fmt.Errorf("mark %s as %s: %w", s.Name, s.Alias, err)
		}
	}
	for _, a := range s.Addresses {
		addr, err := netlink.ParseAddr(a)
		if err != nil {
			return Attached{}, fmt.Errorf("address %s: %w", a, err)
		}
		if addr.IP.To4() == nil {
			addr.Flags |= unix.IFA_F_NODAD
		}
		if err := pod.AddrReplace(link, addr); err != nil {
			return Attached{}, fmt.Errorf("add address %s to %s: %w", a, s.Name, err)
		}
	}
	if err := pod.LinkSetUp(link); err != nil {
		return Attached{}, fmt.Errorf("set %s up: %w", s.Name, err)
	}
	for _, r := range s.Routes {
		route, err := podRoute(link.Attrs().Index, r)
		if err != nil {
			return Attached{}, err
		}
		if err := pod.RouteReplace(route); err != nil {
			return Attached{}, fmt.Errorf("add route to %s via %s on %s: %w", r.Destination, r.Gateway, s.Name, err)
		}
	}
	return Attached{Name: s.Name, MAC: link.Attrs().HardwareAddr.String(), MTU: link.Attrs().MTU, Addresses: s.Addresses}, nil
}

// DetachShared deletes the sub-interface from the pod's network namespace.
// A namespace that is gone took its sub-interfaces with it; one without
// the interface has nothing to delete. The parent is not touched.
func (a *Attacher) DetachShared(ctx context.Context, podNetNS string, s SubInterface) error {
	ns, pod, err := podHandle(podNetNS)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Pod network namespace gone: its sub-interfaces went with it", "netns", podNetNS, "reason", err.Error())
		return nil
	}
	defer ns.Close()
	defer pod.Close()
	link, err := findSubInterface(pod, s)
	if err != nil || link == nil {
		return err
	}
	if err := pod.LinkDel(link); err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) || errors.Is(err, unix.ENODEV) {
			return nil
		}
		return fmt.Errorf("delete %s from the pod: %w", s.Name, err)
	}
	fault.Point("detach.shared.deleted")
	return nil
}

// SharedInPod says whether the sub-interface is in the pod's namespace as
// AttachShared leaves it: marked, up, with its addresses (an attach killed
// part-way left less).
func (a *Attacher) SharedInPod(podNetNS string, s SubInterface) (bool, error) {
	ns, pod, err := podHandle(podNetNS)
	if err != nil {
		return false, err
	}
	defer ns.Close()
	defer pod.Close()
	l, err := findSubInterface(pod, s)
	if err != nil || l == nil || l.Attrs().Alias != s.Alias || l.Attrs().Flags&net.FlagUp == 0 {
		return false, err
	}
	addrs, err := pod.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return false, fmt.Errorf("addresses of %s in the pod: %w", s.Name, err)
	}
	for _, want := range s.Addresses {
		if !slices.ContainsFunc(addrs, func(a netlink.Addr) bool { return a.IPNet.String() == want }) {
			return false, nil
		}
	}
	return true, nil
}

// findSubInterface returns the pod's interface of the sub-interface's name
// if it is this sub-interface, nil if the pod has none of that name, and an
// error if the name is another interface's. It is this sub-interface if it
// carries its alias, or if it is of its kind without an alias: made, and
// the process killed before the alias was set (the kernel takes none with
// a new link).
func findSubInterface(pod *netlink.Handle, s SubInterface) (netlink.Link, error) {
	l, err := pod.LinkByName(s.Name)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("look for %s in the pod: %w", s.Name, err)
	case l.Attrs().Alias == "" && l.Type() == s.Kind:
	case l.Attrs().Alias != s.Alias:
		return nil, fmt.Errorf("the pod already has an interface %s (not sub-interface %s of %s)", s.Name, s.Alias, s.Parent)
	}
	return l, nil
}
