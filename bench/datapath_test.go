package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/go-logr/logr"
	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/bpf"
	"github.com/fastpath-dra/fastpath/bpf/xsk"
	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/test/netnstest"
)

// BenchmarkDatapath is what a pod receives through the data path fastpath
// hands it, beside the same path built by hand, taking turns in the same
// run: 64-byte UDP frames sent into the host end of a veth pair whose
// other end is the pod's, and taken by a consumer spinning on the pod's
// side. The frames come from the kernel's own generator (BPF_PROG_RUN in
// live-frames mode, an XDP_TX program on the host end), which costs a few
// tens of ns a frame: what limits the rate is the pod's side, the veth's
// NAPI and what follows it, not a sender's system calls. Frames the pod's
// side is too slow for are dropped by the kernel and not counted.
//
// Each benchmark sets up both sides, each on a veth pair and in a
// namespace of its own, then floods one side for a round of datapathRound
// frames, then the other, and so on until each side took b.N: a load that
// comes and goes on the machine falls on both alike. The benchmark's time
// holds both sides and the set-up: run it with -benchtime 2s or more. ns/op is fastpath's
// time per frame taken (pkt/s its inverse), hand-ns/pkt and hand-pkt/s
// the hand-built side's; x-hand is fastpath's packets per second over the
// hand-built side's. p99-µs and hand-p99-µs are the 99th percentile of the
// one-way latency of frames sent one every 50 µs from a packet socket.
//
//   - afxdp: fastpath's side is the veth attached by its hook as an afxdp
//     claim's (moved, renamed, MTU, MAC, address, up, xsk-redirect attached
//     natively from the pin Prepare made), the consumer's AF_XDP socket
//     registered in the XSKMAP fastpath pinned. By hand: the veth moved and
//     set up with netlink calls of the benchmark's own, an XSKMAP made
//     here and the least redirect program, written with cilium/ebpf/asm,
//     attached natively.
//   - udp: the veth attached by fastpath's hook as a netdev claim's, or
//     moved by hand, and a UDP socket in the pod. The hand-built side is
//     the kernel's UDP path, which AF_XDP is to beat.
//   - memif: see benchMemif.
//   - macvlan: the veth's end stays in the host as a shared device's
//     parent; fastpath's hook makes a macvlan of it in the pod (a claim in
//     mode macvlan), or one netlink call of the benchmark's own does,
//     addressed and set up in the pod; a UDP socket on it.
//
// The veth's NAPI takes the generator's frames: the XDP program on the
// pod's end runs it for AF_XDP; for the others, GRO is turned on on the
// veth end that receives (as a NIC's driver always has NAPI).
//
// The consumer is the same on both sides (bpf/xsk's socket, 2,048 frames,
// copy mode as veth offers; recvmmsg of 64 frames): what differs is what
// fastpath set up.
func BenchmarkDatapath(b *testing.B) {
	type setup func(b *testing.B, podNS string, pod netlink.Link) receiver
	for _, p := range []struct {
		name           string
		fastpath, hand setup
	}{
		{"afxdp", afxdpByFastpath, afxdpByHand},
		{"udp", udpByFastpath, udpByHand},
		{"macvlan", macvlanByFastpath, macvlanByHand},
	} {
		b.Run(p.name, func(b *testing.B) {
			gen := genProgram(b)
			var sides [2]*datapathSide
			for i, f := range []setup{p.fastpath, p.hand} {
				podNS := netnstest.New(b, fmt.Sprintf("%s-%d-%d", benchPrefix, os.Getpid(), i))
				host, pod := fmt.Sprintf("%s%db", benchPrefix, i+2), fmt.Sprintf("%s%da", benchPrefix, i+2)
				l := netnstest.Veth(b, pod, host)
				rx := f(b, podNS, l)
				sides[i] = &datapathSide{rx: rx, tx: newBlaster(b, host), gen: newGenerator(b, gen, host)}
			}
			b.ResetTimer()
			turns(b, sides)
			fast, hand := sides[0], sides[1]
			b.ReportMetric(fast.elapsed.Seconds()*1e9/float64(fast.got), "ns/op")
			b.ReportMetric(float64(fast.got)/fast.elapsed.Seconds(), "pkt/s")
			b.ReportMetric(hand.elapsed.Seconds()*1e9/float64(hand.got), "hand-ns/pkt")
			b.ReportMetric(float64(hand.got)/hand.elapsed.Seconds(), "hand-pkt/s")
			b.ReportMetric((float64(fast.got)/fast.elapsed.Seconds())/(float64(hand.got)/hand.elapsed.Seconds()), "x-hand")
			b.ReportMetric(latencyP99(b, fast.tx, fast.rx), "p99-µs")
			b.ReportMetric(latencyP99(b, hand.tx, hand.rx), "hand-p99-µs")
		})
	}
	b.Run("memif", benchMemif)
}

