// Package netnstest creates named network namespaces for privileged tests
// and benchmarks. The calling goroutine stays in its own namespace.
package netnstest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// New creates the network namespace /run/netns/<name>, deleted when the
// test ends, and returns its path. It fails the test when not run as root.
func New(tb testing.TB, name string) string {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Fatal("this test creates network namespaces: run it as root")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = orig.Close() }()
	ns, err := netns.NewNamed(name)
	if err != nil {
		tb.Fatalf("create network namespace %s: %v", name, err)
	}
	_ = ns.Close()
	if err := netns.Set(orig); err != nil {
		// This thread is in the wrong namespace and must not run anything else.
		panic(fmt.Sprintf("cannot return to the original network namespace: %v", err))
	}
	tb.Cleanup(func() { _ = netns.DeleteNamed(name) })
	return filepath.Join("/run/netns", name)
}

// Do runs fn on a locked thread in the network namespace at path, and
// returns the thread to the caller's namespace.
func Do(tb testing.TB, path string, fn func()) {
	tb.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = orig.Close() }()
	h, err := netns.GetFromPath(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = h.Close() }()
	if err := netns.Set(h); err != nil {
		tb.Fatalf("enter network namespace %s: %v", path, err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			// This thread is in the wrong namespace and must not run anything else.
			panic(fmt.Sprintf("cannot return to the original network namespace: %v", err))
		}
	}()
	fn()
}

// SendFrames writes n minimal Ethernet frames (local experimental
// EtherType 0x88b5) to dst out of the interface ifName of the calling
// thread's network namespace.
func SendFrames(ifName string, dst net.HardwareAddr, n int) error {
	ifc, err := net.InterfaceByName(ifName)
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
	if err != nil {
		return fmt.Errorf("packet socket: %w", err)
	}
	defer func() { _ = unix.Close(fd) }()
	frame := make([]byte, 60)
	copy(frame[0:6], dst)
	copy(frame[6:12], ifc.HardwareAddr)
	frame[12], frame[13] = 0x88, 0xb5
	to := &unix.SockaddrLinklayer{Ifindex: ifc.Index, Halen: 6}
	copy(to.Addr[:], dst)
	for range n {
		if err := unix.Sendto(fd, frame, 0, to); err != nil {
			return fmt.Errorf("send a frame out of %s: %w", ifName, err)
		}
	}
	return nil
}

// Veth creates the veth pair name/peer (MTU 1500) in the caller's network
// namespace, deleted when the test ends wherever name went, and returns
// name's link.
func Veth(tb testing.TB, name, peer string) netlink.Link {
	tb.Helper()
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: 1500}, PeerName: peer}); err != nil {
		tb.Fatalf("create veth %s: %v", name, err)
	}
	tb.Cleanup(func() {
		for _, n := range []string{peer, name} {
			if l, err := netlink.LinkByName(n); err == nil {
				_ = netlink.LinkDel(l)
			}
		}
	})
	l, err := netlink.LinkByName(name)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}
