package bench

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/fastpath-dra/fastpath/test/netnstest"
)

// BenchmarkRTNLDuringMoves times one link change of the host (an MTU set
// on a veth, the kind of call each pod's CNI plugins make several of)
// while nothing else changes links ("idle"), and while another goroutine
// moves a device into a namespace and back without pause ("moves": the
// floor's round trips). The kernel holds its RTNL lock across a
// namespace move, so the difference is how long a burst's attaches hold
// up every other pod's network set-up, whoever moves the device.
func BenchmarkRTNLDuringMoves(b *testing.B) {
	for _, load := range []string{"idle", "moves"} {
		b.Run(load, func(b *testing.B) {
			other := netnstest.Veth(b, benchPrefix+"r0a", benchPrefix+"r0b")
			stop := make(chan struct{})
			var wg sync.WaitGroup
			if load == "moves" {
				_, ns := benchNetNS(b)
				in, out := floorRoundTrip(b, ns, benchVeth(b))
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						in()
						out()
					}
				})
			}
			mtu := 1400
			var took []time.Duration
			for b.Loop() {
				mtu = 1400 + (mtu+1)%100
				start := time.Now()
				if err := netlink.LinkSetMTU(other, mtu); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			close(stop)
			wg.Wait()
			slices.Sort(took)
			at := func(p int) float64 { return float64(took[(len(took)-1)*p/100]) }
			b.ReportMetric(at(50), "p50-ns")
			b.ReportMetric(at(99), "p99-ns")
			b.ReportMetric(float64(took[len(took)-1]), "max-ns")
		})
	}
}