// datapathSide is one side of a BenchmarkDatapath pair: its consumer, its
// senders, and what its rounds took.
type datapathSide struct {
	rx      receiver
	tx      *blaster
	gen     *generator
	got     int
	elapsed time.Duration
}

// datapathRound is how many frames a side takes in one turn.
const datapathRound = 20_000

// turns floods each side in turn, datapathRound frames a turn (fewer for
// a small b.N), until each took b.N. The side that goes first alternates
// (A B, B A, ...), so that neither is always the one that follows the
// other.
func turns(b *testing.B, sides [2]*datapathSide) {
	b.Helper()
	for round, left := 0, b.N; left > 0; round, left = round+1, left-datapathRound {
		n := min(left, datapathRound)
		order := []*datapathSide{sides[0], sides[1]}
		if round%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, s := range order {
			elapsed, err := throughput(s.gen, s.rx, n)
			if err != nil {
				b.Fatal(err)
			}
			s.got += n
			s.elapsed += elapsed
		}
	}
}

// receiver takes what arrived for the pod without waiting, passing each
// frame's UDP payload to each (if not nil), and says how many there were.
type receiver interface {
	take(each func(payload []byte)) (int, error)
	// ifName is the pod's end of the veth, in the pod.
	ifName() string
}

// udpPayload is where a frame of udpFrame carries its UDP payload.
const udpPayload = 14 + 20 + 8

type xskReceiver struct {
	sock *xsk.Socket
	name string
}

func (r xskReceiver) ifName() string { return r.name }

func (r xskReceiver) take(each func([]byte)) (int, error) {
	if each == nil {
		return r.sock.Take(nil), nil
	}
	return r.sock.Take(func(frame []byte) {
		if len(frame) > udpPayload {
			each(frame[udpPayload:])
		}
	}), nil
}

// openXSK opens the consumer's AF_XDP socket on the pod's net1, queue 0,
// in the pod's namespace, and registers it in xsks.
func openXSK(b *testing.B, podNS, ifName string, xsks *ebpf.Map) receiver {
	b.Helper()
	var sock *xsk.Socket
	netnstest.Do(b, podNS, func() {
		ifc, err := net.InterfaceByName(ifName)
		if err != nil {
			b.Fatal(err)
		}
		if sock, err = xsk.Open(xsk.Options{Ifindex: ifc.Index, Queue: 0, Ring: 2048}); err != nil {
			b.Fatal(err)
		}
	})
	b.Cleanup(func() { _ = sock.Close() })
	if err := sock.Register(xsks, 0); err != nil {
		b.Fatal(err)
	}
	return xskReceiver{sock, ifName}
}

// afxdpByFastpath attaches pod as Prepare and the runtime hook do for an
// afxdp claim, and opens the consumer on the XSKMAP pinned for it.
func afxdpByFastpath(b *testing.B, podNS string, pod netlink.Link) receiver {
	dir := pinXSKRedirect(b)
	nd := benchNetdev(pod)
	nd.XDP = &dataplane.XDP{Dir: dir, Mode: bpf.Native}
	attachByFastpath(b, podNS, nd)
	pinned, err := bpf.LoadPinned(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pinned.Close() })
	return openXSK(b, podNS, nd.Name, pinned.XSKMap())
}

// attachByFastpath runs the hook's attach of nd into podNS, and its
// detach when the benchmark ends.
func attachByFastpath(b *testing.B, podNS string, nd dataplane.Netdev) {
	b.Helper()
	a := benchAttacher(b)
	ctx := klog.NewContext(b.Context(), logr.Discard())
	if _, err := a.Attach(ctx, podNS, nd); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = a.Detach(context.WithoutCancel(ctx), podNS, nd) })
}

