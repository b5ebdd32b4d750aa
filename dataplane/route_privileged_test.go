//go:build privileged

package dataplane

import (
	"fmt"
	"net"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// TestSetDefaultRoute: a pod whose default routes go out of eth0 (both
// families) gets its IPv4 default route through the gateway on net1; the
// IPv6 one, with no gateway asked for, stays on eth0. Done again, it
// changes nothing.
func TestSetDefaultRoute(t *testing.T) {
	requireRoot(t)
	podNS := newNetNS(t)
	eth0, _ := newVeth(t)
	net1, _ := newVeth(t)
	ns, pod, err := podHandle(podNS)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { pod.Close(); _ = ns.Close() }()
	links := map[string]netlink.Link{}
	for name, addrs := range map[string][]string{eth0: {"10.244.0.5/24", "fd00:244::5/64"}, net1: {"10.96.0.5/24"}} {
		links[name] = moveIntoPod(t, ns, pod, name, 0, addrs...)
	}
	for _, gw := range []string{"10.244.0.1", "fd00:244::1"} {
		if err := pod.RouteAdd(&netlink.Route{LinkIndex: links[eth0].Attrs().Index, Gw: net.ParseIP(gw)}); err != nil {
			t.Fatalf("default route via %s: %v", gw, err)
		}
	}
	defaults := func(family int) []netlink.Route {
		t.Helper()
		routes, err := pod.RouteList(nil, family)
		if err != nil {
			t.Fatal(err)
		}
		var out []netlink.Route
		for _, r := range routes {
			if isDefault(r) {
				out = append(out, r)
			}
		}
		return out
	}
	for range 2 {
		if err := SetDefaultRoute(podNS, net1, []net.IP{net.ParseIP("10.96.0.1")}); err != nil {
			t.Fatal(err)
		}
		v4 := defaults(netlink.FAMILY_V4)
		if len(v4) != 1 || v4[0].LinkIndex != links[net1].Attrs().Index || !v4[0].Gw.Equal(net.ParseIP("10.96.0.1")) {
			t.Errorf("IPv4 default routes %v: want one, via 10.96.0.1 on %s", v4, net1)
		}
		v6 := defaults(netlink.FAMILY_V6)
		if len(v6) != 1 || v6[0].LinkIndex != links[eth0].Attrs().Index {
			t.Errorf("IPv6 default routes %v: want eth0's, untouched", v6)
		}
	}
	if err := SetDefaultRoute(podNS, "nosuch0", []net.IP{net.ParseIP("10.96.0.1")}); err == nil {
		t.Error("a default route on an interface the pod lacks was accepted")
	}
}

// InspectPodLink reads a pod's interface as the node sees it: its MAC,
// MTU and global addresses (not its link-local one).
func TestInspectPodLink(t *testing.T) {
	requireRoot(t)
	podNS := newNetNS(t)
	eth0, _ := newVeth(t)
	ns, pod, err := podHandle(podNS)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { pod.Close(); _ = ns.Close() }()
	l := moveIntoPod(t, ns, pod, eth0, 1450, "10.244.0.5/24", "fd00:244::5/64")
	got, err := InspectPodLink(podNS, eth0)
	if err != nil {
		t.Fatal(err)
	}
	if got.MAC != l.Attrs().HardwareAddr.String() || got.MTU != 1450 || fmt.Sprint(got.Addresses) != "[10.244.0.5 fd00:244::5]" {
		t.Errorf("InspectPodLink = %+v", got)
	}
	if _, err := InspectPodLink(podNS, "nosuch0"); err == nil {
		t.Error("InspectPodLink of a missing interface succeeded")
	}
}

// moveIntoPod moves the host's link name into the pod's namespace (ns, its
// handle pod), with the MTU (0: as it is) and addresses, and up.
func moveIntoPod(t *testing.T, ns netns.NsHandle, pod *netlink.Handle, name string, mtu int, addrs ...string) netlink.Link {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetNsFd(l, int(ns)); err != nil {
		t.Fatal(err)
	}
	if l, err = pod.LinkByName(name); err != nil {
		t.Fatal(err)
	}
	if mtu != 0 {
		if err := pod.LinkSetMTU(l, mtu); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range addrs {
		addr, _ := netlink.ParseAddr(a)
		addr.Flags = 0x80 // IFA_F_NODAD: usable at once
		if err := pod.AddrAdd(l, addr); err != nil {
			t.Fatal(err)
		}
	}
	if err := pod.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	return l
}
