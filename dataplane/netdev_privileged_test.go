//go:build privileged

package dataplane

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/test/netnstest"
)

// testPrefix starts the names of the links and namespaces these tests make.
const testPrefix = "fpa"

var seq atomic.Int32

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("privileged test: run as root (make privileged)")
	}
}

// newNetNS creates a named network namespace standing in for a pod's.
func newNetNS(t *testing.T) string {
	t.Helper()
	return netnstest.New(t, fmt.Sprintf("%s-%d-%d", testPrefix, os.Getpid(), seq.Add(1)))
}

// newVeth creates a veth pair in the host namespace and returns the name of
// the end standing in for a VF netdev.
func newVeth(t *testing.T) (string, netlink.Link) {
	t.Helper()
	n := seq.Add(1)
	// Unique on the machine: another run of these tests may be going on.
	name := fmt.Sprintf("%s%d-%da", testPrefix, os.Getpid()%100000, n)
	return name, netnstest.Veth(t, name, strings.TrimSuffix(name, "a")+"b")
}

func podLink(t *testing.T, path, name string) (netlink.Link, *netlink.Handle) {
	t.Helper()
	ns, h, err := podHandle(path)
	if err != nil {
		t.Fatal(err)
	}
	ns.Close()
	t.Cleanup(h.Close)
	l, err := h.LinkByName(name)
	if err != nil {
		return nil, h
	}
	return l, h
}

func testNetdev(host netlink.Link) Netdev {
	return Netdev{
		HostName: host.Attrs().Name, HostMTU: host.Attrs().MTU, HostMAC: host.Attrs().HardwareAddr.String(),
		Name: "net1", MTU: 9000, MAC: "02:00:00:aa:bb:01",
		Addresses: []string{"10.66.1.2/24", "fd00:66::2/64"},
		Routes:    []Route{{Destination: "10.67.0.0/16", Gateway: "10.66.1.1"}, {Destination: "fd00:67::/48", Gateway: "fd00:66::1"}},
	}
}

func newAttacher(t *testing.T) *Attacher {
	t.Helper()
	a, err := NewAttacher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// assertRestored checks the interface is back in the host as it was, with
// no addresses, and gone from the pod.
func assertRestored(t *testing.T, nd Netdev, podNS string) {
	t.Helper()
	l, err := netlink.LinkByName(nd.HostName)
	if err != nil {
		t.Fatalf("%s is not back in the host: %v", nd.HostName, err)
	}
	if l.Attrs().MTU != nd.HostMTU || l.Attrs().HardwareAddr.String() != nd.HostMAC || l.Attrs().Alias != nd.HostAlias {
		t.Errorf("restored %s: MTU %d MAC %s alias %q, want %d %s %q", nd.HostName, l.Attrs().MTU, l.Attrs().HardwareAddr, l.Attrs().Alias, nd.HostMTU, nd.HostMAC, nd.HostAlias)
	}
	addrs, _ := netlink.AddrList(l, netlink.FAMILY_ALL)
	for _, a := range addrs {
		if !a.IP.IsLinkLocalUnicast() {
			t.Errorf("restored %s still has address %s", nd.HostName, a.IPNet)
		}
	}
	if podNS != "" {
		if l, _ := podLink(t, podNS, nd.Name); l != nil {
			t.Errorf("the pod still has %s", nd.Name)
		}
	}
}

func TestAttachDetach(t *testing.T) {
	requireRoot(t)
	_, ctx := ktesting.NewTestContext(t)
	podNS := newNetNS(t)
	_, host := newVeth(t)
	a := newAttacher(t)
	nd := testNetdev(host)

	for i := range 2 { // the second attach is a retried hook: it must succeed
		got, err := a.Attach(ctx, podNS, nd)
		if err != nil {
			t.Fatalf("attach #%d: %v", i+1, err)
		}
		if got.Name != "net1" || got.MAC != nd.MAC || got.MTU != 9000 {
			t.Errorf("attach #%d = %+v", i+1, got)
		}
	}
	if _, err := netlink.LinkByName(nd.HostName); err == nil {
		t.Errorf("%s is still in the host namespace", nd.HostName)
	}
	l, h := podLink(t, podNS, "net1")
	if l == nil {
		t.Fatal("no net1 in the pod")
	}
	if l.Attrs().Alias != nd.HostName || l.Attrs().MTU != 9000 || l.Attrs().HardwareAddr.String() != nd.MAC || l.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("net1 = alias %q MTU %d MAC %s flags %v", l.Attrs().Alias, l.Attrs().MTU, l.Attrs().HardwareAddr, l.Attrs().Flags)
	}
	addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range addrs {
		got = append(got, a.IPNet.String())
	}
	for _, want := range nd.Addresses {
		if !strings.Contains(strings.Join(got, " "), want) {
			t.Errorf("net1 addresses %v lack %s", got, want)
		}
	}
	routes, err := h.RouteList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	var dsts []string
	for _, r := range routes {
		if r.Dst != nil && r.Gw != nil {
			dsts = append(dsts, r.Dst.String()+" via "+r.Gw.String())
		}
	}
	for _, want := range []string{"10.67.0.0/16 via 10.66.1.1", "fd00:67::/48 via fd00:66::1"} {
		if !strings.Contains(strings.Join(dsts, ","), want) {
			t.Errorf("routes %v lack %s", dsts, want)
		}
	}

	for i := range 2 { // detaching twice is harmless
		if err := a.Detach(ctx, podNS, nd); err != nil {
			t.Fatalf("detach #%d: %v", i+1, err)
		}
	}
	assertRestored(t, nd, podNS)
}

