//go:build sriov

package bench

import (
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/fastpath-dra/fastpath/test/sriovtest"
)

// BenchmarkSRIOVAttach runs in the SR-IOV VM (make e2e-sriov): fastpath's
// attach of a real VF (igbvf) against the floor on the same VF (the same
// work written directly against netlink), and the same pair on a veth. The
// VM emulates its CPUs (TCG), so only the ratios mean something; they are
// logged at the end.
func BenchmarkSRIOVAttach(b *testing.B) {
	pf := sriovtest.RequirePF(b)
	vf := pf.VFsReady(b, 4)[0]
	vfLink, err := netlink.LinkByName(vf.Netdev)
	if err != nil {
		b.Fatal(err)
	}
	perOp := map[string]float64{}
	run := func(name string, fn func(b *testing.B)) {
		b.Run(name, func(b *testing.B) {
			fn(b)
			perOp[name] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		})
	}
	run("vf", func(b *testing.B) {
		podNS, _ := benchNetNS(b)
		benchAttach(b, podNS, benchNetdev(vfLink))
	})
	run("vf-floor", func(b *testing.B) {
		_, ns := benchNetNS(b)
		benchFloor(b, "attach", ns, vfLink)
	})
	run("veth", func(b *testing.B) {
		podNS, _ := benchNetNS(b)
		benchAttach(b, podNS, benchNetdev(benchVeth(b)))
	})
	run("veth-floor", func(b *testing.B) {
		_, ns := benchNetNS(b)
		benchFloor(b, "attach", ns, benchVeth(b))
	})
	if len(perOp) == 4 {
		b.Logf("attach / floor: VF %.2fx, veth %.2fx; VF / veth: attach %.2fx, floor %.2fx",
			perOp["vf"]/perOp["vf-floor"], perOp["veth"]/perOp["veth-floor"], perOp["vf"]/perOp["veth"], perOp["vf-floor"]/perOp["veth-floor"])
	}
}
