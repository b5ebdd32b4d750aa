//go:build sriov

package dataplane

import (
	"testing"

	"github.com/vishvananda/netlink"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/test/netnstest"
	"github.com/fastpath-dra/fastpath/test/sriovtest"
)

// TestSRIOVAttachVRF, in the VM (whose kernel has VRF devices): an
// interface attached with a VRF is enslaved to it in the pod, its
// connected route and a route of its own in the VRF's table and not in
// main; a retried attach changes nothing; Detach deletes the VRF and
// returns the interface unenslaved.
func TestSRIOVAttachVRF(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	podNS := sriovNetNS(t)
	a, err := NewAttacher()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close() }()
	host := netnstest.Veth(t, sriovtest.Prefix+"vrf0a", sriovtest.Prefix+"vrf0b")
	nd := Netdev{HostName: host.Attrs().Name, HostMTU: host.Attrs().MTU, HostMAC: host.Attrs().HardwareAddr.String(), Name: "net1",
		Addresses: []string{"10.73.0.2/24"}, VRF: &VRF{Name: "blue", Table: 303},
		Routes: []Route{{Destination: "10.74.0.0/16", Gateway: "10.73.0.1", Table: 303}}}
	for i := range 2 {
		if _, err := a.Attach(ctx, podNS, nd); err != nil {
			t.Fatalf("attach #%d: %v", i+1, err)
		}
	}
	if ok, err := a.InPod(podNS, nd); !ok || err != nil {
		t.Errorf("InPod = %v, %v once attached", ok, err)
	}
	ns, pod, err := podHandle(podNS)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { pod.Close(); _ = ns.Close() }()
	vrf, err := pod.LinkByName("blue")
	l, _ := pod.LinkByName("net1")
	if err != nil || l == nil || l.Attrs().MasterIndex != vrf.Attrs().Index {
		t.Fatalf("net1 is not enslaved to VRF blue: %v", err)
	}
	in := func(table int, dst string) bool {
		routes, _ := pod.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
		for _, r := range routes {
			if r.Dst != nil && r.Dst.String() == dst {
				return true
			}
		}
		return false
	}
	for _, dst := range []string{"10.73.0.0/24", "10.74.0.0/16"} {
		if !in(303, dst) || in(254, dst) {
			t.Errorf("%s in the VRF's table %v, in main %v: want in the VRF's alone", dst, in(303, dst), in(254, dst))
		}
	}
	if err := a.Detach(ctx, podNS, nd); err != nil {
		t.Fatal(err)
	}
	if _, err := pod.LinkByName("blue"); err == nil {
		t.Error("VRF blue is left in the pod")
	}
	back, err := netlink.LinkByName(nd.HostName)
	if err != nil || back.Attrs().MasterIndex != 0 {
		t.Errorf("%s is not back on the host unenslaved: %v", nd.HostName, err)
	}
}