// TestAttachRollback: a route that cannot be added fails the attach, which
// names the interface, and the interface is back in the host as it was.
func TestAttachRollback(t *testing.T) {
	requireRoot(t)
	_, ctx := ktesting.NewTestContext(t)
	podNS := newNetNS(t)
	_, host := newVeth(t)
	a := newAttacher(t)
	nd := testNetdev(host)
	nd.Routes = []Route{{Destination: "10.68.0.0/16", Gateway: "192.0.2.1"}} // not on any link
	_, err := a.Attach(ctx, podNS, nd)
	if err == nil || !strings.Contains(err.Error(), "net1") || !strings.Contains(err.Error(), "10.68.0.0/16") {
		t.Fatalf("attach = %v, want an error naming the interface and the route", err)
	}
	assertRestored(t, nd, podNS)
}

// TestAttachNameTaken: the pod already has an interface of that name that
// is not ours; nothing moves.
func TestAttachNameTaken(t *testing.T) {
	requireRoot(t)
	_, ctx := ktesting.NewTestContext(t)
	podNS := newNetNS(t)
	_, host := newVeth(t)
	_, other := newVeth(t)
	a := newAttacher(t)
	squatter := testNetdev(other)
	squatter.Addresses, squatter.Routes = nil, nil
	if _, err := a.Attach(ctx, podNS, squatter); err != nil {
		t.Fatal(err)
	}
	_, err := a.Attach(ctx, podNS, testNetdev(host))
	if err == nil || !strings.Contains(err.Error(), "already has an interface net1") {
		t.Fatalf("attach = %v, want the name clash", err)
	}
	if _, err := netlink.LinkByName(host.Attrs().Name); err != nil {
		t.Errorf("%s left the host namespace: %v", host.Attrs().Name, err)
	}
}

// TestDetachAfterKernelReturn: the pod's namespace went away and the kernel
// returned the device to the host under another name (as it does with a
// VF); detach finds it by its alias and restores it.
func TestDetachAfterKernelReturn(t *testing.T) {
	requireRoot(t)
	_, ctx := ktesting.NewTestContext(t)
	podNS := newNetNS(t)
	_, host := newVeth(t)
	a := newAttacher(t)
	nd := testNetdev(host)
	if _, err := a.Attach(ctx, podNS, nd); err != nil {
		t.Fatal(err)
	}
	kernelReturns(t, a, podNS, "net1", nil)
	if err := netns.DeleteNamed(filepath.Base(podNS)); err != nil {
		t.Fatal(err)
	}
	if err := a.Detach(ctx, podNS, nd); err != nil {
		t.Fatalf("detach after the namespace went: %v", err)
	}
	assertRestored(t, nd, "")
}

