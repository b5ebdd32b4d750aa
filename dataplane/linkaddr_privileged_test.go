//go:build privileged

package dataplane

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
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
