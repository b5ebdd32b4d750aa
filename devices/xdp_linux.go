package devices

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The kernel's netdev generic-netlink family (include/uapi/linux/netdev.h).
const (
	netdevFamily          = "netdev"
	netdevCmdDevGet       = 1
	netdevAttrDevIfindex  = 1
	netdevAttrXDPFeatures = 3

	xdpActBasic       = 1 << 0
	xdpActRedirect    = 1 << 1
	xdpActXSKZeroCopy = 1 << 3
)

// xdpFeatures asks the kernel which XDP features the interfaces with the
// given indexes support, in one dump of the netdev family's devices. It
// returns nil, without error, where the kernel has no netdev family
// (before 6.3): the features are then unknown, not guessed. An interface
// the dump does not list (gone since the link dump) is left out.
func (host) xdpFeatures(indexes []int) (map[int]uint64, error) {
	family, err := netdevFamilyID()
	if err != nil || family == 0 {
		return nil, err
	}
	all, err := dumpXDPFeatures(family)
	if err != nil {
		return nil, err
	}
	out := make(map[int]uint64, len(indexes))
	for _, index := range indexes {
		if f, ok := all[index]; ok {
			out[index] = f
		}
	}
	return out, nil
}

// netdevFamilyKnown caches the netdev family's ID once found (0 before; a
// generic netlink family's ID is never 0): the family is built in, and its
// ID does not change while the kernel runs.
var netdevFamilyKnown atomic.Uint32

// netdevFamilyID is the netdev family's ID, 0 where the kernel has none.
func netdevFamilyID() (uint16, error) {
	if id := netdevFamilyKnown.Load(); id != 0 {
		return uint16(id), nil
	}
	family, err := netlink.GenlFamilyGet(netdevFamily)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return 0, nil
		}
		return 0, fmt.Errorf("find the %s generic netlink family: %w", netdevFamily, err)
	}
	netdevFamilyKnown.Store(uint32(family.ID))
	return family.ID, nil
}

// dumpXDPFeatures dumps the XDP features of every interface of the
// network namespace, by index. The kernel's dump of the family does not
// mark its messages multipart (NLM_F_MULTI), so the netlink library's
// Execute stops after the first: the dump is read here up to its
// NLMSG_DONE.
func dumpXDPFeatures(family uint16) (map[int]uint64, error) {
	s, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_GENERIC)
	if err != nil {
		return nil, fmt.Errorf("open a generic netlink socket: %w", err)
	}
	defer s.Close()
	if err := s.SetReceiveTimeout(&unix.Timeval{Sec: 5}); err != nil {
		return nil, fmt.Errorf("dump XDP features: %w", err)
	}
	req := nl.NewNetlinkRequest(int(family), unix.NLM_F_DUMP)
	req.AddData(genlHeader{cmd: netdevCmdDevGet, version: 1})
	if err := s.Send(req); err != nil {
		return nil, fmt.Errorf("dump XDP features: %w", err)
	}
	pid, err := s.GetPid()
	if err != nil {
		return nil, fmt.Errorf("dump XDP features: %w", err)
	}
	out := map[int]uint64{}
	for {
		msgs, _, err := s.Receive()
		if err != nil {
			return nil, fmt.Errorf("dump XDP features: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != req.Seq || m.Header.Pid != pid {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if errno := int32(nl.NativeEndian().Uint32(m.Data[:4])); errno != 0 {
						return nil, fmt.Errorf("dump XDP features: %w", unix.Errno(-errno))
					}
				}
				return out, nil
			}
			if index, f, ok := parseXDPFeatures(m.Data); ok {
				out[index] = f
			}
		}
	}
}

// parseXDPFeatures reads a netdev device message: the interface's index
// and its XDP features.
func parseXDPFeatures(m []byte) (index int, features uint64, ok bool) {
	if len(m) < genlHeaderLen {
		return 0, 0, false
	}
	attrs, err := nl.ParseRouteAttr(m[genlHeaderLen:])
	if err != nil {
		return 0, 0, false
	}
	var haveIndex, haveFeatures bool
	for _, a := range attrs {
		switch {
		case a.Attr.Type == netdevAttrDevIfindex && len(a.Value) >= 4:
			index, haveIndex = int(nl.NativeEndian().Uint32(a.Value)), true
		case a.Attr.Type == netdevAttrXDPFeatures && len(a.Value) >= 8:
			features, haveFeatures = nl.NativeEndian().Uint64(a.Value), true
		}
	}
	return index, features, haveIndex && haveFeatures
}

// genlHeader is struct genlmsghdr: command, version and two reserved bytes
// the kernel insists are zero (nl.Genlmsg serializes only the first two).
type genlHeader struct{ cmd, version uint8 }

const genlHeaderLen = 4

func (h genlHeader) Len() int          { return genlHeaderLen }
func (h genlHeader) Serialize() []byte { return []byte{h.cmd, h.version, 0, 0} }

// xdpFromFeatures turns the kernel's feature bits into the device model:
// AF_XDP needs basic XDP and redirect.
func xdpFromFeatures(features uint64) XDP {
	return XDP{
		Supported: new(features&xdpActBasic != 0 && features&xdpActRedirect != 0),
		ZeroCopy:  new(features&xdpActXSKZeroCopy != 0),
	}
}
