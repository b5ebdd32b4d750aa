package dataplane

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane/fault"
	"github.com/fastpath-dra/fastpath/dataplane/nldump"
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
	// MaxTxRate limits the interface's transmit rate, in bits per second
	// (a token bucket as its root qdisc); 0: no limit.
	MaxTxRate uint64
	// Alias marks the interface as this one: it is found again by it,
	// and deleted only with it.
	Alias string
}

// linkInfo is the sub-interface's IFLA_LINKINFO: its kind and mode.
func (s SubInterface) linkInfo() (*nl.RtAttr, error) {
	info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
	info.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated(s.Kind))
	data := info.AddRtAttr(nl.IFLA_INFO_DATA, nil)
	switch s.Kind {
	case KindMacvlan:
		modes := map[string]uint32{"private": nl.MACVLAN_MODE_PRIVATE, "vepa": nl.MACVLAN_MODE_VEPA, "bridge": nl.MACVLAN_MODE_BRIDGE,
			"passthru": nl.MACVLAN_MODE_PASSTHRU}
		mode, ok := modes[s.Mode]
		if !ok {
			return nil, fmt.Errorf("macvlan mode %q: not one of bridge, private, vepa, passthru", s.Mode)
		}
		data.AddRtAttr(nl.IFLA_MACVLAN_MODE, nl.Uint32Attr(mode))
	case KindIPVLAN:
		modes := map[string]uint16{"l2": 0, "l3": 1, "l3s": 2} // IPVLAN_MODE_L2, _L3, _L3S
		mode, ok := modes[s.Mode]
		if !ok {
			return nil, fmt.Errorf("ipvlan mode %q: not one of l2, l3, l3s", s.Mode)
		}
		data.AddRtAttr(nl.IFLA_IPVLAN_MODE, nl.Uint16Attr(mode))
	case KindVLAN:
		if s.VLANID < 1 || s.VLANID > 4094 {
			return nil, fmt.Errorf("VLAN ID %d: not between 1 and 4094", s.VLANID)
		}
		proto := uint16(unix.ETH_P_8021Q)
		if s.VLANProto == "802.1ad" {
			proto = unix.ETH_P_8021AD
		}
		data.AddRtAttr(nl.IFLA_VLAN_ID, nl.Uint16Attr(uint16(s.VLANID)))
		data.AddRtAttr(nl.IFLA_VLAN_PROTOCOL, binary.BigEndian.AppendUint16(nil, proto))
	default:
		return nil, fmt.Errorf("sub-interface kind %q: not one of macvlan, ipvlan, vlan", s.Kind)
	}
	return info, nil
}

// create makes the sub-interface on the parent of index parent in the
// namespace ns, with one RTM_NEWLINK sent in the host's: name, MTU, MAC,
// kind and mode together. It fails with EEXIST if the namespace has an
// interface of that name.
func (s SubInterface) create(parent int, ns netns.NsHandle) error {
	info, err := s.linkInfo()
	if err != nil {
		return err
	}
	sock, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer sock.Close()
	req := nl.NewNetlinkRequest(unix.RTM_NEWLINK, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK)
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: sock}}
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	req.AddData(nl.NewRtAttr(unix.IFLA_LINK, nl.Uint32Attr(uint32(parent))))
	req.AddData(nl.NewRtAttr(unix.IFLA_NET_NS_FD, nl.Uint32Attr(uint32(ns))))
	req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(s.Name)))
	if s.MTU > 0 {
		req.AddData(nl.NewRtAttr(unix.IFLA_MTU, nl.Uint32Attr(uint32(s.MTU))))
	}
	if s.MAC != "" {
		mac, err := net.ParseMAC(s.MAC)
		if err != nil {
			return fmt.Errorf("MAC %q: %w", s.MAC, err)
		}
		req.AddData(nl.NewRtAttr(unix.IFLA_ADDRESS, mac))
	}
	req.AddData(info)
	_, err = req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// tokenBucket is a root TBF qdisc limiting the link's transmit rate to
// rate bits per second: a burst of 10 ms at that rate, at least 64 KiB (a
// GSO packet: less drops them), and a queue of 25 ms more.
func tokenBucket(link int, rate uint64) *netlink.Tbf {
	bytes := rate / 8
	burst := uint32(max(bytes/100, 64<<10))
	return &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
		Rate:       bytes, Limit: uint32(min(bytes/40, 1<<30)) + burst, Buffer: netlink.Xmittime(bytes, burst),
	}
}

// ifIndex is the index of the host interface name (SIOCGIFINDEX: no
// netlink dump, no parsing), ErrDeviceGone if there is none.
func ifIndex(name string) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("socket for SIOCGIFINDEX: %w", err)
	}
	defer func() { _ = unix.Close(fd) }()
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, fmt.Errorf("interface name %q: %w", name, err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		if errors.Is(err, unix.ENODEV) {
			return 0, fmt.Errorf("%w: parent interface %s: %w", ErrDeviceGone, name, err)
		}
		return 0, fmt.Errorf("parent interface %s: %w", name, err)
	}
	return int(ifr.Uint32()), nil
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

	// The interface is made first and looked for only if the name is
	// taken: by an earlier attach (a retried hook), or by another
	// interface (refused).
	parent, err := ifIndex(s.Parent)
	if err != nil {
		return Attached{}, err
	}
	switch err := s.create(parent, ns); {
	case errors.Is(err, unix.EEXIST):
		if _, err := findSubInterface(pod, s); err != nil {
			return Attached{}, err
		}
	case err != nil:
		return Attached{}, fmt.Errorf("make %s %s on %s in the pod: %w", s.Kind, s.Name, s.Parent, err)
	default:
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
	link, err := pod.LinkByName(s.Name)
	if err != nil {
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
	if s.MaxTxRate > 0 {
		if err := pod.QdiscReplace(tokenBucket(link.Attrs().Index, s.MaxTxRate)); err != nil {
			return Attached{}, fmt.Errorf("limit %s to %d bit/s: %w", s.Name, s.MaxTxRate, err)
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
	addrs, err := nldump.Read(func() ([]netlink.Addr, error) { return pod.AddrList(l, netlink.FAMILY_ALL) })
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