// afxdpByHand moves pod and sets it up with netlink, and attaches the
// least redirect program, with an XSKMAP of its own, natively.
func afxdpByHand(b *testing.B, podNS string, pod netlink.Link) receiver {
	moveByHand(b, podNS, pod)
	xsks, err := ebpf.NewMap(&ebpf.MapSpec{Name: "hand_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: 64})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = xsks.Close() })
	prog := minRedirectProgram(b, "hand_redirect", xsks)
	name := pod.Attrs().Name
	netnstest.Do(b, podNS, func() {
		l, err := netlink.LinkByName(name)
		if err != nil {
			b.Fatal(err)
		}
		xl, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: l.Attrs().Index, Flags: link.XDPDriverMode})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = xl.Close() })
	})
	return openXSK(b, podNS, name, xsks)
}

// moveByHand is the floor's move of pod into podNS (MTU, MAC, address,
// up), moved back when the benchmark ends.
func moveByHand(b *testing.B, podNS string, pod netlink.Link) {
	b.Helper()
	ns, err := netns.GetFromPath(podNS)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ns.Close() })
	in, out := floorRoundTrip(b, ns, pod)
	in()
	b.Cleanup(out)
}

type udpReceiver struct {
	name string
	fd   int
	msgs []mmsghdr
	iovs []unix.Iovec
	bufs [][]byte
}

func (r *udpReceiver) ifName() string { return r.name }

func (r *udpReceiver) take(each func([]byte)) (int, error) {
	n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(r.fd), uintptr(unsafe.Pointer(&r.msgs[0])), uintptr(len(r.msgs)), unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EAGAIN || e == unix.EINTR {
		return 0, nil
	}
	if e != 0 {
		return 0, e
	}
	if each != nil {
		for i := range int(n) {
			each(r.bufs[i][:r.msgs[i].len])
		}
	}
	return int(n), nil
}

// openUDP opens the consumer's UDP socket on the pod's address, port 9000,
// in podNS, with a receive buffer of 4 MiB.
func openUDP(b *testing.B, podNS, ifName string) receiver {
	b.Helper()
	r := &udpReceiver{name: ifName, fd: -1}
	netnstest.Do(b, podNS, func() {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		r.fd = fd
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20); err != nil {
			b.Fatal(err)
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: 9000, Addr: [4]byte{10, 90, 0, 2}}); err != nil {
			b.Fatal(err)
		}
	})
	b.Cleanup(func() { _ = unix.Close(r.fd) })
	r.msgs, r.iovs, r.bufs = make([]mmsghdr, 64), make([]unix.Iovec, 64), make([][]byte, 64)
	for i := range r.msgs {
		r.bufs[i] = make([]byte, 2048)
		r.iovs[i].Base = &r.bufs[i][0]
		r.iovs[i].SetLen(len(r.bufs[i]))
		r.msgs[i].hdr.Iov = &r.iovs[i]
		r.msgs[i].hdr.Iovlen = 1
	}
	return r
}

func udpByFastpath(b *testing.B, podNS string, pod netlink.Link) receiver {
	nd := benchNetdev(pod)
	attachByFastpath(b, podNS, nd)
	setGRO(b, podNS, nd.Name)
	return openUDP(b, podNS, nd.Name)
}

func udpByHand(b *testing.B, podNS string, pod netlink.Link) receiver {
	moveByHand(b, podNS, pod)
	setGRO(b, podNS, pod.Attrs().Name)
	return openUDP(b, podNS, pod.Attrs().Name)
}

// sharedParentUp readies the pod's end of the veth as a shared device's
// parent: in the host, up, GRO on.
func sharedParentUp(b *testing.B, parent netlink.Link) {
	b.Helper()
	if err := netlink.LinkSetUp(parent); err != nil {
		b.Fatal(err)
	}
	setGRO(b, "", parent.Attrs().Name)
}

// datapathMAC and datapathAddr are the pod's interface's, which udpFrame
// is sent to.
const (
	datapathMAC  = "02:00:00:be:0c:01"
	datapathAddr = "10.90.0.2/24"
)

func macvlanByFastpath(b *testing.B, podNS string, parent netlink.Link) receiver {
	sharedParentUp(b, parent)
	sub := dataplane.SubInterface{Parent: parent.Attrs().Name, Kind: dataplane.KindMacvlan, Mode: "bridge", Name: "net1",
		MTU: 1500, MAC: datapathMAC, Addresses: []string{datapathAddr}}
	a := benchAttacher(b)
	ctx := klog.NewContext(b.Context(), logr.Discard())
	if _, err := a.AttachShared(ctx, podNS, sub); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = a.DetachShared(context.WithoutCancel(ctx), podNS, sub) })
	return openUDP(b, podNS, sub.Name)
}

