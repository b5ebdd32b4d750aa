//go:build privileged

package dataplane

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// LinkAddresses reads a parent's own addresses, both families, from the
// host (a veth standing in for a shared parent) and from another network
// namespace; a link that is not there has none.
func TestLinkAddresses(t *testing.T) {
	requireRoot(t)
	parent, host := newVeth(t)
	for _, a := range []string{"10.77.0.1/24", "fd00:77::1/64"} {
		addr, _ := netlink.ParseAddr(a)
		addr.Flags = 0x80 // IFA_F_NODAD
		if err := netlink.AddrAdd(host, addr); err != nil {
			t.Fatal(err)
		}
	}
	got, err := LinkAddresses(parent)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"10.77.0.1", "fd00:77::1"} {
		if !slices.Contains(got, netip.MustParseAddr(want)) {
			t.Errorf("addresses of %s = %v, want %s among them", parent, got, want)
		}
	}

	nsPath := newNetNS(t)
	other, _ := newVeth(t)
	ns, pod, err := podHandle(nsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { pod.Close(); _ = ns.Close() }()
	moveIntoPod(t, ns, pod, other, 0, "10.78.0.1/24")
	got, err = LinkAddressesAt(nsPath, other)
	if err != nil || !slices.Contains(got, netip.MustParseAddr("10.78.0.1")) || slices.Contains(got, netip.MustParseAddr("10.77.0.1")) {
		t.Errorf("addresses of %s in %s = %v, %v; want 10.78.0.1 and not the host's", other, nsPath, got, err)
	}
	if got, err := LinkAddresses(other); err != nil || len(got) != 0 {
		t.Errorf("addresses of %s, gone from the host = %v, %v; want none, no error", other, got, err)
	}
}

// LinkStatsAt reads a link's state and counters in another network
// namespace: frames sent to it from its peer on the host are counted; a
// link that is not there is an error naming it.
func TestLinkStatsAt(t *testing.T) {
	requireRoot(t)
	nsPath := newNetNS(t)
	name, _ := newVeth(t)
	ns, pod, err := podHandle(nsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { pod.Close(); _ = ns.Close() }()
	moveIntoPod(t, ns, pod, name, 1400)
	host, err := netlink.LinkByName(strings.TrimSuffix(name, "a") + "b")
	if err == nil {
		err = netlink.LinkSetUp(host)
	}
	if err != nil {
		t.Fatal(err)
	}
	before, err := LinkStatsAt(nsPath, name)
	if err != nil {
		t.Fatal(err)
	}
	if before.MTU != 1400 || before.MAC == "" {
		t.Errorf("stats of %s in %s = %+v, want MTU 1400 and its MAC", name, nsPath, before)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Close(fd) }()
	frame := make([]byte, 60)
	copy(frame, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	frame[12], frame[13] = 0x88, 0xb5
	addr := &unix.SockaddrLinklayer{Ifindex: host.Attrs().Index, Halen: 6, Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	for range 10 {
		if err := unix.Sendto(fd, frame, 0, addr); err != nil {
			t.Fatal(err)
		}
	}
	after, err := LinkStatsAt(nsPath, name)
	if err != nil || after.RxPackets < before.RxPackets+10 || after.OperState != "up" {
		t.Errorf("after 10 frames: %+v, %v; want 10 more received, the link up (before %+v)", after, err, before)
	}
	if _, err := LinkStatsAt(nsPath, "fp-absent0"); err == nil || !strings.Contains(err.Error(), "fp-absent0") {
		t.Errorf("a link not there: %v", err)
	}
}
