package devices

import (
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// TestParseLink reads a link's message as the kernel sends it: the
// attributes discovery needs among others, a name whose length needs
// padding, the kind inside IFLA_LINKINFO (with the nested flag some
// senders set), and refuses an attribute longer than the message.
func TestParseLink(t *testing.T) {
	msg := func(attrs ...*nl.RtAttr) []byte {
		info := nl.NewIfInfomsg(unix.AF_UNSPEC)
		info.Index, info.Flags = 7, unix.IFF_UP
		b := info.Serialize()
		for _, a := range attrs {
			b = append(b, a.Serialize()...)
		}
		return b
	}
	linkinfo := nl.NewRtAttr(unix.IFLA_LINKINFO|unix.NLA_F_NESTED, nil)
	linkinfo.AddRtAttr(unix.IFLA_INFO_KIND, []byte("veth\x00"))
	m := msg(
		nl.NewRtAttr(unix.IFLA_IFNAME, []byte("fpv-odd\x00")),
		nl.NewRtAttr(unix.IFLA_STATS64, make([]byte, 200)),
		nl.NewRtAttr(unix.IFLA_MTU, nl.Uint32Attr(9000)),
		nl.NewRtAttr(unix.IFLA_ADDRESS, []byte{2, 0, 0, 0, 0, 1}),
		nl.NewRtAttr(unix.IFLA_OPERSTATE, []byte{6}),
		nl.NewRtAttr(unix.IFLA_MASTER, nl.Uint32Attr(3)),
		nl.NewRtAttr(unix.IFLA_LINK, nl.Uint32Attr(12)),
		nl.NewRtAttr(unix.IFLA_IFALIAS, []byte("a pod's\x00")),
		linkinfo,
	)
	l, err := parseLink(m)
	if err != nil {
		t.Fatal(err)
	}
	want := link{Index: 7, Name: "fpv-odd", MTU: 9000, MAC: "02:00:00:00:00:01", OperState: "up", MasterIndex: 3, ParentIndex: 12, Alias: "a pod's", Kind: "veth"}
	if l != want {
		t.Errorf("parsed %+v, want %+v", l, want)
	}

	cut := m[:len(m)-4]
	if _, err := parseLink(cut); err == nil || !strings.Contains(err.Error(), "attribute of length") {
		t.Errorf("a message cut inside its last attribute: %v, want an error", err)
	}
	if _, err := parseLink(m[:8]); err == nil {
		t.Error("a short message: no error")
	}
}

// TestPodInterface: only a veth whose other end is in another network
// namespace is a pod's interface.
func TestPodInterface(t *testing.T) {
	attrs := func(nsid int) netlink.LinkAttrs {
		a := netlink.NewLinkAttrs()
		a.Name, a.NetNsID = "x", nsid
		return a
	}
	for _, tc := range []struct {
		name string
		link netlink.Link
		want bool
	}{
		{"veth, the other end in a pod", &netlink.Veth{LinkAttrs: attrs(3)}, true},
		{"veth, the other end in the namespace 0", &netlink.Veth{LinkAttrs: attrs(0)}, true},
		{"veth pair in the host", &netlink.Veth{LinkAttrs: attrs(-1)}, false},
		{"macvlan of a parent elsewhere", &netlink.Macvlan{LinkAttrs: attrs(3)}, false},
		{"a NIC", &netlink.Device{LinkAttrs: attrs(-1)}, false},
	} {
		if got := podInterface(tc.link); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