func macvlanByHand(b *testing.B, podNS string, parent netlink.Link) receiver {
	sharedParentUp(b, parent)
	ns, err := netns.GetFromPath(podNS)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = ns.Close() }()
	mac, _ := net.ParseMAC(datapathMAC)
	if err := netlink.LinkAdd(&netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "net1", ParentIndex: parent.Attrs().Index,
		MTU: 1500, HardwareAddr: mac, Namespace: netlink.NsFd(ns)}, Mode: netlink.MACVLAN_MODE_BRIDGE}); err != nil {
		b.Fatal(err)
	}
	pod, err := netlink.NewHandleAt(ns)
	if err != nil {
		b.Fatal(err)
	}
	defer pod.Close()
	l, err := pod.LinkByName("net1")
	if err != nil {
		b.Fatal(err)
	}
	addr, _ := netlink.ParseAddr(datapathAddr)
	for _, step := range []error{pod.AddrAdd(l, addr), pod.LinkSetUp(l)} {
		if step != nil {
			b.Fatal(step)
		}
	}
	return openUDP(b, podNS, "net1")
}

// mmsghdr is struct mmsghdr of recvmmsg(2).
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// blaster sends stamped copies of udpFrame out of a host link through a
// packet socket that bypasses the qdisc.
type blaster struct {
	fd    int
	frame []byte
	start time.Time // the clock of the frames' timestamps
}

func newBlaster(b *testing.B, ifName string) *blaster {
	b.Helper()
	l, err := netlink.LinkByName(ifName)
	if err != nil {
		b.Fatal(err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		b.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = unix.Close(fd) })
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
		b.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: l.Attrs().Index, Protocol: htons(unix.ETH_P_IP)}); err != nil {
		b.Fatal(err)
	}
	x := &blaster{fd: fd, frame: udpFrame(), start: time.Now()}
	copy(x.frame[6:12], l.Attrs().HardwareAddr)
	// The pod's end must be up before anything it is sent counts.
	if err := pollUntil(5*time.Second, func() bool {
		l, err := netlink.LinkByName(ifName)
		return err == nil && l.Attrs().OperState == netlink.OperUp
	}); err != nil {
		b.Fatalf("%s: %v", ifName, err)
	}
	return x
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// stamped sends one frame carrying the time since x.start, in ns.
func (x *blaster) stamped() error {
	binary.LittleEndian.PutUint64(x.frame[udpPayload:], uint64(time.Since(x.start)))
	_, err := unix.Write(x.fd, x.frame)
	if errors.Is(err, unix.ENOBUFS) {
		return nil
	}
	return err
}

// generator sends udpFrame out of a host link from the kernel: an XDP
// program that returns XDP_TX, run in live-frames mode with the link as
// its ingress device, so that each run transmits the frame to the link's
// peer (veth's ndo_xdp_xmit).
type generator struct {
	prog *ebpf.Program
	opts ebpf.RunOptions
}

// genRepeat is how many frames one run of the generator sends: enough
// that the system call's own cost vanishes, few enough that a run ends
// soon after the consumer has what it wanted.
const genRepeat = 4096

// bpfTestXDPLiveFrames is BPF_F_TEST_XDP_LIVE_FRAMES.
const bpfTestXDPLiveFrames = 1 << 1

// xdpMD is struct xdp_md, the context of an XDP program's test run.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// genProgram is the generator's program: XDP_TX.
func genProgram(b *testing.B) *ebpf.Program {
	b.Helper()
	prog := newXDPProgram(b, "gen_tx", asm.Instructions{
		asm.Mov.Imm(asm.R0, xdpTX),
		asm.Return(),
	})
	// Each test run puts its program in the kernel's XDP dispatcher and
	// takes it out after, each time waiting for an RCU grace period,
	// unless the program is there already: attached to a link. A spare
	// veth holds it, down, so that a run costs its frames alone.
	spare := netnstest.Veth(b, benchPrefix+"1a", benchPrefix+"1b")
	xl, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: spare.Attrs().Index, Flags: link.XDPDriverMode})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = xl.Close() })
	return prog
}

