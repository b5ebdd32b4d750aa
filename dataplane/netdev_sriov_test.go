//go:build sriov

package dataplane

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/test/sriovtest"
)

func vfNetdev(host netlink.Link, vf sriovtest.VF) Netdev {
	return Netdev{
		HostName: host.Attrs().Name, HostMTU: host.Attrs().MTU, HostMAC: host.Attrs().HardwareAddr.String(), HostAlias: host.Attrs().Alias,
		PCIAddress: vf.Address,
		Name:       "net1", MTU: 9000, MAC: "02:fa:57:00:00:01",
		Addresses: []string{"10.77.0.2/24", "fd00:77::2/64"},
		Routes:    []Route{{Destination: "10.78.0.0/16", Gateway: "10.77.0.1"}},
	}
}

// assertVFHome checks the VF is back in the host as it was: name, MTU, MAC,
// alias, no addresses, and sysfs shows its netdev under its PCI function.
func assertVFHome(t *testing.T, nd Netdev) {
	t.Helper()
	l, err := netlink.LinkByName(nd.HostName)
	if err != nil {
		t.Fatalf("VF %s is not back in the host as %s: %v", nd.PCIAddress, nd.HostName, err)
	}
	if a := l.Attrs(); a.MTU != nd.HostMTU || a.HardwareAddr.String() != nd.HostMAC || a.Alias != nd.HostAlias || a.ParentDev != nd.PCIAddress {
		t.Errorf("restored %s: MTU %d MAC %s alias %q parent %s, want %d %s %q %s", nd.HostName, a.MTU, a.HardwareAddr, a.Alias, a.ParentDev,
			nd.HostMTU, nd.HostMAC, nd.HostAlias, nd.PCIAddress)
	}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if !a.IP.IsLinkLocalUnicast() {
			t.Errorf("restored %s still has %s", nd.HostName, a.IPNet)
		}
	}
	if got := sriovtest.Netdev(nd.PCIAddress); got != nd.HostName {
		t.Errorf("sysfs shows the netdev of %s as %q, want %s", nd.PCIAddress, got, nd.HostName)
	}
}

