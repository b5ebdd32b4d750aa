//go:build privileged

package bpf_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/bpf"
	"github.com/fastpath-dra/fastpath/bpf/xsk"
	"github.com/fastpath-dra/fastpath/test/netnstest"
)

// The links and namespaces of these tests start with this prefix.
const prefix = "fpe"

// pair is a veth pair: a in one namespace (the "pod"), b in another.
type pair struct {
	nsA, nsB string
	a, b     string
	macA     net.HardwareAddr
}

var pairs = 0

func newPair(t *testing.T) pair {
	t.Helper()
	pairs++
	p := pair{
		nsA: netnstest.New(t, fmt.Sprintf("%s%da", prefix, pairs)), nsB: netnstest.New(t, fmt.Sprintf("%s%db", prefix, pairs)),
		a: fmt.Sprintf("%s%da", prefix, pairs), b: fmt.Sprintf("%s%db", prefix, pairs),
	}
	hA, err := netns.GetFromPath(p.nsA)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hA.Close() }()
	hB, err := netns.GetFromPath(p.nsB)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hB.Close() }()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: p.a, Namespace: netlink.NsFd(hA)}, PeerName: p.b, PeerNamespace: netlink.NsFd(hB)}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	for _, side := range []struct{ ns, name string }{{p.nsA, p.a}, {p.nsB, p.b}} {
		netnstest.Do(t, side.ns, func() {
			l, err := netlink.LinkByName(side.name)
			if err != nil {
				t.Fatal(err)
			}
			if err := netlink.LinkSetUp(l); err != nil {
				t.Fatal(err)
			}
			if side.name == p.a {
				p.macA = l.Attrs().HardwareAddr
			}
		})
	}
	return p
}

// send writes n Ethernet frames from b to a's MAC.
func (p pair) send(t *testing.T, n int) {
	t.Helper()
	netnstest.Do(t, p.nsB, func() {
		if err := netnstest.SendFrames(p.b, p.macA, n); err != nil {
			t.Fatal(err)
		}
	})
}

// loadPinned loads a program and pins it in a directory of a bpffs of the
// test's; the pins go when the test ends.
func loadPinned(t *testing.T, name string) (*bpf.Program, string) {
	t.Helper()
	dir := bpffs(t)
	prg, err := bpf.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prg.Close() })
	if err := prg.Pin(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bpf.Unpin(dir) })
	return prg, dir
}

// bpffs mounts a bpffs for the test and returns a directory in it.
func bpffs(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := bpf.MountBPFFS(root); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
	if err := bpf.MountBPFFS(root); err != nil { // already one: nothing to do
		t.Fatal(err)
	}
	return filepath.Join(root, "claim")
}

func attachedID(t *testing.T, ns, ifName string) int {
	t.Helper()
	id, err := bpf.Attached(ns, ifName)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestAttachModes: each program attaches in native and in generic mode,
// its counters move with traffic, and after Detach and Unpin nothing is
// attached or pinned, even though the loading process closed everything.
func TestAttachModes(t *testing.T) {
	for _, prog := range bpf.Programs {
		for _, mode := range []bpf.Mode{bpf.Native, bpf.Generic} {
			t.Run(prog+"/"+string(mode), func(t *testing.T) {
				p := newPair(t)
				dir := bpffs(t)
				loaded, err := bpf.Load(prog)
				if err != nil {
					t.Fatal(err)
				}
				if err := loaded.Pin(dir); err != nil {
					t.Fatal(err)
				}
				if err := loaded.Close(); err != nil {
					t.Fatal(err)
				}
				// What Prepare pinned, the hook opens again.
				prg, err := bpf.LoadPinned(dir)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = prg.Close() }()
				if prg.Name != prog {
					t.Errorf("pinned program is %q, want %q", prg.Name, prog)
				}
				used, err := prg.Attach(p.nsA, p.a, mode, false, dir)
				if err != nil {
					t.Fatal(err)
				}
				if used != mode || attachedID(t, p.nsA, p.a) == 0 {
					t.Fatalf("attached in %q (id %d), want %q", used, attachedID(t, p.nsA, p.a), mode)
				}
				if _, err := os.Stat(filepath.Join(dir, bpf.PinLink)); err != nil {
					t.Errorf("the attachment is not pinned: %v", err)
				}
				p.send(t, 5)
				st := pollStats(t, prg, func(s bpf.QueueStats) bool { return s.Packets >= 5 })
				if prog == bpf.XSKRedirect && (st.Passed < 5 || st.Redirected != 0) {
					t.Errorf("xsk-redirect without a socket: %+v, want every packet passed", st)
				}
				if prog == bpf.Count && st.Bytes < 5*60 {
					t.Errorf("xdp-count: %+v, want at least 300 bytes", st)
				}
				if err := bpf.Detach(dir); err != nil {
					t.Fatal(err)
				}
				if id := attachedID(t, p.nsA, p.a); id != 0 {
					t.Errorf("program %d still attached after Detach", id)
				}
				if err := bpf.Unpin(dir); err != nil {
					t.Fatal(err)
				}
				if _, err := os.Stat(dir); !os.IsNotExist(err) {
					t.Errorf("%s still there after Unpin: %v", dir, err)
				}
			})
		}
	}
}

