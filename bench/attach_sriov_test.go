//go:build sriov

package bench

import (
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/test/sriovtest"
)

// BenchmarkSRIOVAttach runs in the SR-IOV VM (make e2e-sriov): fastpath's
// attach of a real VF (igbvf), and of a veth, each against the floor on the
// same device (the same work written directly against netlink). The VM
// emulates its CPUs (TCG) on a shared machine whose speed drifts, so each
// fastpath attach is paired with a floor attach right after it, and the
// ratio of the two (x-floor) is what to read, not the absolute times.
func BenchmarkSRIOVAttach(b *testing.B) {
	pf := sriovtest.RequirePF(b)
	vf := pf.VFsReady(b, 4)[0]
	b.Run("vf", func(b *testing.B) {
		l, err := netlink.LinkByName(vf.Netdev)
		if err != nil {
			b.Fatal(err)
		}
		benchAttachPaired(b, l)
	})
	b.Run("veth", func(b *testing.B) { benchAttachPaired(b, benchVeth(b)) })
}

// benchAttachPaired times fastpath's attach of host (with the detach after
// it untimed), then times by hand the floor's attach of the same device, and
// reports the floor's time per attach and fastpath's as a multiple of it.
func benchAttachPaired(b *testing.B, host netlink.Link) {
	podNS, ns := benchNetNS(b)
	nd := benchNetdev(host)
	a, err := dataplane.NewAttacher()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = a.Close() }()
	ctx := klog.NewContext(b.Context(), logr.Discard())
	floorIn, floorOut := floorRoundTrip(b, ns, host)
	var floor time.Duration
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Attach(ctx, podNS, nd); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := a.Detach(ctx, podNS, nd); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		floorIn()
		floor += time.Since(t0)
		floorOut()
		b.StartTimer()
	}
	b.ReportMetric(float64(floor.Nanoseconds())/float64(b.N), "floor-ns/op")
	b.ReportMetric(float64(b.Elapsed())/float64(floor), "x-floor")
}
