//go:build privileged

package nldump

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/fastpath-dra/fastpath/test/netnstest"
)

// TestReadInterruptedDump reads a real address dump the kernel interrupts:
// 2000 addresses span several messages and another address comes and goes
// meanwhile, until the first read returns. The first read is interrupted
// (retried until one is: most are), and Read returns what a read without
// the change gives: every address once.
func TestReadInterruptedDump(t *testing.T) {
	path := netnstest.New(t, fmt.Sprintf("fpnd%d", os.Getpid()))
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	// The changes beside the dump, from a socket of their own.
	other, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "fpnda"}, PeerName: "fpndb"}); err != nil {
		t.Fatal(err)
	}
	link, err := h.LinkByName("fpnda")
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	for i := range n {
		ip := net.IPv4(10, 99, byte(i/250), byte(i%250+1))
		if err := h.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}}); err != nil {
			t.Fatal(err)
		}
	}
	churn := &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 98, 0, 1), Mask: net.CIDRMask(32, 32)}}
	for try := range 50 {
		reads := 0
		var firstErr error
		got, err := Read(func() ([]netlink.Addr, error) {
			reads++
			if reads > 1 {
				return h.AddrList(link, netlink.FAMILY_V4)
			}
			// The first read, with another address coming and going.
			stop, changing := make(chan struct{}), make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					_ = other.AddrAdd(link, churn)
					_ = other.AddrDel(link, churn)
					if i == 0 {
						close(changing)
					}
				}
			})
			<-changing
			out, err := h.AddrList(link, netlink.FAMILY_V4)
			close(stop)
			wg.Wait()
			firstErr = err
			return out, err
		})
		if !errors.Is(firstErr, netlink.ErrDumpInterrupted) {
			continue // not interrupted this time: again
		}
		if err != nil {
			t.Fatalf("Read after an interrupted dump: %v", err)
		}
		if reads != 2 {
			t.Errorf("Read read %d times, want 2 (an interrupted dump, then one undisturbed)", reads)
		}
		seen := map[string]bool{}
		for _, a := range got {
			if s := a.IP.String(); s != "10.98.0.1" {
				if seen[s] {
					t.Errorf("address %s twice", s)
				}
				seen[s] = true
			}
		}
		if len(seen) != n {
			t.Errorf("Read gave %d of the %d addresses", len(seen), n)
		}
		t.Logf("the dump was interrupted at try %d", try+1)
		return
	}
	t.Fatal("no address dump of 50 was interrupted by the changes beside it")
}
