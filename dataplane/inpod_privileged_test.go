//go:build privileged

package dataplane

import (
	"testing"

	"github.com/vishvananda/netlink"
	"k8s.io/klog/v2/ktesting"
)

// TestInPod: an interface moved into the pod counts as attached only with
// everything Attach gives it after the move. An Attach cut short (a crash
// after the move, after the addresses) leaves it there without some of
// it: InPod says no, and Attach again completes it.
func TestInPod(t *testing.T) {
	requireRoot(t)
	_, ctx := ktesting.NewTestContext(t)
	podNS := newNetNS(t)
	_, host := newVeth(t)
	a := newAttacher(t)
	nd := testNetdev(host)
	inPod := func(want bool, when string) {
		t.Helper()
		got, err := a.InPod(podNS, nd)
		if err != nil || got != want {
			t.Errorf("%s: InPod = %v (%v), want %v", when, got, err, want)
		}
	}
	inPod(false, "before the attach")
	if _, err := a.Attach(ctx, podNS, nd); err != nil {
		t.Fatal(err)
	}
	inPod(true, "attached")

	cuts := []struct {
		name string
		cut  func(h *netlink.Handle, l netlink.Link) error
	}{
		{"moved, not up", func(h *netlink.Handle, l netlink.Link) error { return h.LinkSetDown(l) }},
		{"an address missing", func(h *netlink.Handle, l netlink.Link) error {
			addr, err := netlink.ParseAddr(nd.Addresses[1])
			if err != nil {
				return err
			}
			return h.AddrDel(l, addr)
		}},
		{"a route missing", func(h *netlink.Handle, l netlink.Link) error {
			r, err := podRoute(l.Attrs().Index, nd.Routes[0])
			if err != nil {
				return err
			}
			return h.RouteDel(r)
		}},
	}
	for _, c := range cuts {
		l, h := podLink(t, podNS, nd.Name)
		if l == nil {
			t.Fatalf("%s: no %s in the pod", c.name, nd.Name)
		}
		if err := c.cut(h, l); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		inPod(false, c.name)
		if _, err := a.Attach(ctx, podNS, nd); err != nil {
			t.Fatalf("%s: attach again: %v", c.name, err)
		}
		inPod(true, c.name+", attached again")
	}
	if err := a.Detach(ctx, podNS, nd); err != nil {
		t.Fatal(err)
	}
	inPod(false, "detached")
	assertRestored(t, nd, podNS)
}