func pollStats(t *testing.T, p *bpf.Program, done func(bpf.QueueStats) bool) bpf.QueueStats {
	t.Helper()
	var st bpf.QueueStats
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		var err error
		st, err = p.Stats(0)
		return err == nil && done(st), err
	})
	if err != nil {
		t.Fatalf("counters of queue 0 stayed at %+v: %v", st, err)
	}
	return st
}

// TestRedirectToSocket: with an AF_XDP socket registered for queue 0,
// xsk-redirect delivers the frames to it.
func TestRedirectToSocket(t *testing.T) {
	p := newPair(t)
	prg, dir := loadPinned(t, bpf.XSKRedirect)
	if _, err := prg.Attach(p.nsA, p.a, bpf.Native, false, dir); err != nil {
		t.Fatal(err)
	}
	var sock *xsk.Socket
	netnstest.Do(t, p.nsA, func() {
		ifc, err := net.InterfaceByName(p.a)
		if err != nil {
			t.Fatal(err)
		}
		if sock, err = xsk.Open(xsk.Options{Ifindex: ifc.Index, Queue: 0}); err != nil {
			t.Fatal(err)
		}
	})
	defer func() { _ = sock.Close() }()
	// The consumer's way: the XSKMAP as pinned.
	xsks, err := ebpf.LoadPinnedMap(filepath.Join(dir, bpf.PinXSKMap), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = xsks.Close() }()
	if err := sock.Register(xsks, 0); err != nil {
		t.Fatal(err)
	}
	const n = 10
	p.send(t, n)
	err = wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		_, err := sock.Receive(10 * time.Millisecond)
		return sock.Received() >= n, err
	})
	if err != nil {
		t.Fatalf("the socket received %d frames, want %d: %v", sock.Received(), n, err)
	}
	if st, err := prg.Stats(0); err != nil || st.Redirected < n {
		t.Errorf("counters = %+v (%v), want %d redirected", st, err, n)
	}
}

// TestAttachFailures: a failed attach leaves nothing attached or pinned;
// native mode on a device without native XDP fails with ErrNotSupported,
// and falls back to generic only when allowed.
func TestAttachFailures(t *testing.T) {
	p := newPair(t)
	prg, dir := loadPinned(t, bpf.Count)

	if _, err := prg.Attach(p.nsA, prefix+"-missing", bpf.Native, true, dir); err == nil {
		t.Error("attach to a missing interface: no error")
	}
	if _, err := prg.Attach(p.nsA, p.a, "turbo", true, dir); err == nil {
		t.Error("attach in an unknown mode: no error")
	}
	// Loopback has no native XDP.
	if _, err := prg.Attach(p.nsA, "lo", bpf.Native, false, dir); !errors.Is(err, bpf.ErrNotSupported) {
		t.Errorf("native attach to lo: %v, want ErrNotSupported", err)
	}
	if id := attachedID(t, p.nsA, "lo"); id != 0 {
		t.Errorf("program %d attached to lo after a failed attach", id)
	}
	if _, err := os.Stat(filepath.Join(dir, bpf.PinLink)); !os.IsNotExist(err) {
		t.Errorf("an attachment is pinned after failed attaches: %v", err)
	}
	used, err := prg.Attach(p.nsA, "lo", bpf.Native, true, dir)
	if err != nil || used != bpf.Generic {
		t.Fatalf("native attach to lo with fallback: %q, %v; want generic", used, err)
	}
	if err := bpf.Unpin(dir); err != nil {
		t.Fatal(err)
	}
	if id := attachedID(t, p.nsA, "lo"); id != 0 {
		t.Errorf("program %d still attached to lo after Unpin", id)
	}

	if s, err := xsk.Open(xsk.Options{Ifindex: 1 << 30}); err == nil {
		_ = s.Close()
		t.Error("AF_XDP socket on a missing interface: no error")
	}

	if _, err := bpf.Load("xdp-pwn"); !errors.Is(err, bpf.ErrUnknownProgram) {
		t.Errorf("Load of an unknown program: %v, want ErrUnknownProgram", err)
	}
}
