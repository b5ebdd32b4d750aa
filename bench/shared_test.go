package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/test/netnstest"
)

// sharedPrefix starts the names of the links and namespaces of the shared
// benchmarks.
const sharedPrefix = "fpsh"

// sharedParent is an up veth (its peer up) standing in for a shared NIC.
func sharedParent(b *testing.B) netlink.Link {
	b.Helper()
	name, peer := sharedPrefix+"b0a", sharedPrefix+"b0b"
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

// BenchmarkAttachSharedConcurrent: 64 pods attach a macvlan of one parent
// at once, each on its own goroutine, as 64 sandboxes starting together
// do. It reports each attach's latency at the median and the 99th
// percentile over every pod of every iteration. Moves of whole devices
// serialize on an RCU grace period each; sub-interfaces made in place
// take the RTNL lock only briefly.
func BenchmarkAttachSharedConcurrent(b *testing.B) {
	const pods = 64
	parent := sharedParent(b)
	subs := make([]dataplane.SubInterface, pods)
	nss := make([]string, pods)
	for i := range pods {
		nss[i], subs[i] = sharedNetNS(b, i), benchSub(parent, i)
	}
	a, err := dataplane.NewAttacher()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = a.Close() }()
	ctx := klog.NewContext(b.Context(), logr.Discard())
	var lat []time.Duration
	var mu sync.Mutex
	b.ReportAllocs()
	for b.Loop() {
		var wg sync.WaitGroup
		errs := make(chan error, pods)
		start := make(chan struct{})
		for i := range pods {
			wg.Go(func() {
				<-start
				t0 := time.Now()
				_, err := a.AttachShared(ctx, nss[i], subs[i])
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
		for i := range pods {
			if err := a.DetachShared(ctx, nss[i], subs[i]); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	slices.Sort(lat)
	at := func(q float64) float64 { return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Nanoseconds()) }
	b.ReportMetric(at(0.5), "p50-ns/attach")
	b.ReportMetric(at(0.99), "p99-ns/attach")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/64-pods")
}
