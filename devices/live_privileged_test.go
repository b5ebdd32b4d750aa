//go:build privileged

package devices

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/test/netnstest"
)

// linkPrefix starts the names of the links these tests create.
const linkPrefix = "fpd"

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("privileged test: run as root (make privileged)")
	}
}

func addVeth(t *testing.T, name, peer string) {
	t.Helper()
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer}); err != nil {
		t.Fatalf("add veth %s: %v", name, err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
}

func byName(inv Inventory) map[string]Device {
	m := map[string]Device{}
	for _, d := range inv.Devices {
		m[d.Name] = d
	}
	return m
}

// TestLiveWatch runs discovery on this host: prefixed veths and a memif
// socket appear, change and disappear, and the watcher reports each change
// once (no two consecutive inventories are equal).
func TestLiveWatch(t *testing.T) {
	requireRoot(t)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a, b := fmt.Sprintf("%s%da", linkPrefix, os.Getpid()%100000), fmt.Sprintf("%s%db", linkPrefix, os.Getpid()%100000)
	memifDir := t.TempDir()
	d, err := New(Options{MemifDir: memifDir, Filter: fmt.Sprintf(
		`device.attributes["fastpath.dev"].kind == "memif" || (device.attributes["fastpath.dev"].kind == "netdev" && device.attributes["fastpath.dev"].ifName.startsWith(%q))`,
		linkPrefix), Compile: compileCEL})
	if err != nil {
		t.Fatal(err)
	}
	w := watch(t, ctx, d, 50*time.Millisecond)
	next := w.next
	next("the start", func(map[string]Device) bool { return true })

	addVeth(t, a, b)
	devs := next("the veths", func(m map[string]Device) bool { _, ok := m["netdev-"+a]; return ok })
	va := devs["netdev-"+a]
	if va.Kind != KindNetdev || va.Netdev.LinkType != "veth" || va.Netdev.Driver != "veth" || va.Netdev.MTU != 1500 || va.Netdev.MinMTU != 68 {
		t.Errorf("veth device = %+v", va.Netdev)
	}
	if va.Netdev.XDP.Supported == nil || !*va.Netdev.XDP.Supported || va.Netdev.XDP.ZeroCopy == nil || *va.Netdev.XDP.ZeroCopy {
		t.Errorf("veth XDP = %+v, want supported without zero-copy (the kernel's netdev family says so)", va.Netdev.XDP)
	}
	if attrs := va.Attributes(); attrs["xdp"].BoolValue == nil || !*attrs["xdp"].BoolValue {
		t.Errorf("xdp attribute = %+v", attrs["xdp"])
	}

	link, err := netlink.LinkByName(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetMTU(link, 9000); err != nil {
		t.Fatal(err)
	}
	next("the new MTU", func(m map[string]Device) bool {
		return m["netdev-"+a].Netdev != nil && m["netdev-"+a].Netdev.MTU == 9000
	})

	l, err := net.Listen("unixpacket", filepath.Join(memifDir, "vpp0.sock"))
	if err != nil {
		t.Fatal(err)
	}
	devs = next("the memif socket", func(m map[string]Device) bool { _, ok := m["memif-vpp0"]; return ok })
	if m := devs["memif-vpp0"].Memif; m.Role != MemifRoleSlave || m.SocketPath != filepath.Join(memifDir, "vpp0.sock") {
		t.Errorf("memif = %+v", m)
	}
	l.Close()
	_ = os.Remove(filepath.Join(memifDir, "vpp0.sock"))
	next("the memif socket gone", func(m map[string]Device) bool { _, ok := m["memif-vpp0"]; return !ok })

	if err := netlink.LinkDel(link); err != nil {
		t.Fatal(err)
	}
	next("the veths gone", func(m map[string]Device) bool {
		_, okA := m["netdev-"+a]
		_, okB := m["netdev-"+b]
		return !okA && !okB
	})
	cancel()
	if err := <-w.done; err != nil {
		t.Errorf("Watch: %v", err)
	}
}

// watcher is a Watch running for a test: the inventories it emits.
type watcher struct {
	t    *testing.T
	invs chan Inventory
	done chan error
	last *Inventory
}

// watch runs d.Watch, debounced by debounce, until ctx ends.
func watch(t *testing.T, ctx context.Context, d *Discoverer, debounce time.Duration) *watcher {
	w := &watcher{t: t, invs: make(chan Inventory, 100), done: make(chan error, 1)}
	go func() {
		w.done <- d.Watch(ctx, WatchOptions{Debounce: debounce}, func(inv Inventory) { w.invs <- inv })
	}()
	return w
}

// next waits up to 10 s for the next inventory that satisfies ok; every
// inventory received must differ from the one before it.
func (w *watcher) next(what string, ok func(map[string]Device) bool) map[string]Device {
	w.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case inv := <-w.invs:
			if w.last != nil && inv.Equal(*w.last) {
				w.t.Errorf("the watcher reported an unchanged inventory twice")
			}
			w.last = &inv
			if m := byName(inv); ok(m) {
				return m
			}
		case err := <-w.done:
			w.t.Fatalf("Watch ended waiting for %s: %v", what, err)
		case <-deadline:
			w.t.Fatalf("no inventory with %s within 10s", what)
		}
	}
}

