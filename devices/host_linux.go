package devices

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane/nldump"
)

// host reads a live host's network state: links with one RTM_GETLINK dump,
// default routes, ethtool facts and the kernel's XDP features. Everything
// netlink-shaped that discovery needs goes through here.
type host struct{}

// links dumps every link of the host network namespace.
func (host) links() ([]link, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_DUMP)
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	msgs, err := nldump.Read(func() ([][]byte, error) { return req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK) })
	if err != nil {
		return nil, fmt.Errorf("dump links: %w", err)
	}
	out := make([]link, 0, len(msgs))
	for _, m := range msgs {
		l, err := parseLink(m)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

func parseLink(m []byte) (link, error) {
	if len(m) < unix.SizeofIfInfomsg {
		return link{}, errors.New("short RTM_NEWLINK message")
	}
	info := nl.DeserializeIfInfomsg(m)
	l := link{Index: int(info.Index), Loopback: info.Flags&unix.IFF_LOOPBACK != 0, OperState: "unknown"}
	err := eachAttr(m[unix.SizeofIfInfomsg:], func(typ uint16, v []byte) error {
		switch typ {
		case unix.IFLA_IFNAME:
			l.Name = string(trimNul(v))
		case unix.IFLA_ADDRESS:
			l.MAC = net.HardwareAddr(v).String()
		case unix.IFLA_MTU:
			l.MTU = int(native32(v))
		case unix.IFLA_MIN_MTU:
			l.MinMTU = int(native32(v))
		case unix.IFLA_MAX_MTU:
			l.MaxMTU = int(native32(v))
		case unix.IFLA_OPERSTATE:
			if len(v) > 0 {
				l.OperState = netlink.LinkOperState(v[0]).String()
			}
		case unix.IFLA_IFALIAS:
			l.Alias = string(trimNul(v))
		case unix.IFLA_LINK:
			l.ParentIndex = int(native32(v))
		case unix.IFLA_MASTER:
			l.MasterIndex = int(native32(v))
		case unix.IFLA_LINKINFO:
			err := eachAttr(v, func(typ uint16, v []byte) error {
				if typ == unix.IFLA_INFO_KIND {
					l.Kind = string(trimNul(v))
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("IFLA_LINKINFO of link %d: %w", l.Index, err)
			}
		}
		return nil
	})
	if err != nil {
		return link{}, fmt.Errorf("parse RTM_NEWLINK: %w", err)
	}
	return l, nil
}

// eachAttr calls fn with the type and the value of each netlink attribute
// in b, in order, without copying them: a link dump holds dozens of
// attributes per link, and discovery reads a handful.
func eachAttr(b []byte, fn func(typ uint16, v []byte) error) error {
	for len(b) >= unix.SizeofRtAttr {
		n := int(nl.NativeEndian().Uint16(b[0:2]))
		if n < unix.SizeofRtAttr || n > len(b) {
			return fmt.Errorf("attribute of length %d in %d bytes", n, len(b))
		}
		// The type without the nested and byte-order flags.
		if err := fn(nl.NativeEndian().Uint16(b[2:4])&nl.NLA_TYPE_MASK, b[unix.SizeofRtAttr:n]); err != nil {
			return err
		}
		b = b[min(nlaAlign(n), len(b)):]
	}
	return nil
}

// nlaAlign rounds n up to netlink's 4-byte alignment.
func nlaAlign(n int) int { return (n + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1) }

func native32(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return nl.NativeEndian().Uint32(b)
}

func trimNul(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}

// uplinks returns the indexes of the links that carry the node's traffic and
// must never be handed out: those with a default route, their lower links
// (the parent of a VLAN or macvlan, the ports of a bond or bridge), again
// down to the hardware.
func (host) uplinks(links []link) (map[int]bool, error) {
	routes, err := nldump.Read(func() ([]netlink.Route, error) { return netlink.RouteList(nil, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	up := map[int]bool{}
	for _, r := range routes {
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones != 0 {
				continue
			}
		}
		if r.LinkIndex > 0 {
			up[r.LinkIndex] = true
		}
		for _, nh := range r.MultiPath {
			up[nh.LinkIndex] = true
		}
	}
	for changed := true; changed; {
		changed = false
		for _, l := range links {
			if up[l.Index] && l.ParentIndex > 0 && l.ParentIndex != l.Index && !up[l.ParentIndex] {
				up[l.ParentIndex], changed = true, true
			}
			if !up[l.Index] && l.MasterIndex > 0 && up[l.MasterIndex] {
				up[l.Index], changed = true, true
			}
		}
	}
	return up, nil
}

// ethtoolFacts fills in driver, firmware, channels and, for hardware, link
// speed. Each fact the device does not report stays unset.
func (host) ethtoolFacts(et *ethtool.Ethtool, n *Netdev, hardware bool) {
	if info, err := et.DriverInfo(n.Name); err == nil {
		n.Driver, n.Firmware = info.Driver, info.FwVersion
	}
	if ch, err := et.GetChannels(n.Name); err == nil {
		n.CombinedChannels, n.MaxCombinedChannels = int(ch.CombinedCount), int(ch.MaxCombined)
	}
	// Virtual links have no link settings (and the library complains).
	if !hardware {
		return
	}
	// ETHTOOL_GSET, which the kernel serves for every driver that reports
	// link settings. (The library's GetLinkSettings asks with
	// ETHTOOL_GLINKSETTINGS but skips the kernel's mask-size handshake, so
	// on a real NIC it prints a warning to stdout, outside the daemon's
	// logs, and then makes this same call.)
	if speed, err := et.CmdGet(&ethtool.EthtoolCmd{}, n.Name); err == nil && speed != 0 && speed != ^uint32(0) {
		n.SpeedMbps = int(speed)
	}
}

// liveNetdevState reads the host's links once and fills in the netdevs of
// the PCI devices, leaves out the uplink, and adds the virtual netdevs.
func liveNetdevState(ctx context.Context, pciDevs []Device, warn func(error)) ([]Device, error) {
	var h host
	links, err := h.links()
	if err != nil {
		return nil, err
	}
	up, err := h.uplinks(links)
	if err != nil {
		return nil, err
	}
	var indexes []int
	for _, l := range links {
		if !l.Loopback && !up[l.Index] {
			indexes = append(indexes, l.Index)
		}
	}
	features, err := h.xdpFeatures(indexes)
	if err != nil {
		// Unknown is a fine answer; a broken netlink socket is not fatal here.
		warn(fmt.Errorf("XDP features unknown: %w", err))
	}
	et, err := ethtool.NewEthtool()
	if err != nil {
		return nil, fmt.Errorf("open ethtool socket: %w", err)
	}
	defer et.Close()
	byName := make(map[string]link, len(links))
	for _, l := range links {
		byName[l.Name] = l
	}
	fill := func(l link) *Netdev {
		n := l.netdev()
		h.ethtoolFacts(et, n, l.Kind == "")
		if f, ok := features[l.Index]; ok {
			n.XDP = xdpFromFeatures(f)
		}
		return n
	}
	out := make([]Device, 0, len(pciDevs))
	pciNetdevs := map[string]bool{}
	for _, dev := range pciDevs {
		if dev.Netdev != nil {
			pciNetdevs[dev.Netdev.Name] = true
			l, ok := byName[dev.Netdev.Name]
			if !ok {
				warn(fmt.Errorf("skipping PCI device %s: its netdev %s vanished", dev.PCI.Address, dev.Netdev.Name))
				continue
			}
			if up[l.Index] {
				klog.FromContext(ctx).V(2).Info("Not publishing the uplink", "device", dev.Name, "netdev", l.Name)
				continue
			}
			dev.Netdev = fill(l)
		}
		out = append(out, dev)
	}
	for _, l := range links {
		if l.Loopback || l.Kind == "" || up[l.Index] || pciNetdevs[l.Name] {
			continue
		}
		out = append(out, Device{Name: NetdevDeviceName(l.Name), Kind: KindNetdev, Netdev: fill(l)})
	}
	return out, nil
}

// watchLinks calls trigger on the netlink link events of the host network
// namespace that may change the inventory, until ctx ends (linkEvents).
func watchLinks(ctx context.Context, trigger func(), known func(name string) bool) error {
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{
		ErrorCallback: func(err error) {
			// Closing the subscription when ctx ends fails its last read.
			if ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "Link event subscription")
			}
		},
	})
	if err != nil {
		return fmt.Errorf("subscribe to link events: %w", err)
	}
	go func() {
		defer close(done)
		logger := klog.FromContext(ctx)
		events := linkEvents{seen: map[int]linkFacts{}}
		for {
			select {
			case <-ctx.Done():
				return
			case u, ok := <-updates:
				if !ok {
					return
				}
				if events.matter(u, known) {
					logger.V(5).Info("Link event reruns discovery", "link", linkName(u), "deleted", u.Header.Type == unix.RTM_DELLINK)
					trigger()
				}
			}
		}
	}()
	return nil
}

// linkEvents tells the link events that may change the inventory from
// those that cannot. Every pod's start and stop brings a dozen events to
// the host's namespace (its interface's host end, made with its peer in
// the pod and joined to a bridge, the bridge's own), and on a busy node
// discovery would rerun all the time for them. An event matters when:
//   - its link is published (known names it): all of them, as before;
//   - it is not a bridge's news of its port (AF_BRIDGE: the port's STP
//     state, which discovery does not read; the port's own event, of the
//     usual family, comes too);
//   - its link is not a pod's interface (podInterface), nor a veth whose
//     peer is not there yet (its first event, when the peer is made in
//     another namespace; a pair made here has its other end's event next);
//   - and its link is new, or something discovery reads of it changed
//     (linkFacts): not a bridge's feature change at each port joining it.
//
// The deletion of a link not published never matters: it was not in the
// inventory. What no link event tells (an unpublished link's ethtool or XDP
// features changed) the next rerun or the resync finds.
type linkEvents struct {
	// seen is what the events said last of each unpublished link that
	// mattered.
	seen map[int]linkFacts
}

// linkFacts is what discovery reads of a link and its events carry.
type linkFacts struct {
	name, mac, alias, kind string
	mtu, parent, master    int
	flags                  uint32
	operState              netlink.LinkOperState
}

func (e *linkEvents) matter(u netlink.LinkUpdate, known func(name string) bool) bool {
	a := u.Attrs()
	if a == nil {
		return true
	}
	if known(a.Name) {
		// Its facts are not kept: should it stop being published, its
		// next event counts as a new link's.
		if u.Header.Type == unix.RTM_DELLINK && u.Family != unix.AF_BRIDGE {
			delete(e.seen, a.Index)
		}
		return true
	}
	if u.Family == unix.AF_BRIDGE {
		return false
	}
	if u.Header.Type == unix.RTM_DELLINK {
		delete(e.seen, a.Index)
		return false
	}
	if podInterface(u.Link) || unbornVeth(u.Link) {
		return false
	}
	facts := factsOf(u.Link)
	if last, ok := e.seen[a.Index]; ok && last == facts {
		return false
	}
	e.seen[a.Index] = facts
	return true
}

func linkName(u netlink.LinkUpdate) string {
	if a := u.Attrs(); a != nil {
		return a.Name
	}
	return ""
}

func factsOf(l netlink.Link) linkFacts {
	a := l.Attrs()
	return linkFacts{
		name: a.Name, mac: a.HardwareAddr.String(), alias: a.Alias, kind: l.Type(),
		mtu: a.MTU, parent: a.ParentIndex, master: a.MasterIndex, flags: a.RawFlags, operState: a.OperState,
	}
}

// unbornVeth says whether the link is a veth whose peer does not exist yet
// (IFLA_LINK 0): the end the kernel registers first, as the host's end of a
// pod's interface made in the pod with its peer here.
func unbornVeth(l netlink.Link) bool {
	_, veth := l.(*netlink.Veth)
	return veth && l.Attrs().ParentIndex == 0 && l.Attrs().NetNsID < 0
}

// podInterface says whether the link is the host's end of a veth whose
// other end is in another network namespace: a pod's interface, as a CNI
// plugin makes one for every pod. Such links come and go with every pod
// of the node; discovery does not rerun for them unless one is published.
func podInterface(l netlink.Link) bool {
	_, veth := l.(*netlink.Veth)
	return veth && l.Attrs().NetNsID >= 0
}