// TestDetachFindsByPCIAddress: the returned device has neither its name
// nor its alias (a driver renamed it); its PCI address finds it.
func TestDetachFindsByPCIAddress(t *testing.T) {
	requireRoot(t)
	_, ctx := ktesting.NewTestContext(t)
	podNS := newNetNS(t)
	_, host := newVeth(t)
	a := newAttacher(t)
	a.sysfsRoot = t.TempDir()
	nd := testNetdev(host)
	nd.PCIAddress = "0000:3b:01.0"
	if _, err := a.Attach(ctx, podNS, nd); err != nil {
		t.Fatal(err)
	}
	empty := ""
	renamed := kernelReturns(t, a, podNS, "net1", &empty)
	// What sysfs shows for the VF: its netdev under the PCI function.
	if err := os.MkdirAll(filepath.Join(a.sysfsRoot, "sys", "bus", "pci", "devices", nd.PCIAddress, "net", renamed), 0o755); err != nil {
		t.Fatal(err)
	}
	if l, err := netlink.LinkByName(renamed); err != nil {
		t.Fatalf("the renamed device is not in the host: %v", err)
	} else if l.Attrs().Alias != "" {
		t.Fatalf("alias still %q", l.Attrs().Alias)
	}
	if err := a.Detach(ctx, podNS, nd); err != nil {
		t.Fatalf("detach: %v", err)
	}
	assertRestored(t, nd, podNS)
}

// kernelReturns plays the kernel giving a device back to the host when its
// namespace goes: the pod's interface moves to the host under a new name
// (alias kept, or set to alias), which it returns.
func kernelReturns(t *testing.T, a *Attacher, podNS, name string, alias *string) string {
	t.Helper()
	l, _ := podLink(t, podNS, name)
	if l == nil {
		t.Fatalf("the pod has no %s", name)
	}
	ns, err := netns.GetFromPath(podNS)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	returned := fmt.Sprintf("%sret%d", testPrefix, seq.Add(1))
	if err := setLink(ns, l.Attrs().Index, &a.host, returned, 0, nil, alias); err != nil {
		t.Fatal(err)
	}
	return returned
}

// Present finds a netdev at every step of an attach (in the host, moved
// but not yet renamed, attached) and after a detach, and not once it is
// deleted; InPod, by contrast, says whether an attach completed.
func TestPresentDuringAttach(t *testing.T) {
	requireRoot(t)
	_, ctx := ktesting.NewTestContext(t)
	podNS := newNetNS(t)
	_, host := newVeth(t)
	a := newAttacher(t)
	nd := testNetdev(host)
	present := func(step string, want bool) {
		t.Helper()
		if got, err := a.Present(podNS, nd); err != nil || got != want {
			t.Errorf("%s: Present = %v, %v; want %v", step, got, err, want)
		}
	}
	present("in the host", true)
	inHost := func(step string, want bool) {
		t.Helper()
		if got, err := a.InHost(nd.HostName); err != nil || got != want {
			t.Errorf("%s: InHost = %v, %v; want %v", step, got, err, want)
		}
	}
	inHost("in the host", true)
	ns, err := netns.GetFromPath(podNS)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if err := netlink.LinkSetNsFd(host, int(ns)); err != nil {
		t.Fatal(err)
	}
	present("moved into the pod under its host name", true)
	if in, err := a.InPod(podNS, nd); err != nil || in {
		t.Errorf("moved, not configured: InPod = %v, %v; want false", in, err)
	}
	// Back, as an attach cut short is before it is done again.
	l, h := podLink(t, podNS, nd.HostName)
	if l == nil {
		t.Fatalf("%s not in the pod", nd.HostName)
	}
	hostNS, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer hostNS.Close()
	if err := h.LinkSetNsFd(l, int(hostNS)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Attach(ctx, podNS, nd); err != nil {
		t.Fatal(err)
	}
	present("attached", true)
	inHost("attached", false)
	if err := a.Detach(ctx, podNS, nd); err != nil {
		t.Fatal(err)
	}
	present("given back", true)
	inHost("given back", true)
	gone, err := netlink.LinkByName(nd.HostName)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkDel(gone); err != nil {
		t.Fatal(err)
	}
	present("deleted", false)
	inHost("deleted", false)
}
