package devices

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
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
// given indexes support. It returns nil, without error, where the kernel has
// no netdev family (before 6.3): the features are then unknown, not guessed.
// One request per interface: this kernel's dump of the family stops after
// the first device.
func (host) xdpFeatures(indexes []int) (map[int]uint64, error) {
	family, err := netlink.GenlFamilyGet(netdevFamily)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		return nil, fmt.Errorf("find the %s generic netlink family: %w", netdevFamily, err)
	}
	out := make(map[int]uint64, len(indexes))
	for _, index := range indexes {
		req := nl.NewNetlinkRequest(int(family.ID), 0)
		req.AddData(genlHeader{cmd: netdevCmdDevGet, version: 1})
		req.AddData(nl.NewRtAttr(netdevAttrDevIfindex, nl.Uint32Attr(uint32(index))))
		msgs, err := req.Execute(unix.NETLINK_GENERIC, 0)
		if errors.Is(err, unix.ENODEV) {
			continue // gone since the link dump
		}
		if err != nil {
			return nil, fmt.Errorf("XDP features of link %d: %w", index, err)
		}
		for _, m := range msgs {
			if f, ok := parseXDPFeatures(m); ok {
				out[index] = f
			}
		}
	}
	return out, nil
}

func parseXDPFeatures(m []byte) (uint64, bool) {
	if len(m) < genlHeaderLen {
		return 0, false
	}
	attrs, err := nl.ParseRouteAttr(m[genlHeaderLen:])
	if err != nil {
		return 0, false
	}
	for _, a := range attrs {
		if a.Attr.Type == netdevAttrXDPFeatures && len(a.Value) >= 8 {
			return nl.NativeEndian().Uint64(a.Value), true
		}
	}
	return 0, false
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
