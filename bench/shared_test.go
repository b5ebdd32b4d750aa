package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/nri"
	"github.com/fastpath-dra/fastpath/dra/status"
	"github.com/fastpath-dra/fastpath/test/netnstest"
)

// sharedPrefix starts the names of the links and namespaces of the shared
// benchmarks.
const sharedPrefix = "fpsh"

// sharedParent is an up veth (its peer up) standing in for a shared NIC.
func sharedParent(b *testing.B) netlink.Link {
	b.Helper()
	// Unique on the machine: another run of these benchmarks may be going on.
	id := fmt.Sprintf("%sb%d", sharedPrefix, os.Getpid()%100000)
	name, peer := id+"a", id+"b"
	netnstest.Veth(b, name, peer)
	for _, n := range []string{peer, name} {
		l, err := netlink.LinkByName(n)
		if err == nil {
			err = netlink.LinkSetUp(l)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func sharedNetNS(b *testing.B, i int) string {
	b.Helper()
	return netnstest.New(b, fmt.Sprintf("%s-b%d-%d", sharedPrefix, os.Getpid(), i))
}

func benchSub(parent netlink.Link, i int) dataplane.SubInterface {
	return dataplane.SubInterface{Parent: parent.Attrs().Name, Kind: dataplane.KindMacvlan, Mode: "bridge", Name: "net1", MTU: 1400,
		Addresses: []string{fmt.Sprintf("10.95.%d.%d/16", i/250, i%250+2)}, Alias: fmt.Sprintf("fastpath/bench/%d", i)}
}

// BenchmarkAttachShared is fastpath's hook path for a claim on a shared
// device: a macvlan made in the pod's namespace with one RTM_NEWLINK (no
// move), marked, addressed and set up. Compare with BenchmarkFloor/attach
// (the least a move of a whole device costs) and BenchmarkCNI/macvlan (the
// same macvlan through libcni and the reference plugin). The delete
// between iterations is not timed.
func BenchmarkAttachShared(b *testing.B) {
	benchShared(b, timeAttach)
}

// BenchmarkDetachShared deletes the pod's macvlan. The attach between
// iterations is not timed.
func BenchmarkDetachShared(b *testing.B) {
	benchShared(b, timeDetach)
}

// benchShared times one half of a round trip of a macvlan of the shared
// parent into a pod's namespace and out.
func benchShared(b *testing.B, timed string) {
	b.Helper()
	parent := sharedParent(b)
	podNS := sharedNetNS(b, 0)
	s := benchSub(parent, 0)
	a := benchAttacher(b)
	roundTrips(b, timed, func(ctx context.Context) error {
		_, err := a.AttachShared(ctx, podNS, s)
		return err
	}, func(ctx context.Context) error { return a.DetachShared(ctx, podNS, s) })
}

// The pods of the concurrent benchmarks: as many sandboxes starting
// together.
const sharedPods = 64

// BenchmarkAttachSharedConcurrent: 64 pods attach a macvlan of one parent
// at once, each on its own goroutine, as 64 sandboxes starting together
// do. It reports each attach's latency at the median and the 99th
// percentile over every pod of every iteration, and the time for all 64.
// Moves of whole devices serialize on an RCU grace period each;
// sub-interfaces made in place take the RTNL lock only briefly, but once
// per request: compare with BenchmarkFloorSharedConcurrent.
func BenchmarkAttachSharedConcurrent(b *testing.B) {
	parent := sharedParent(b)
	subs := make([]dataplane.SubInterface, sharedPods)
	nss := make([]string, sharedPods)
	for i := range sharedPods {
		nss[i], subs[i] = sharedNetNS(b, i), benchSub(parent, i)
	}
	a := benchAttacher(b)
	concurrentRoundTrips(b, func(ctx context.Context, i int) error {
		_, err := a.AttachShared(ctx, nss[i], subs[i])
		return err
	}, func(ctx context.Context, i int) error { return a.DetachShared(ctx, nss[i], subs[i]) })
}

// BenchmarkFloorSharedConcurrent is the floor of
// BenchmarkAttachSharedConcurrent, in the same run: the same 64 pods at
// once, each with the least netlink that leaves the same interface in its
// namespace, written directly against netlink with handles opened before
// the timer starts. attach: one RTM_NEWLINK sent in the host that makes
// the macvlan in the pod's namespace, up, with its MTU and an index of our
// choosing (so nothing need look it up), then one RTM_NEWADDR in the pod;
// no alias. create: that RTM_NEWLINK alone, one request per pod. The
// delete between iterations is not timed.
func BenchmarkFloorSharedConcurrent(b *testing.B) {
	for _, half := range []string{"attach", "create"} {
		b.Run(half, func(b *testing.B) {
			parent := sharedParent(b)
			pods := make([]floorPod, sharedPods)
			for i := range pods {
				pods[i] = newFloorPod(b, parent, i)
			}
			concurrentRoundTrips(b, func(_ context.Context, i int) error {
				return pods[i].attach(half == "attach")
			}, func(_ context.Context, i int) error { return pods[i].detach() })
		})
	}
}

// floorIndex is the index the floor gives each pod's macvlan: one no host
// interface has (the kernel looks the index of an RTM_NEWLINK up in the
// sender's namespace first) and free in each pod's new namespace.
const floorIndex = 1 << 20

// floorPod is one pod of the floor: its netlink handles in the host and
// in its namespace, and the macvlan to make there.
type floorPod struct {
	host, pod *netlink.Handle
	link      *netlink.Macvlan
	addr      *netlink.Addr
}

func newFloorPod(b *testing.B, parent netlink.Link, i int) floorPod {
	b.Helper()
	ns, err := netns.GetFromPath(sharedNetNS(b, i))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ns.Close() })
	host, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(host.Close)
	pod, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pod.Close)
	s := benchSub(parent, i)
	addr, err := netlink.ParseAddr(s.Addresses[0])
	if err != nil {
		b.Fatal(err)
	}
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.Index, attrs.ParentIndex, attrs.MTU = s.Name, floorIndex, parent.Attrs().Index, s.MTU
	attrs.Flags, attrs.Namespace = net.FlagUp, netlink.NsFd(ns)
	return floorPod{host: host, pod: pod, addr: addr, link: &netlink.Macvlan{LinkAttrs: attrs, Mode: netlink.MACVLAN_MODE_BRIDGE}}
}