// newGenerator is a generator of udpFrame out of the host link ifName,
// running prog (genProgram).
func newGenerator(b *testing.B, prog *ebpf.Program, ifName string) *generator {
	b.Helper()
	l, err := netlink.LinkByName(ifName)
	if err != nil {
		b.Fatal(err)
	}
	frame := udpFrame()
	copy(frame[6:12], l.Attrs().HardwareAddr)
	return &generator{prog: prog, opts: ebpf.RunOptions{
		Data: frame, Repeat: genRepeat, Flags: bpfTestXDPLiveFrames,
		Context: xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(l.Attrs().Index)},
	}}
}

// flood runs the generator on a thread of its own until stop is closed.
func (g *generator) flood(stop <-chan struct{}) <-chan error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if _, err := g.prog.Run(&g.opts); err != nil {
				done <- fmt.Errorf("run the generator in live-frames mode: %w", err)
				return
			}
		}
	}()
	return done
}

// setGRO turns GRO on for the veth end name, in podNS ("": the host's),
// so that its NAPI runs without an XDP program.
func setGRO(b *testing.B, podNS, name string) {
	b.Helper()
	set := func() {
		e, err := ethtool.NewEthtool()
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		if err := e.Change(name, map[string]bool{"rx-gro": true}); err != nil {
			b.Fatalf("GRO on %s: %v", name, err)
		}
	}
	if podNS == "" {
		set()
		return
	}
	netnstest.Do(b, podNS, set)
}

// pollUntil polls cond every millisecond until it holds or timeout passes.
func pollUntil(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("not so after " + timeout.String())
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// stall is how long the consumer may see nothing while the generator
// runs before the benchmark fails.
const stall = 5 * time.Second

// throughput floods the pod and returns how long its consumer took to take
// n frames, from its first.
func throughput(tx *generator, rx receiver, n int) (time.Duration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	stop := make(chan struct{})
	done := tx.flood(stop)
	take := func(want int) error {
		got, last := 0, time.Now()
		for got < want {
			k, err := rx.take(nil)
			if err != nil {
				return err
			}
			if k == 0 {
				if time.Since(last) > stall {
					return fmt.Errorf("the consumer took %d of %d frames and nothing for %s", got, want, stall)
				}
				continue
			}
			got, last = got+k, time.Now()
		}
		return nil
	}
	// The first frame: the path works, and the kernel's queues are warm.
	err := take(1)
	t0 := time.Now()
	if err == nil {
		err = take(n)
	}
	elapsed := time.Since(t0)
	close(stop)
	if ferr := <-done; err == nil {
		err = ferr
	}
	drain(rx)
	return elapsed, err
}

// drain takes what is left in the pod's queues.
func drain(rx receiver) {
	_ = pollUntil(100*time.Millisecond, func() bool {
		n, err := rx.take(nil)
		return n == 0 && err == nil
	})
}

// latencySamples frames are sent, one every latencyGap, for latencyP99.
const (
	latencySamples = 1000
	latencyGap     = 50 * time.Microsecond
)

// latencyP99 sends latencySamples stamped frames at a fixed rate and
// returns the 99th percentile of their one-way latency, in µs, as the
// consumer spinning on the pod's side sees it.
func latencyP99(b *testing.B, tx *blaster, rx receiver) float64 {
	b.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var sent atomic.Bool
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer sent.Store(true)
		// A sleep between frames, not a spin: the CPU is free for the
		// softirq and the consumer, as when a pod's peer sends.
		gap := unix.NsecToTimespec(latencyGap.Nanoseconds())
		for range latencySamples {
			if err := tx.stamped(); err != nil {
				errc <- err
				return
			}
			_ = unix.Nanosleep(&gap, nil)
		}
		errc <- nil
	}()
	lat := make([]time.Duration, 0, latencySamples)
	record := func(p []byte) {
		if len(p) >= 8 {
			lat = append(lat, time.Since(tx.start)-time.Duration(binary.LittleEndian.Uint64(p)))
		}
	}
	var last time.Time
	for len(lat) < latencySamples {
		if _, err := rx.take(record); err != nil {
			b.Fatal(err)
		}
		if sent.Load() {
			if last.IsZero() {
				last = time.Now()
			} else if time.Since(last) > 100*time.Millisecond {
				break // the rest was dropped
			}
		}
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	// A consumer the machine's other work keeps off its CPU for longer
	// than its queue holds loses frames; the path is broken only when
	// most are lost.
	if len(lat) < latencySamples/10 {
		b.Fatalf("%d of %d frames sent at %s intervals arrived", len(lat), latencySamples, latencyGap)
	}
	slices.Sort(lat)
	return float64(lat[len(lat)*99/100]) / float64(time.Microsecond)
}
