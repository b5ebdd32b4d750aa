//go:build sriov

package dataplane

import (
	"net"
	"testing"

	"github.com/vishvananda/netlink"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/test/sriovtest"
)

// TestSRIOVShared makes the sub-interfaces this machine's kernel lacks on
// the igb PF and one of its VFs: ipvlan in every mode and vlan (802.1Q and
// 802.1ad), each in a pod's namespace with one request, addressed, up and
// deleted, the parent unchanged.
func TestSRIOVShared(t *testing.T) {
	sriovtest.Modprobe(t, "8021q", "ipvlan")
	pf, vf := sriovVF(t, 0)
	vfName := sriovtest.Netdev(vf.Address)
	if vfName == "" {
		t.Fatalf("VF %s has no netdev", vf.Address)
	}
	_, ctx := ktesting.NewTestContext(t)
	a := attacher(t)
	for _, parent := range []string{pf.Name, vfName} {
		if err := netlink.LinkSetUp(linkByName(t, parent)); err != nil {
			t.Fatal(err)
		}
		before := linkByName(t, parent).Attrs()
		for _, tc := range []struct {
			name string
			s    SubInterface
			ok   func(netlink.Link) bool
		}{
			{"ipvlan l2", SubInterface{Kind: KindIPVLAN, Mode: "l2"}, ipvlanIn(netlink.IPVLAN_MODE_L2)},
			{"ipvlan l3", SubInterface{Kind: KindIPVLAN, Mode: "l3"}, ipvlanIn(netlink.IPVLAN_MODE_L3)},
			{"ipvlan l3s", SubInterface{Kind: KindIPVLAN, Mode: "l3s"}, ipvlanIn(netlink.IPVLAN_MODE_L3S)},
			{"vlan 802.1q", SubInterface{Kind: KindVLAN, VLANID: 100, VLANProto: "802.1q", MTU: 1496}, func(l netlink.Link) bool {
				v, ok := l.(*netlink.Vlan)
				return ok && v.VlanId == 100 && v.VlanProtocol == netlink.VLAN_PROTOCOL_8021Q && l.Attrs().MTU == 1496
			}},
			{"vlan 802.1ad", SubInterface{Kind: KindVLAN, VLANID: 200, VLANProto: "802.1ad"}, func(l netlink.Link) bool {
				v, ok := l.(*netlink.Vlan)
				return ok && v.VlanId == 200 && v.VlanProtocol == netlink.VLAN_PROTOCOL_8021AD
			}},
		} {
			t.Run(parent+" "+tc.name, func(t *testing.T) {
				pod := sriovNetNS(t)
				s := tc.s
				s.Parent, s.Name, s.Alias, s.Addresses = parent, "net1", "fastpath-test/"+tc.name, []string{"10.77.0.2/24"}
				res, err := a.AttachShared(ctx, pod, s)
				if err != nil {
					t.Fatal(err)
				}
				if res.Name != "net1" {
					t.Errorf("attached = %+v", res)
				}
				l, h := vfInPod(t, pod, "net1")
				if l == nil || !tc.ok(l) || l.Attrs().Flags&net.FlagUp == 0 || l.Attrs().Alias != s.Alias {
					t.Fatalf("net1 in the pod = %T %+v", l, l)
				}
				if addrs, _ := h.AddrList(l, netlink.FAMILY_V4); len(addrs) != 1 || addrs[0].IPNet.String() != "10.77.0.2/24" {
					t.Errorf("addresses = %v", addrs)
				}
				if err := a.DetachShared(ctx, pod, s); err != nil {
					t.Fatal(err)
				}
				if l, _ := vfInPod(t, pod, "net1"); l != nil {
					t.Error("net1 still in the pod")
				}
				after := linkByName(t, parent).Attrs()
				if after.MTU != before.MTU || after.HardwareAddr.String() != before.HardwareAddr.String() || after.Flags&net.FlagUp == 0 {
					t.Errorf("parent %s changed: %+v, was %+v", parent, after, before)
				}
			})
		}
	}
}

func ipvlanIn(mode netlink.IPVlanMode) func(netlink.Link) bool {
	return func(l netlink.Link) bool {
		v, ok := l.(*netlink.IPVlan)
		return ok && v.Mode == mode
	}
}
