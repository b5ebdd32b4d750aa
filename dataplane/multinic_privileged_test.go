//go:build privileged

package dataplane

import (
	"net"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"k8s.io/klog/v2/ktesting"
)

// TestAttachMultiNIC: two interfaces of one pod on one subnet, each with
// the source address routed out of itself by a rule and a table of its
// own, arp_ignore and arp_announce set, a static neighbour on the first,
// and a route on the second that only its table holds. InPod holds once
// attached, and not with a rule missing; Detach removes the rules and
// returns both interfaces, whose sysctls the host has at its defaults.
// (The VRF: TestSRIOVAttachVRF, in the VM: this kernel has none.)
func TestAttachMultiNIC(t *testing.T) {
	requireRoot(t)
	_, ctx := ktesting.NewTestContext(t)
	podNS := newNetNS(t)
	a := newAttacher(t)
	one := func(name string) Netdev {
		_, host := newVeth(t)
		return Netdev{HostName: host.Attrs().Name, HostMTU: host.Attrs().MTU, HostMAC: host.Attrs().HardwareAddr.String(), Name: name}
	}
	mark := uint32(7)
	n1, n2 := one("net1"), one("net2")
	n1.Addresses = []string{"10.70.0.2/24"}
	n1.Routes = []Route{{Destination: "10.70.0.0/24", Source: "10.70.0.2", Scope: "link", Table: 101}, {Destination: "10.71.0.0/16", Gateway: "10.70.0.1", Table: 101, Metric: 20}}
	n1.Rules = []Rule{{Priority: 101, From: "10.70.0.2/32", Table: 101}, {Priority: 110, OIF: "net1", FWMark: &mark, Table: 101}}
	n1.Sysctls = map[string]string{"ipv4.arp_ignore": "1", "ipv4.arp_announce": "2"}
	n1.Neighbors = []Neighbor{{Address: "10.70.0.9", MAC: "02:00:00:00:70:09"}}
	n2.Addresses = []string{"10.70.0.3/24"}
	n2.Routes = []Route{{Destination: "10.70.0.0/24", Source: "10.70.0.3", Scope: "link", Table: 202}, {Destination: "10.72.0.0/16", Gateway: "10.70.0.1", Table: 202}}
	n2.Rules = []Rule{{Priority: 102, From: "10.70.0.3/32", Table: 202}}
	n2.Sysctls = map[string]string{"ipv4.arp_ignore": "1"}

	for _, nd := range []Netdev{n1, n2} {
		for i := range 2 { // a retried hook completes, changing nothing
			if _, err := a.Attach(ctx, podNS, nd); err != nil {
				t.Fatalf("attach %s #%d: %v", nd.Name, i+1, err)
			}
		}
		if ok, err := a.InPod(podNS, nd); !ok || err != nil {
			t.Errorf("InPod(%s) = %v, %v once attached", nd.Name, ok, err)
		}
	}
	ns, pod, err := podHandle(podNS)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { pod.Close(); _ = ns.Close() }()
	rules, _ := pod.RuleList(netlink.FAMILY_V4)
	var rs []string
	for _, r := range rules {
		if r.Table == 101 {
			rs = append(rs, r.String())
		}
	}
	if len(rs) != 2 {
		t.Errorf("rules of table 101: %v, want the source rule and the mark rule", rs)
	}
	table, _ := pod.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: 101}, netlink.RT_FILTER_TABLE)
	if len(table) != 2 || !table[0].Src.Equal(net.ParseIP("10.70.0.2")) && !table[1].Src.Equal(net.ParseIP("10.70.0.2")) {
		t.Errorf("table 101: %+v, want the link route from 10.70.0.2 and the route via 10.70.0.1", table)
	}
	blue, _ := pod.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: 202}, netlink.RT_FILTER_TABLE)
	main, _ := pod.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: 254}, netlink.RT_FILTER_TABLE)
	has := func(routes []netlink.Route, dst string) bool {
		for _, r := range routes {
			if r.Dst != nil && r.Dst.String() == dst {
				return true
			}
		}
		return false
	}
	if !has(blue, "10.72.0.0/16") || has(main, "10.72.0.0/16") {
		t.Errorf("10.72.0.0/16 in table 202 %v, in main %v: want only in net2's table", has(blue, "10.72.0.0/16"), has(main, "10.72.0.0/16"))
	}
	if ok, err := sysctlsSet(podNS, "net1", n1.Sysctls); !ok || err != nil {
		t.Errorf("net1's sysctls in the pod: %v, %v", ok, err)
	}
	l1, _ := pod.LinkByName("net1")
	neighs, _ := pod.NeighList(l1.Attrs().Index, netlink.FAMILY_V4)
	if len(neighs) == 0 || neighs[0].State != netlink.NUD_PERMANENT || neighs[0].HardwareAddr.String() != "02:00:00:00:70:09" {
		t.Errorf("net1's neighbours: %+v", neighs)
	}

	// Half-done: a rule missing is not attached.
	if err := pod.RuleDel(mustRules(t, n1.Rules[0])[0]); err != nil {
		t.Fatal(err)
	}
	if ok, _ := a.InPod(podNS, n1); ok {
		t.Error("InPod with a rule missing")
	}

	for _, nd := range []Netdev{n1, n2} {
		if err := a.Detach(ctx, podNS, nd); err != nil {
			t.Fatalf("detach %s: %v", nd.Name, err)
		}
		assertRestored(t, nd, podNS)
		data, err := os.ReadFile("/proc/sys/net/ipv4/conf/" + nd.HostName + "/arp_ignore")
		if err != nil || strings.TrimSpace(string(data)) != "0" {
			t.Errorf("%s's arp_ignore in the host: %q, %v; want the default 0", nd.HostName, data, err)
		}
	}
	rules, _ = pod.RuleList(netlink.FAMILY_V4)
	for _, r := range rules {
		if r.Table == 101 || r.Table == 202 {
			t.Errorf("rule %s is left in the pod", r)
		}
	}
}

