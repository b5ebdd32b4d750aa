package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/test/netnstest"
)

// benchPrefix starts the names of the links and namespaces benchmarks make.
const benchPrefix = "fpb"

// benchNetNS creates a named network namespace standing in for a pod's,
// and returns its path and a handle to it.
func benchNetNS(b *testing.B) (string, netns.NsHandle) {
	b.Helper()
	path := netnstest.New(b, fmt.Sprintf("%s-%d", benchPrefix, os.Getpid()))
	ns, err := netns.GetFromPath(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ns.Close() })
	return path, ns
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
	benchAttach(b, podNS, benchNetdev(benchVeth(b)))
}

// benchAttach times the hook's attach of nd into the pod namespace; the
// detach between iterations is not timed.
func benchAttach(b *testing.B, podNS string, nd dataplane.Netdev) {
	b.Helper()
	a := benchAttacher(b)
	roundTrips(b, timeAttach, func(ctx context.Context) error {
		_, err := a.Attach(ctx, podNS, nd)
		return err
	}, func(ctx context.Context) error { return a.Detach(ctx, podNS, nd) })
}

// benchAttacher is an Attacher closed when the benchmark ends.
func benchAttacher(b *testing.B) *dataplane.Attacher {
	b.Helper()
	a, err := dataplane.NewAttacher()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = a.Close() })
	return a
}

// Which half of a round trip roundTrips times.
const (
	timeAttach = "attach"
	timeDetach = "detach"
)

// roundTrips runs attach then detach at every iteration and times the half
// named by timed; the other half is not timed.
func roundTrips(b *testing.B, timed string, attach, detach func(context.Context) error) {
	b.Helper()
	ctx := klog.NewContext(b.Context(), logr.Discard())
	b.ReportAllocs()
	for b.Loop() {
		if timed == timeDetach {
			b.StopTimer()
		}
		if err := attach(ctx); err != nil {
			b.Fatal(err)
		}
		if timed == timeDetach {
			b.StartTimer()
		} else {
			b.StopTimer()
		}
		if err := detach(ctx); err != nil {
			b.Fatal(err)
		}
		if timed == timeAttach {
			b.StartTimer()
		}
	}
}

// BenchmarkDetach returns the device to the host with its name, MTU and MAC.
// The attach between iterations is not timed.
func BenchmarkDetach(b *testing.B) {
	podNS, _ := benchNetNS(b)
	nd := benchNetdev(benchVeth(b))
	a := benchAttacher(b)
	roundTrips(b, timeDetach, func(ctx context.Context) error {
		_, err := a.Attach(ctx, podNS, nd)
		return err
	}, func(ctx context.Context) error { return a.Detach(ctx, podNS, nd) })
}

// BenchmarkFloor is the same work written directly against netlink, with a
// netlink handle kept open in the pod namespace: the least the kernel needs.
// attach: move, then MTU, MAC, address and up in the pod; detach: move back,
// then MTU and MAC. The other half of each round trip is not timed.
func BenchmarkFloor(b *testing.B) {
	for _, half := range []string{"attach", "detach"} {
		b.Run(half, func(b *testing.B) {
			_, ns := benchNetNS(b)
			benchFloor(b, half, ns, benchVeth(b))
		})
	}
}

// benchFloor times half ("attach" or "detach") of the floor's round trip
// of host into the namespace ns and back.
func benchFloor(b *testing.B, half string, ns netns.NsHandle, host netlink.Link) {
	b.Helper()
	in, out := floorRoundTrip(b, ns, host)
	b.ReportAllocs()
	for b.Loop() {
		if half == "attach" {
			in()
			b.StopTimer()
			out()
			b.StartTimer()
		} else {
			b.StopTimer()
			in()
			b.StartTimer()
			out()
		}
	}
}

// floorRoundTrip returns the floor's two halves for host and the
// namespace ns: in (move, then MTU, MAC, address and up in the
// namespace) and out (move back, then MTU and MAC as they were).
func floorRoundTrip(b *testing.B, ns netns.NsHandle, host netlink.Link) (in, out func()) {
	b.Helper()
	pod, err := netlink.NewHandleAt(ns)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pod.Close)
	hostNS, err := netns.Get()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = hostNS.Close() })
	mac, _ := net.ParseMAC("02:00:00:be:0c:01")
	addr, _ := netlink.ParseAddr("10.90.0.2/24")
	in = func() {
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
		for _, step := range []error{pod.LinkSetMTU(pl, 9000), pod.LinkSetHardwareAddr(pl, mac), pod.AddrAdd(pl, addr), pod.LinkSetUp(pl)} {
			if step != nil {
				b.Fatal(step)
			}
		}
	}
	out = func() {
		pl, err := pod.LinkByName(host.Attrs().Name)
		if err != nil {
			b.Fatal(err)
		}
		if err := pod.LinkSetNsFd(pl, int(hostNS)); err != nil {
			b.Fatal(err)
		}
		l, err := netlink.LinkByName(host.Attrs().Name)
		if err != nil {
			b.Fatal(err)
		}
		for _, step := range []error{netlink.LinkSetMTU(l, host.Attrs().MTU), netlink.LinkSetHardwareAddr(l, host.Attrs().HardwareAddr)} {
			if step != nil {
				b.Fatal(step)
			}
		}
	}
	return in, out
}

// BenchmarkAttachScale attaches a device to each of N pods (N = 1, 16, 64),
// one after another and with a pool of workers, and reports the cost per
// attach. Namespace moves are serialized by the kernel (RTNL), so a pool
// cannot beat one after another by much; it must not be slower either.
func BenchmarkAttachScale(b *testing.B) {
	for _, n := range []int{1, 16, 64} {
		for _, workers := range []int{1, 4} {
			b.Run(fmt.Sprintf("pods=%d/workers=%d", n, workers), func(b *testing.B) {
				type pod struct {
					ns string
					nd dataplane.Netdev
				}
				pods := make([]pod, n)
				for i := range pods {
					ns := scaleNetNS(b, i)
					pods[i] = pod{ns: ns, nd: benchNetdev(scaleVeth(b, i))}
				}
				a, err := dataplane.NewAttacher()
				if err != nil {
					b.Fatal(err)
				}
				defer func() { _ = a.Close() }()
				ctx := klog.NewContext(b.Context(), logr.Discard())
				run := func(f func(p pod) error) {
					work := make(chan pod)
					errs := make(chan error, n)
					var wg sync.WaitGroup
					for range workers {
						wg.Go(func() {
							for p := range work {
								errs <- f(p)
							}
						})
					}
					for _, p := range pods {
						work <- p
					}
					close(work)
					wg.Wait()
					close(errs)
					for err := range errs {
						if err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportAllocs()
				for b.Loop() {
					run(func(p pod) error { _, err := a.Attach(ctx, p.ns, p.nd); return err })
					b.StopTimer()
					run(func(p pod) error { return a.Detach(ctx, p.ns, p.nd) })
					b.StartTimer()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/attach")
			})
		}
	}
}

func scaleNetNS(b *testing.B, i int) string {
	b.Helper()
	return netnstest.New(b, fmt.Sprintf("%s-s%d-%d", benchPrefix, os.Getpid(), i))
}

func scaleVeth(b *testing.B, i int) netlink.Link {
	b.Helper()
	return netnstest.Veth(b, fmt.Sprintf("%ss%da", benchPrefix, i), fmt.Sprintf("%ss%db", benchPrefix, i))
}
