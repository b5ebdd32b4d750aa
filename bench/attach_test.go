package bench

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
)

// benchPrefix starts the names of the links and namespaces benchmarks make.
const benchPrefix = "fpb"

// benchNetNS creates a named network namespace standing in for a pod's.
func benchNetNS(b *testing.B) (string, netns.NsHandle) {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Fatal("this benchmark moves links between network namespaces: run it as root")
	}
	name := fmt.Sprintf("%s-%d", benchPrefix, os.Getpid())
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		b.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.NewNamed(name)
	if err != nil {
		b.Fatal(err)
	}
	if err := netns.Set(orig); err != nil {
		panic(err)
	}
	b.Cleanup(func() { ns.Close(); _ = netns.DeleteNamed(name) })
	return filepath.Join("/run/netns", name), ns
}

func benchVeth(b *testing.B) netlink.Link {
	b.Helper()
	name := benchPrefix + "0a"
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: 1500}, PeerName: benchPrefix + "0b"}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if l, err := netlink.LinkByName(benchPrefix + "0b"); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	l, err := netlink.LinkByName(name)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func benchNetdev(l netlink.Link) dataplane.Netdev {
	return dataplane.Netdev{
		HostName: l.Attrs().Name, HostMTU: l.Attrs().MTU, HostMAC: l.Attrs().HardwareAddr.String(),
		Name: "net1", MTU: 9000, MAC: "02:00:00:be:0c:01", Addresses: []string{"10.90.0.2/24"},
	}
}

// BenchmarkAttach is fastpath's hook path for a prepared netdev: one fused
// move into the pod namespace (name, MTU, MAC, alias), address, link up. The
// detach between iterations is not timed.
func BenchmarkAttach(b *testing.B) {
	podNS, _ := benchNetNS(b)
	nd := benchNetdev(benchVeth(b))
	a, err := dataplane.NewAttacher()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = a.Close() }()
	ctx := klog.NewContext(b.Context(), logr.Discard())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Attach(ctx, podNS, nd); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := a.Detach(ctx, podNS, nd); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkDetach returns the device to the host with its name, MTU and MAC.
// The attach between iterations is not timed.
func BenchmarkDetach(b *testing.B) {
	podNS, _ := benchNetNS(b)
	nd := benchNetdev(benchVeth(b))
	a, err := dataplane.NewAttacher()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = a.Close() }()
	ctx := klog.NewContext(b.Context(), logr.Discard())
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		if _, err := a.Attach(ctx, podNS, nd); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := a.Detach(ctx, podNS, nd); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFloor is the same work written directly against netlink, with
// a netlink handle kept open in the pod namespace: the least the kernel
// needs. Move (with name, MTU and MAC in separate calls after the move would
// be slower; the floor moves, then sets them in the pod), address, up; and
// back.
func BenchmarkFloor(b *testing.B) {
	_, ns := benchNetNS(b)
	host := benchVeth(b)
	pod, err := netlink.NewHandleAt(ns)
	if err != nil {
		b.Fatal(err)
	}
	defer pod.Close()
	hostNS, err := netns.Get()
	if err != nil {
		b.Fatal(err)
	}
	defer hostNS.Close()
	mac, _ := net.ParseMAC("02:00:00:be:0c:01")
	addr, _ := netlink.ParseAddr("10.90.0.2/24")
	b.ReportAllocs()
	for b.Loop() {
		l, err := netlink.LinkByName(host.Attrs().Name)
		if err != nil {
			b.Fatal(err)
		}
		if err := netlink.LinkSetNsFd(l, int(ns)); err != nil {
			b.Fatal(err)
		}
		pl, err := pod.LinkByName(host.Attrs().Name)
		if err != nil {
			b.Fatal(err)
		}
		if err := pod.LinkSetMTU(pl, 9000); err != nil {
			b.Fatal(err)
		}
		if err := pod.LinkSetHardwareAddr(pl, mac); err != nil {
			b.Fatal(err)
		}
		if err := pod.AddrAdd(pl, addr); err != nil {
			b.Fatal(err)
		}
		if err := pod.LinkSetUp(pl); err != nil {
			b.Fatal(err)
		}
		if err := pod.LinkSetNsFd(pl, int(hostNS)); err != nil {
			b.Fatal(err)
		}
		l, err = netlink.LinkByName(host.Attrs().Name)
		if err != nil {
			b.Fatal(err)
		}
		if err := netlink.LinkSetMTU(l, 1500); err != nil {
			b.Fatal(err)
		}
		if err := netlink.LinkSetHardwareAddr(l, host.Attrs().HardwareAddr); err != nil {
			b.Fatal(err)
		}
	}
}