func mustRules(t *testing.T, r Rule) []*netlink.Rule {
	t.Helper()
	nrs, err := podRules(r)
	if err != nil {
		t.Fatal(err)
	}
	return nrs
}

// TestOffloads: a veth's GRO feature (by its legacy name) and GSO/GRO
// sizes above 64 KiB (BIG TCP) read, set, and set back; a feature the
// device lacks, a fixed one, private flags of a driver without any, and a
// GSO size above the device's TSO maximum are errors naming them.
func TestOffloads(t *testing.T) {
	requireRoot(t)
	name, _ := newVeth(t)
	want := Offloads{Features: map[string]bool{"generic-receive-offload": true}, GSOMaxSize: 131072, GROMaxSize: 131072}
	before, err := ReadOffloads(name, want)
	if err != nil {
		t.Fatal(err)
	}
	if before.Features["rx-gro"] || before.GSOMaxSize != 65536 || before.GROMaxSize != 65536 {
		t.Fatalf("before: %+v, want GRO off and 64 KiB sizes (a new veth's)", before)
	}
	if err := ApplyOffloads(name, want); err != nil {
		t.Fatal(err)
	}
	now, err := ReadOffloads(name, want)
	if err != nil || !now.Features["rx-gro"] || now.GSOMaxSize != 131072 || now.GROMaxSize != 131072 {
		t.Errorf("after: %+v, %v", now, err)
	}
	if err := ApplyOffloads(name, before); err != nil {
		t.Fatal(err)
	}
	if again, _ := ReadOffloads(name, want); again.Features["rx-gro"] || again.GSOMaxSize != 65536 {
		t.Errorf("restored: %+v, want %+v", again, before)
	}
	for what, tc := range map[string]struct {
		o    Offloads
		want string
	}{
		"unknown feature": {Offloads{Features: map[string]bool{"rx-warp-drive": true}}, `has no ethtool feature "rx-warp-drive"`},
		"fixed feature":   {Offloads{Features: map[string]bool{"large-receive-offload": true}}, "ethtool feature rx-lro of " + name + " is fixed off by its driver"},
		"private flag":    {Offloads{PrivateFlags: map[string]bool{"link-down-on-close": true}}, "has no private flags: its driver has none"},
		"gso above tso":   {Offloads{GSOMaxSize: 600000}, "gsoMaxSize 600000: " + name + " segments at most 524280 bytes"},
	} {
		if _, err := ReadOffloads(name, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", what, err, tc.want)
		}
	}
}