// TestLiveUplinkNeverPublished: whatever the filter admits, the interfaces
// that carry a default route, and what lies below them, are not published.
func TestLiveUplinkNeverPublished(t *testing.T) {
	requireRoot(t)
	routes, err := netlink.RouteList(nil, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	uplinks := map[string]bool{}
	for _, r := range routes {
		if r.Dst == nil || r.Dst.IP.IsUnspecified() {
			if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
				uplinks[l.Attrs().Name] = true
			}
		}
	}
	if len(uplinks) == 0 {
		t.Fatal("this host has no default route; the test needs one")
	}
	inv := discover(t, Options{Filter: "true"})
	for _, dev := range inv.Devices {
		if dev.Netdev != nil && uplinks[dev.Netdev.Name] {
			t.Errorf("uplink %s published as %s", dev.Netdev.Name, dev.Name)
		}
	}
}

// TestLiveUplinkParents: in a private netns, a macvlan carrying the default
// route makes its parent veth an uplink too, and a veth enslaved to a bridge
// carrying the default route is one as well; an unrelated veth is not.
func TestLiveUplinkParents(t *testing.T) {
	requireRoot(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = orig.Close() }()
	ns, err := netns.NewNamed(linkPrefix + "uplink")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(fmt.Sprintf("cannot return to the original netns: %v", err))
		}
		_ = ns.Close()
		_ = netns.DeleteNamed(linkPrefix + "uplink")
	}()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	veth := func(name string) netlink.Link {
		must(netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}))
		l, err := netlink.LinkByName(name)
		must(err)
		must(netlink.LinkSetUp(l))
		return l
	}
	up := func(name string) netlink.Link {
		l, err := netlink.LinkByName(name)
		must(err)
		must(netlink.LinkSetUp(l))
		return l
	}
	parent := veth("par0")
	must(netlink.LinkAdd(&netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "mv0", ParentIndex: parent.Attrs().Index}, Mode: netlink.MACVLAN_MODE_BRIDGE}))
	mv := up("mv0")
	must(netlink.AddrAdd(mv, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("192.0.2.2"), Mask: net.CIDRMask(24, 32)}}))
	must(netlink.RouteAdd(&netlink.Route{LinkIndex: mv.Attrs().Index, Gw: net.ParseIP("192.0.2.1")}))
	port := veth("port0")
	must(netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}))
	br := up("br0")
	must(netlink.LinkSetMaster(port, br))
	must(netlink.AddrAdd(br, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("fd00:2::2"), Mask: net.CIDRMask(64, 128)}}))
	must(netlink.RouteAdd(&netlink.Route{LinkIndex: br.Attrs().Index, Gw: net.ParseIP("fd00:2::1")}))
	other := veth("other0")

	var h host
	links, err := h.links()
	must(err)
	ups, err := h.uplinks(links)
	must(err)
	for _, l := range []netlink.Link{mv, parent, br, port} {
		if !ups[l.Attrs().Index] {
			t.Errorf("%s is not counted as uplink", l.Attrs().Name)
		}
	}
	if ups[other.Attrs().Index] {
		t.Errorf("other0 counted as uplink")
	}
}

