package devices

import (
	"net"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// TestLinkEventsMatter replays the host's link events of a pod's start as
// a CNI bridge plugin makes its interface, and of links discovery may
// publish, and checks which rerun discovery.
func TestLinkEventsMatter(t *testing.T) {
	published := map[string]bool{"vf0": true}
	known := func(name string) bool { return published[name] }
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	attrs := func(index int, name string, change func(*netlink.LinkAttrs)) netlink.LinkAttrs {
		a := netlink.NewLinkAttrs()
		a.Index, a.Name, a.MTU, a.HardwareAddr, a.OperState = index, name, 1500, mac, netlink.OperDown
		if change != nil {
			change(&a)
		}
		return a
	}
	event := func(typ uint16, family uint8, l netlink.Link) netlink.LinkUpdate {
		return netlink.LinkUpdate{IfInfomsg: nl.IfInfomsg{IfInfomsg: unix.IfInfomsg{Family: family}}, Header: unix.NlMsghdr{Type: typ}, Link: l}
	}
	newLink := func(l netlink.Link) netlink.LinkUpdate { return event(unix.RTM_NEWLINK, unix.AF_UNSPEC, l) }
	bridge := func(change func(*netlink.LinkAttrs)) netlink.Link {
		return &netlink.Bridge{LinkAttrs: attrs(10, "cni0", change)}
	}
	hostEnd := func(change func(*netlink.LinkAttrs)) netlink.Link {
		return &netlink.Veth{LinkAttrs: attrs(20, "veth1234", change)}
	}
	inPod := func(a *netlink.LinkAttrs) { a.ParentIndex, a.NetNsID = 2, 0 }
	steps := []struct {
		what  string
		event netlink.LinkUpdate
		want  bool
	}{
		{"the bridge, first seen", newLink(bridge(nil)), true},
		{"the bridge again, unchanged", newLink(bridge(nil)), false},
		{"a pod's host end, its peer not made yet", newLink(hostEnd(nil)), false},
		{"the host end, its peer in the pod", newLink(hostEnd(inPod)), false},
		{"the host end joined to the bridge", newLink(hostEnd(func(a *netlink.LinkAttrs) { inPod(a); a.MasterIndex = 10 })), false},
		{"the bridge's news of its port", event(unix.RTM_NEWLINK, unix.AF_BRIDGE, &netlink.Device{LinkAttrs: attrs(20, "veth1234", func(a *netlink.LinkAttrs) { a.MasterIndex = 10 })}), false},
		{"the bridge's feature change", newLink(bridge(nil)), false},
		{"the bridge's carrier", newLink(bridge(func(a *netlink.LinkAttrs) { a.OperState = netlink.OperUp })), true},
		{"the host end gone", event(unix.RTM_DELLINK, unix.AF_UNSPEC, hostEnd(inPod)), false},
		{"a published VF, first seen", newLink(&netlink.Device{LinkAttrs: attrs(30, "vf0", nil)}), true},
		{"the published VF, unchanged", newLink(&netlink.Device{LinkAttrs: attrs(30, "vf0", nil)}), true},
		{"the bridge's news of the published VF", event(unix.RTM_NEWLINK, unix.AF_BRIDGE, &netlink.Device{LinkAttrs: attrs(30, "vf0", nil)}), true},
		{"the published VF gone into a pod", event(unix.RTM_DELLINK, unix.AF_UNSPEC, &netlink.Device{LinkAttrs: attrs(30, "vf0", nil)}), true},
		{"a veth pair made here: the end registered first", newLink(&netlink.Veth{LinkAttrs: attrs(40, "va", nil)}), false},
		{"the other end, its peer here", newLink(&netlink.Veth{LinkAttrs: attrs(41, "vb", func(a *netlink.LinkAttrs) { a.ParentIndex = 40 })}), true},
		{"the first end, its peer here now", newLink(&netlink.Veth{LinkAttrs: attrs(40, "va", func(a *netlink.LinkAttrs) { a.ParentIndex = 41 })}), true},
		{"the first end's new MTU", newLink(&netlink.Veth{LinkAttrs: attrs(40, "va", func(a *netlink.LinkAttrs) { a.ParentIndex, a.MTU = 41, 9000 })}), true},
		{"the first end renamed", newLink(&netlink.Veth{LinkAttrs: attrs(40, "vc", func(a *netlink.LinkAttrs) { a.ParentIndex, a.MTU = 41, 9000 })}), true},
		{"an unpublished link gone", event(unix.RTM_DELLINK, unix.AF_UNSPEC, &netlink.Veth{LinkAttrs: attrs(40, "vc", nil)}), false},
		{"a link of that index again, as it was", newLink(&netlink.Veth{LinkAttrs: attrs(40, "vc", func(a *netlink.LinkAttrs) { a.ParentIndex, a.MTU = 41, 9000 })}), true},
	}
	e := linkEvents{seen: map[int]linkFacts{}}
	for _, s := range steps {
		if got := e.matter(s.event, known); got != s.want {
			t.Errorf("%s: matters %v, want %v", s.what, got, s.want)
		}
	}
	if _, ok := e.seen[20]; ok {
		t.Errorf("a pod's interface is remembered: %v", e.seen)
	}
	if _, ok := e.seen[30]; ok {
		t.Errorf("a link gone is remembered: %v", e.seen)
	}
}