// TestSRIOVAttachDetach: a real VF goes into a pod's namespace with its
// final name, MTU, MAC and alias, its addresses and routes, in one move
// (it leaves the host once, and is not seen there again until it is given
// back), and comes back as it was.
func TestSRIOVAttachDetach(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	_, vf := sriovVF(t, 0)
	host := linkByName(t, vf.Netdev)
	nd := vfNetdev(host, vf)
	podNS := sriovNetNS(t)
	a := attacher(t)

	updates := make(chan netlink.LinkUpdate, 100)
	done := make(chan struct{})
	if err := netlink.LinkSubscribe(updates, done); err != nil {
		t.Fatal(err)
	}
	got, err := a.Attach(ctx, podNS, nd)
	if err != nil {
		close(done)
		t.Fatal(err)
	}
	// The host saw the VF go once, and not come back.
	var seen []string
	for drained := false; !drained; {
		select {
		case u := <-updates:
			if int(u.Index) == host.Attrs().Index {
				seen = append(seen, map[uint16]string{unix.RTM_NEWLINK: "new", unix.RTM_DELLINK: "del"}[u.Header.Type])
			}
		case <-time.After(200 * time.Millisecond):
			drained = true
		}
	}
	close(done)
	if !slices.Equal(seen, []string{"del"}) {
		t.Errorf("the host saw %v for the VF during the attach, want one removal", seen)
	}

	if got.Name != "net1" || got.MTU != 9000 || got.MAC != nd.MAC {
		t.Errorf("Attach = %+v", got)
	}
	if name := sriovtest.Netdev(vf.Address); name != "" {
		t.Errorf("the host still shows %s as the VF's netdev", name)
	}
	l, h := vfInPod(t, podNS, "net1")
	if l == nil {
		t.Fatal("no net1 in the pod")
	}
	if a := l.Attrs(); a.Alias != nd.HostName || a.MTU != 9000 || a.HardwareAddr.String() != nd.MAC || a.Flags&net.FlagUp == 0 || a.ParentDev != vf.Address {
		t.Errorf("net1 in the pod: alias %q MTU %d MAC %s flags %v parent %s", a.Alias, a.MTU, a.HardwareAddr, a.Flags, a.ParentDev)
	}
	addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	var cidrs []string
	for _, a := range addrs {
		cidrs = append(cidrs, a.IPNet.String())
	}
	for _, want := range nd.Addresses {
		if !slices.Contains(cidrs, want) {
			t.Errorf("net1 has %v, not %s", cidrs, want)
		}
	}
	routes, err := h.RouteList(l, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(routes, func(r netlink.Route) bool {
		return r.Dst != nil && r.Dst.String() == "10.78.0.0/16" && r.Gw.String() == "10.77.0.1"
	}) {
		t.Errorf("net1's routes %v lack 10.78.0.0/16 via 10.77.0.1", routes)
	}

	for range 2 { // the second is a retried hook: harmless
		if err := a.Detach(ctx, podNS, nd); err != nil {
			t.Fatal(err)
		}
	}
	assertVFHome(t, nd)
	if l, _ := vfInPod(t, podNS, "net1"); l != nil {
		t.Error("the pod still has net1")
	}
}

// TestSRIOVPodNetnsDeleted is what veths cannot show: a VF's netdev
// outlives its pod's namespace. When the namespace goes while fastpathd is
// down, the kernel gives the VF back to the host under the name it had in
// the pod, or dev<index> when the host has that name, and a Detach by a
// daemon started afresh finds it (by its alias, or by its PCI address once
// the alias is gone) and restores its name, MTU, MAC and alias.
func TestSRIOVPodNetnsDeleted(t *testing.T) {
	pf, vf := sriovVF(t, 2)
	host := linkByName(t, vf.Netdev)
	for _, tc := range []struct {
		name      string
		podName   string
		dropAlias bool
		back      func(string) bool
	}{
		{"name free in the host", "net1", false, func(n string) bool { return n == "net1" }},
		{"name taken in the host", pf.Name, false, func(n string) bool { return strings.HasPrefix(n, "dev") }},
		{"alias lost", "net1", true, func(n string) bool { return n == "net1" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			nd := vfNetdev(host, vf)
			nd.Name = tc.podName
			podNS := sriovNetNS(t)
			a, err := NewAttacher()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.Attach(ctx, podNS, nd); err != nil {
				t.Fatal(err)
			}
			if tc.dropAlias {
				// A handle of its own, closed at once: an open netlink
				// socket in the namespace would keep it alive.
				ns, h, err := podHandle(podNS)
				if err != nil {
					t.Fatal(err)
				}
				l, err := h.LinkByName(nd.Name)
				if err == nil {
					err = h.LinkSetAlias(l, "")
				}
				h.Close()
				_ = ns.Close()
				if err != nil {
					t.Fatal(err)
				}
			}
			// The daemon goes down; then the pod's namespace.
			_ = a.Close()
			if err := netns.DeleteNamed(filepath.Base(podNS)); err != nil {
				t.Fatal(err)
			}
			var back string
			sriovtest.WaitFor(t, 10*time.Second, "the VF back in the host", func() bool {
				back = sriovtest.Netdev(vf.Address)
				return back != ""
			})
			if !tc.back(back) {
				t.Errorf("the VF came back as %q", back)
			}
			t.Logf("the kernel gave the VF back as %s", back)
			if _, err := os.Stat(podNS); err == nil {
				t.Fatalf("%s still there", podNS)
			}

			a = attacher(t) // the daemon again
			if err := a.Detach(ctx, podNS, nd); err != nil {
				t.Fatalf("detach after the pod's namespace went: %v", err)
			}
			assertVFHome(t, nd)
		})
	}
}
