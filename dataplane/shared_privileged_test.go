//go:build privileged

package dataplane

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/test/netnstest"
)

// sharedPrefix starts the names of the links and namespaces of the shared
// tests.
const sharedPrefix = "fpsh"

func newSharedNetNS(t *testing.T) string {
	t.Helper()
	return netnstest.New(t, fmt.Sprintf("%s-%d-%d", sharedPrefix, os.Getpid(), seq.Add(1)))
}

// newParent makes an up veth standing in for a shared NIC (its peer up
// too, so that it has a carrier).
func newParent(t *testing.T) netlink.Link {
	t.Helper()
	// Unique on the machine: another run of these tests may be going on.
	id := fmt.Sprintf("%s%d-%d", sharedPrefix, os.Getpid()%100000, seq.Add(1))
	name, peer := id+"a", id+"b"
	l := netnstest.Veth(t, name, peer)
	for _, n := range []string{name, peer} {
		p, err := netlink.LinkByName(n)
		if err == nil {
			err = netlink.LinkSetUp(p)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	l, err := netlink.LinkByName(l.Attrs().Name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// parentState is what a sub-interface must not change on its parent.
type parentState struct {
	Name, MAC, Alias string
	MTU, Index       int
	Flags            net.Flags
	Addrs            []string
	Namespace        bool // still in the host
}

func stateOf(t *testing.T, name string) parentState {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		return parentState{Name: name}
	}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	var as []string
	for _, a := range addrs {
		as = append(as, a.IPNet.String())
	}
	slices.Sort(as)
	return parentState{Name: name, MAC: l.Attrs().HardwareAddr.String(), Alias: l.Attrs().Alias, MTU: l.Attrs().MTU, Index: l.Attrs().Index,
		Flags: l.Attrs().Flags & net.FlagUp, Addrs: as, Namespace: true}
}

func subInterface(parent string, kind, mode string, addr string) SubInterface {
	return SubInterface{Parent: parent, Kind: kind, Mode: mode, Name: "net1", Alias: "fastpath-test/" + addr,
		Addresses: []string{addr}, Routes: []Route{{Destination: "10.78.0.0/16", Gateway: "10.77.0.1"}}}
}

// Two pods share one parent in macvlan bridge mode: each gets its own
// interface, made in its namespace, with address, route and up; they
// reach each other through the parent; the parent is the same after; a
// retry completes, and detach deletes the interfaces (twice is harmless).
func TestAttachSharedMacvlanBridge(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	a := newAttacher(t)
	parent := newParent(t)
	before := stateOf(t, parent.Attrs().Name)
	podA, podB := newSharedNetNS(t), newSharedNetNS(t)
	sa := subInterface(parent.Attrs().Name, KindMacvlan, "bridge", "10.77.0.2/24")
	sa.MAC, sa.MTU = "02:00:00:77:00:02", 1400
	sb := subInterface(parent.Attrs().Name, KindMacvlan, "bridge", "10.77.0.3/24")
	resA, err := a.AttachShared(ctx, podA, sa)
	if err != nil {
		t.Fatal(err)
	}
	if resA.MAC != sa.MAC || resA.MTU != 1400 || resA.Name != "net1" {
		t.Errorf("attached = %+v", resA)
	}
	if _, err := a.AttachShared(ctx, podB, sb); err != nil {
		t.Fatal(err)
	}
	// A retried hook finds the interface and completes it.
	if _, err := a.AttachShared(ctx, podA, sa); err != nil {
		t.Fatalf("retry: %v", err)
	}
	for _, c := range []struct {
		pod string
		s   SubInterface
	}{{podA, sa}, {podB, sb}} {
		l, h := podLink(t, c.pod, "net1")
		if l == nil {
			t.Fatalf("no net1 in %s", c.pod)
		}
		mv, ok := l.(*netlink.Macvlan)
		if !ok || mv.Mode != netlink.MACVLAN_MODE_BRIDGE || l.Attrs().Alias != c.s.Alias || l.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("net1 in %s = %T %+v", c.pod, l, l.Attrs())
		}
		addrs, _ := h.AddrList(l, netlink.FAMILY_V4)
		if len(addrs) != 1 || addrs[0].IPNet.String() != c.s.Addresses[0] {
			t.Errorf("addresses in %s = %v", c.pod, addrs)
		}
		routes, _ := h.RouteList(l, netlink.FAMILY_V4)
		if !slices.ContainsFunc(routes, func(r netlink.Route) bool { return r.Dst != nil && r.Dst.String() == "10.78.0.0/16" }) {
			t.Errorf("routes in %s = %v", c.pod, routes)
		}
	}
	if out, err := exec.Command("ip", "netns", "exec", filepath.Base(podA), "ping", "-c", "1", "-W", "2", "10.77.0.3").CombinedOutput(); err != nil {
		t.Errorf("pod A cannot reach pod B through the parent: %v\n%s", err, out)
	}
	if after := stateOf(t, parent.Attrs().Name); !equalState(before, after) {
		t.Errorf("parent changed: %+v, was %+v", after, before)
	}
	for _, c := range []struct {
		pod string
		s   SubInterface
	}{{podA, sa}, {podB, sb}} {
		for range 2 {
			if err := a.DetachShared(ctx, c.pod, c.s); err != nil {
				t.Fatal(err)
			}
		}
		if l, _ := podLink(t, c.pod, "net1"); l != nil {
			t.Errorf("net1 still in %s", c.pod)
		}
	}
	if after := stateOf(t, parent.Attrs().Name); !equalState(before, after) {
		t.Errorf("parent changed: %+v, was %+v", after, before)
	}
}

func equalState(a, b parentState) bool {
	return a.Name == b.Name && a.MAC == b.MAC && a.Alias == b.Alias && a.MTU == b.MTU && a.Index == b.Index && a.Flags == b.Flags &&
		slices.Equal(a.Addrs, b.Addrs) && a.Namespace == b.Namespace
}

// Every macvlan mode is made as asked. (This kernel has neither vlan nor
// ipvlan: TestSRIOVShared makes them in the VM.)
func TestAttachSharedKinds(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	a := newAttacher(t)
	parent := newParent(t)
	for _, mode := range []string{"private", "vepa", "passthru"} {
		t.Run("macvlan "+mode, func(t *testing.T) {
			pod := newSharedNetNS(t)
			s := subInterface(parent.Attrs().Name, KindMacvlan, mode, "10.77.0.9/24")
			if _, err := a.AttachShared(ctx, pod, s); err != nil {
				t.Fatal(err)
			}
			l, _ := podLink(t, pod, "net1")
			want := map[string]netlink.MacvlanMode{"private": netlink.MACVLAN_MODE_PRIVATE, "vepa": netlink.MACVLAN_MODE_VEPA, "passthru": netlink.MACVLAN_MODE_PASSTHRU}[mode]
			if mv, ok := l.(*netlink.Macvlan); !ok || mv.Mode != want {
				t.Errorf("net1 = %T %+v", l, l)
			}
			if err := a.DetachShared(ctx, pod, s); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A failure part-way (a route the kernel refuses) leaves nothing in the
// pod; a name taken by another interface is refused and that interface
// left alone; a parent that is gone is ErrDeviceGone; a pod whose
// namespace is gone has nothing to delete.
func TestAttachSharedFailures(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	a := newAttacher(t)
	parent := newParent(t)
	before := stateOf(t, parent.Attrs().Name)

	pod := newSharedNetNS(t)
	s := subInterface(parent.Attrs().Name, KindMacvlan, "bridge", "10.77.0.2/24")
	s.Routes = []Route{{Destination: "10.78.0.0/16", Gateway: "10.99.0.1"}} // not on the link
	if _, err := a.AttachShared(ctx, pod, s); err == nil {
		t.Fatal("a route through an unreachable gateway was accepted")
	}
	if l, _ := podLink(t, pod, "net1"); l != nil {
		t.Errorf("a failed attach left %s in the pod", l.Attrs().Name)
	}

	s = subInterface(parent.Attrs().Name, KindMacvlan, "bridge", "10.77.0.2/24")
	netnstest.Do(t, pod, func() {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "net1"}, PeerName: "fpshpeer"}); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := a.AttachShared(ctx, pod, s); err == nil {
		t.Error("a pod's own net1 was taken for the sub-interface")
	}
	if err := a.DetachShared(ctx, pod, s); err == nil {
		t.Error("detach of a pod's own net1 did not refuse")
	}
	if l, _ := podLink(t, pod, "net1"); l == nil || l.Type() != "veth" {
		t.Errorf("the pod's own net1 was changed: %v", l)
	}

	gone := s
	gone.Parent = "fpshnone"
	if _, err := a.AttachShared(ctx, newSharedNetNS(t), gone); !errors.Is(err, ErrDeviceGone) {
		t.Errorf("attach on a missing parent = %v, want ErrDeviceGone", err)
	}

	pod2 := newSharedNetNS(t)
	if _, err := a.AttachShared(ctx, pod2, s); err != nil {
		t.Fatal(err)
	}
	if err := netns.DeleteNamed(filepath.Base(pod2)); err != nil {
		t.Fatal(err)
	}
	if err := a.DetachShared(ctx, pod2, s); err != nil {
		t.Errorf("detach from a deleted namespace: %v", err)
	}
	if after := stateOf(t, parent.Attrs().Name); !equalState(before, after) {
		t.Errorf("parent changed: %+v, was %+v", after, before)
	}
}

// A sub-interface with a bandwidth share transmits at that rate, measured
// by a bounded TCP transfer between two pods on one parent; the other
// direction, without a limit, is much faster.
func TestAttachSharedBandwidth(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	a := newAttacher(t)
	parent := newParent(t)
	podA, podB := newSharedNetNS(t), newSharedNetNS(t)
	const limit = 40_000_000 // bit/s
	sa := subInterface(parent.Attrs().Name, KindMacvlan, "bridge", "10.77.0.2/24")
	sa.MaxTxRate = limit
	sb := subInterface(parent.Attrs().Name, KindMacvlan, "bridge", "10.77.0.3/24")
	for _, p := range []struct {
		ns string
		s  SubInterface
	}{{podA, sa}, {podB, sb}} {
		if _, err := a.AttachShared(ctx, p.ns, p.s); err != nil {
			t.Fatal(err)
		}
	}
	_, h := podLink(t, podA, "net1")
	l, _ := h.LinkByName("net1")
	qs, err := h.QdiscList(l)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(qs, func(q netlink.Qdisc) bool { tbf, ok := q.(*netlink.Tbf); return ok && tbf.Rate == limit/8 }) {
		t.Errorf("pod A's net1 has no token bucket at %d bytes/s: %v", limit/8, qs)
	}
	const size = 2 << 20
	rate := func(from, to, addr string) float64 {
		t.Helper()
		var ln net.Listener
		netnstest.Do(t, to, func() {
			var err error
			if ln, err = net.Listen("tcp", addr+":0"); err != nil {
				t.Fatal(err)
			}
		})
		defer ln.Close()
		done := make(chan error, 1)
		var got int64
		var start, end time.Time
		go func() {
			c, err := ln.Accept()
			if err != nil {
				done <- err
				return
			}
			defer func() { _ = c.Close() }()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if got == 0 && n > 0 {
					start = time.Now()
				}
				got += int64(n)
				if err != nil {
					end = time.Now()
					done <- nil
					return
				}
			}
		}()
		var c net.Conn
		netnstest.Do(t, from, func() {
			var err error
			if c, err = net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second); err != nil {
				t.Fatal(err)
			}
		})
		if _, err := c.Write(make([]byte, size)); err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the transfer did not end in 30 s")
		}
		if got != size {
			t.Fatalf("received %d bytes, sent %d", got, size)
		}
		return float64(got*8) / end.Sub(start).Seconds()
	}
	limited := rate(podA, podB, "10.77.0.3")
	free := rate(podB, podA, "10.77.0.2")
	t.Logf("pod A (limited to %d bit/s) sent at %.0f bit/s; pod B (no limit) at %.0f bit/s", limit, limited, free)
	if limited > 1.25*limit || limited < 0.5*limit {
		t.Errorf("pod A sent at %.0f bit/s, limited to %d", limited, limit)
	}
	if free < 3*limit {
		t.Errorf("pod B, without a limit, sent at only %.0f bit/s", free)
	}
}