// TestLivePCIeRootMatchesHelper: for every PCI function of this host, the
// root complex derived the way fixture trees are read is the one the
// standard helper reports.
func TestLivePCIeRootMatchesHelper(t *testing.T) {
	requireRoot(t)
	s := sysfs{root: "/"}
	entries, err := os.ReadDir(s.path("bus", "pci", "devices"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 {
		t.Fatal("no PCI devices on this host")
	}
	for _, e := range entries {
		ours, err := pcieRootBelow(s, e.Name())
		if err != nil {
			t.Errorf("%s: %v", e.Name(), err)
			continue
		}
		attr, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(e.Name())
		if err != nil {
			t.Errorf("helper on %s: %v", e.Name(), err)
			continue
		}
		if *attr.Value.StringValue != ours {
			t.Errorf("%s: pcieRoot %q, helper says %q", e.Name(), ours, *attr.Value.StringValue)
		}
	}
}

// TestLiveXDPFeaturesDump reads the XDP features of several interfaces in
// one dump, and each is what the kernel says of that interface alone: the
// dump is read to its end, past the first device (the kernel does not mark
// the dump's messages multipart).
func TestLiveXDPFeaturesDump(t *testing.T) {
	requireRoot(t)
	var indexes []int
	for i := range 3 {
		a, b := fmt.Sprintf("%sx%d%da", linkPrefix, os.Getpid()%10000, i), fmt.Sprintf("%sx%d%db", linkPrefix, os.Getpid()%10000, i)
		addVeth(t, a, b)
		for _, name := range []string{a, b} {
			l, err := netlink.LinkByName(name)
			if err != nil {
				t.Fatal(err)
			}
			indexes = append(indexes, l.Attrs().Index)
		}
	}
	got, err := host{}.xdpFeatures(indexes)
	if err != nil {
		t.Fatal(err)
	}
	family, err := netdevFamilyID()
	if err != nil || family == 0 {
		t.Fatalf("netdev family: %d, %v", family, err)
	}
	for _, index := range indexes {
		f, ok := got[index]
		if !ok {
			t.Fatalf("link %d: no features in the dump of %d links (%v)", index, len(indexes), got)
		}
		// The kernel's answer for this interface alone.
		req := nl.NewNetlinkRequest(int(family), 0)
		req.AddData(genlHeader{cmd: netdevCmdDevGet, version: 1})
		req.AddData(nl.NewRtAttr(netdevAttrDevIfindex, nl.Uint32Attr(uint32(index))))
		msgs, err := req.Execute(unix.NETLINK_GENERIC, 0)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("link %d alone: %d messages, %v", index, len(msgs), err)
		}
		alone, want, ok := parseXDPFeatures(msgs[0])
		if !ok || alone != index || want != f {
			t.Errorf("link %d: the dump says %#x, alone %#x (index %d, ok %v)", index, f, want, alone, ok)
		}
		if x := xdpFromFeatures(f); !*x.Supported {
			t.Errorf("link %d, a veth: XDP not supported (%#x)", index, f)
		}
	}
	if _, err := (host{}).xdpFeatures(nil); err != nil {
		t.Errorf("no indexes: %v", err)
	}
}

// TestLiveLinksMatchNetlink reads this host's links with discovery's own
// dump and parser, and each says what the netlink library says of it.
func TestLiveLinksMatchNetlink(t *testing.T) {
	requireRoot(t)
	a, b := fmt.Sprintf("%sl%da", linkPrefix, os.Getpid()%100000), fmt.Sprintf("%sl%db", linkPrefix, os.Getpid()%100000)
	addVeth(t, a, b)
	links, err := host{}.links()
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	byIndex := map[int]netlink.Link{}
	for _, l := range theirs {
		byIndex[l.Attrs().Index] = l
	}
	seen := false
	for _, l := range links {
		want, ok := byIndex[l.Index]
		if !ok || l.Loopback {
			continue // gone or made between the two dumps; lo, whose zero address the library leaves out
		}
		at := want.Attrs()
		kind := want.Type()
		if kind == "device" {
			kind = ""
		}
		if l.Name != at.Name || l.MTU != at.MTU || l.MAC != at.HardwareAddr.String() || l.Kind != kind ||
			l.MasterIndex != at.MasterIndex || l.OperState != at.OperState.String() {
			t.Errorf("link %d: parsed %+v; netlink says %s mtu %d mac %s kind %q master %d oper %s",
				l.Index, l, at.Name, at.MTU, at.HardwareAddr, kind, at.MasterIndex, at.OperState)
		}
		seen = seen || l.Name == a
	}
	if !seen {
		t.Errorf("veth %s not in the dump", a)
	}
}

// TestLiveWatchPodInterfaces: a pod's interface (a veth whose other end
// is in another network namespace, as a CNI plugin makes one for every
// pod) reruns no discovery until it is published, even one the filter
// would publish: the next discovery, for any other change, finds it. A
// published one's changes still rerun it.
func TestLiveWatchPodInterfaces(t *testing.T) {
	requireRoot(t)
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true), ktesting.Verbosity(5)))
	logs := logger.GetSink().(ktesting.Underlier)
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer cancel()
	id := os.Getpid() % 10000
	name := func(s string) string { return fmt.Sprintf("%sw%d%s", linkPrefix, id, s) }
	podNS := netnstest.New(t, name("ns"))
	d, err := New(Options{Filter: fmt.Sprintf(`device.attributes["fastpath.dev"].kind == "netdev" && device.attributes["fastpath.dev"].ifName.startsWith(%q)`,
		name("")), Compile: compileCEL})
	if err != nil {
		t.Fatal(err)
	}
	w := watch(t, ctx, d, 20*time.Millisecond)
	next := w.next
	has := func(m map[string]Device, link string) bool { _, ok := m["netdev-"+link]; return ok }
	next("the start", func(map[string]Device) bool { return true })
	// A bridge discovery does not publish (its name is not the filter's),
	// for the pods' interfaces below.
	// Its address set, as CNI's bridge plugin does, so that it keeps it
	// when ports join.
	brMAC, _ := net.ParseMAC("02:fd:00:00:00:01")
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: fmt.Sprintf("%sb%d", linkPrefix, id), HardwareAddr: brMAC}}
	if err := netlink.LinkAdd(br); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netlink.LinkDel(br) })
	if err := netlink.LinkSetUp(br); err != nil {
		t.Fatal(err)
	}

	// A published veth whose other end goes into the pod: its changes
	// still count.
	addVeth(t, name("pa"), name("pb"))
	next("the first pair", func(m map[string]Device) bool { return has(m, name("pa")) && has(m, name("pb")) })
	ns, err := netns.GetFromPath(podNS)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	pb, err := netlink.LinkByName(name("pb"))
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetNsFd(pb, int(ns)); err != nil {
		t.Fatal(err)
	}
	next("pb gone into the pod", func(m map[string]Device) bool { return has(m, name("pa")) && !has(m, name("pb")) })
	pa, err := netlink.LinkByName(name("pa"))
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetMTU(pa, 9000); err != nil {
		t.Fatal(err)
	}
	next("the published pod interface's new MTU", func(m map[string]Device) bool {
		return has(m, name("pa")) && m["netdev-"+name("pa")].Netdev.MTU == 9000
	})

	// Other work on the machine (the other packages' tests, run beside
	// these) makes and removes links too, and their events rightly rerun
	// discovery, which then finds a pod's interface made meanwhile. So a
	// pod's interface is checked by the events that reran discovery, as
	// the watch logs them at V(5), not by what discovery found.
	quiet := func(link string) {
		t.Helper()
		quiet := time.After(500 * time.Millisecond) // 25 debounce periods
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				for _, e := range logs.GetBuffer().Data() {
					if e.Message == "Link event reruns discovery" && slices.Contains(e.ParameterKVList, any(link)) {
						t.Fatalf("a pod's interface, not published, reran discovery: %s", link)
					}
				}
			case <-quiet:
				return
			}
		}
	}
	host, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	delLater := func(link string) {
		t.Cleanup(func() {
			if l, err := netlink.LinkByName(link); err == nil {
				_ = netlink.LinkDel(l)
			}
		})
	}

	// A pod's interface made as CNI plugins make it: in the pod, its host
	// end moved out.
	netnstest.Do(t, podNS, func() {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name("qa")}, PeerName: name("qb")}); err != nil {
			t.Fatal(err)
		}
		qa, err := netlink.LinkByName(name("qa"))
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetNsFd(qa, int(host)); err != nil {
			t.Fatal(err)
		}
	})
	delLater(name("qa"))
	quiet(name("qa"))

	// A pod's interface as the CNI bridge plugin makes it: in the pod,
	// with its host end made in the host's namespace, joined to a bridge
	// that publishes nothing (made before the pod's interface, above).
	netnstest.Do(t, podNS, func() {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name("qe")}, PeerName: name("qc"), PeerNamespace: netlink.NsFd(int(host))}); err != nil {
			t.Fatal(err)
		}
	})
	delLater(name("qc"))
	qc, err := netlink.LinkByName(name("qc"))
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetMaster(qc, br); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(qc); err != nil {
		t.Fatal(err)
	}
	quiet(name("qc"))

	// Another change reruns it, and it finds the pods' interfaces.
	addVeth(t, name("ra"), name("rb"))
	next("the pods' interfaces, with the next change", func(m map[string]Device) bool {
		return has(m, name("ra")) && has(m, name("qa")) && has(m, name("qc"))
	})
	cancel()
	if err := <-w.done; err != nil {
		t.Errorf("Watch: %v", err)
	}
}
