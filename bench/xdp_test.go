package bench

import (
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/fastpath-dra/fastpath/bpf"
	"github.com/fastpath-dra/fastpath/dataplane"
)

// BenchmarkAttachXDP is the hook path of an afxdp claim: the netdev attach
// of BenchmarkAttach plus opening the program Prepare pinned and attaching
// it natively in the pod, its attachment pinned. Compare with
// BenchmarkAttach in the same run. The detach between iterations is not
// timed.
func BenchmarkAttachXDP(b *testing.B) {
	podNS, _ := benchNetNS(b)
	nd := benchNetdev(benchVeth(b))
	nd.XDP = &dataplane.XDP{Dir: pinXSKRedirect(b), Mode: bpf.Native}
	benchAttach(b, podNS, nd)
}

// pinXSKRedirect loads xsk-redirect and pins it with its maps, as Prepare
// does for an afxdp claim, in a bpffs of the benchmark's own, and returns
// the directory.
func pinXSKRedirect(b *testing.B) string {
	b.Helper()
	root := b.TempDir()
	if err := bpf.MountBPFFS(root); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
	dir := filepath.Join(root, "claim")
	prog, err := bpf.Load(bpf.XSKRedirect)
	if err != nil {
		b.Fatal(err)
	}
	if err := prog.Pin(dir); err != nil {
		b.Fatal(err)
	}
	_ = prog.Close()
	return dir
}

// BenchmarkXDPFloor is the kernel's part of BenchmarkAttachXDP's extra work:
// a native XDP attach to a veth written directly against cilium/ebpf, no
// namespace switch, no pinning. The detach between iterations is not timed.
func BenchmarkXDPFloor(b *testing.B) {
	l := benchVeth(b)
	// Up, as the pod's interface is when the hook attaches the program.
	if err := netlink.LinkSetUp(l); err != nil {
		b.Fatal(err)
	}
	spec, err := ebpf.LoadCollectionSpec("../bpf/xskredirect_bpfel.o")
	if err != nil {
		b.Fatal(err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		b.Fatal(err)
	}
	defer coll.Close()
	prog := coll.Programs["xsk_redirect"]
	b.ReportAllocs()
	for b.Loop() {
		x, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: l.Attrs().Index, Flags: link.XDPDriverMode})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := x.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