// attach makes the pod's macvlan, up, with one RTM_NEWLINK, then, if
// address, adds its address with one RTM_NEWADDR.
func (p floorPod) attach(address bool) error {
	if err := p.host.LinkAdd(p.link); err != nil {
		return fmt.Errorf("make %s in the pod: %w", p.link.Name, err)
	}
	if !address {
		return nil
	}
	if err := p.pod.AddrAdd(p.link, p.addr); err != nil {
		return fmt.Errorf("add %s to %s: %w", p.addr, p.link.Name, err)
	}
	return nil
}

func (p floorPod) detach() error {
	return p.pod.LinkDel(p.link)
}

// concurrentRoundTrips runs attach for every pod at once, one goroutine
// each, then detach for every pod at once, at every iteration, and times
// the attaches. It reports each attach's latency at the median and the
// 99th percentile over every pod of every iteration, and the time for all
// of them. The detaches, not timed, run together so that their RCU waits
// overlap.
func concurrentRoundTrips(b *testing.B, attach, detach func(ctx context.Context, pod int) error) {
	b.Helper()
	ctx := klog.NewContext(b.Context(), logr.Discard())
	var lat []time.Duration
	var mu sync.Mutex
	b.ReportAllocs()
	for b.Loop() {
		var wg sync.WaitGroup
		errs := make(chan error, sharedPods)
		start := make(chan struct{})
		for i := range sharedPods {
			wg.Go(func() {
				<-start
				t0 := time.Now()
				err := attach(ctx, i)
				d := time.Since(t0)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
				errs <- err
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		errs = make(chan error, sharedPods)
		for i := range sharedPods {
			wg.Go(func() { errs <- detach(ctx, i) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	slices.Sort(lat)
	at := func(q float64) float64 { return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Nanoseconds()) }
	b.ReportMetric(at(0.5), "p50-ns/attach")
	b.ReportMetric(at(0.99), "p99-ns/attach")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), fmt.Sprintf("ns/%d-pods", sharedPods))
}

// BenchmarkHookShared is the NRI plugin's RunPodSandbox hook (AttachPod)
// for a pod with one claim on a shared device: the claim's record of the
// pod's sandbox written to the checkpoint (on the machine's disk, as the
// daemon's state directory is), then AttachShared's macvlan made in the
// pod's namespace, addressed and up. Compare with BenchmarkAttachShared in
// the same run, the dataplane alone: the difference is the hook's own
// cost. It also reports the time the hook spent writing the record
// ("record-ns/attach", median). StopPodSandbox's DetachPod between
// iterations is not timed.
func BenchmarkHookShared(b *testing.B) { benchHookShared(b, 0) }

// benchHookShared is BenchmarkHookShared with others claims of other pods
// prepared in the store.
func benchHookShared(b *testing.B, others int) {
	parent := sharedParent(b)
	store, writing := timedStore(b)
	fillStore(b, store, others)
	plugin := nri.New(nri.Options{Store: store, Attacher: benchAttacher(b), Status: status.NewWriter(fake.NewClientset())})
	pod := nri.Pod{UID: "pod-shared", Namespace: "default", Name: "pod-shared", SandboxID: "s", NetNS: sharedNetNS(b, 0)}
	sub := benchSub(parent, 0)
	claim := claims.Claim{Driver: claims.DriverFastpath, UID: "uid-shared", Namespace: "default", Name: "shared",
		Pod: claims.Pod{UID: pod.UID, Name: pod.Name}, Prepared: true,
		Devices: []claims.Device{{Request: "net", Pool: "node-a", Device: "nic-" + sub.Parent, Mode: "macvlan",
			Shared: &claims.SharedInterface{Parent: sub.Parent, Kind: sub.Kind, Mode: sub.Mode, ShareID: "share-0"},
			Pod:    &claims.PodInterface{Name: sub.Name, MTU: sub.MTU, Addresses: sub.Addresses}}}}
	if err := store.Admit(claim); err != nil {
		b.Fatal(err)
	}
	var records []time.Duration
	roundTrips(b, timeAttach, func(ctx context.Context) error {
		*writing = 0
		err := plugin.AttachPod(ctx, pod)
		records = append(records, *writing)
		return err
	}, func(ctx context.Context) error { return plugin.DetachPod(ctx, pod) })
	b.ReportMetric(median(records), "record-ns/attach")
}
