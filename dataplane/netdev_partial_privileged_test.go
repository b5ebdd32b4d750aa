//go:build privileged

package dataplane

import (
	"errors"
	"net"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"
)

// TestAttachPartialMoveUndone: the kernel applies an RTM_NEWLINK's
// attributes one after another, so a MAC refused after the move leaves the
// interface in the pod. Attach brings it back as it was. (A multicast MAC
// is refused by any Ethernet driver; on real VFs, a PF's administratively
// set MAC makes the VF refuse the pod's: vf_sriov_test.go.)
func TestAttachPartialMoveUndone(t *testing.T) {
	requireRoot(t)
	_, ctx := ktesting.NewTestContext(t)
	podNS := newNetNS(t)
	_, host := newVeth(t)
	a := newAttacher(t)
	if err := netlink.LinkSetUp(host); err != nil {
		t.Fatal(err)
	}
	nd := testNetdev(host)
	nd.MAC = "03:00:00:aa:bb:01"
	_, err := a.Attach(ctx, podNS, nd)
	if !errors.Is(err, unix.EADDRNOTAVAIL) {
		t.Fatalf("attach with a multicast MAC: %v, want EADDRNOTAVAIL", err)
	}
	t.Log(err)
	assertRestored(t, nd, podNS)
	if l, err := netlink.LinkByName(nd.HostName); err != nil || l.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("%s is not up again after the failed attach: %v", nd.HostName, err)
	}
}
