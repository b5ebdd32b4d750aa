//go:build privileged

package dra_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/dratest"
	"github.com/fastpath-dra/fastpath/dra/nri"
	"github.com/fastpath-dra/fastpath/test/netnstest"
)

// TestSharedParentPassthruRefused: two tenants' pods share a parent (a
// veth, shared) through bridge-mode macvlans of the chart's
// shared.fastpath.dev, and reach each other. A third tenant's claim asking
// for a passthru macvlan of it is refused at Prepare, naming the claim,
// request, device, field and class, before anything is made: the parent
// keeps its promiscuity and its MAC, the two pods still reach each other, and a fourth tenant's macvlan is still made on it (the kernel
// makes no macvlan beside a passthru one, nor a passthru one beside
// others).
func TestSharedParentPassthruRefused(t *testing.T) {
	id := fmt.Sprintf("fps%d", os.Getpid()%100000)
	parent := netnstest.Veth(t, id+"a", id+"b")
	for _, n := range []string{id + "b", id + "a"} {
		l, err := netlink.LinkByName(n)
		if err == nil {
			err = netlink.LinkSetUp(l)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	before, err := netlink.LinkByName(parent.Attrs().Name)
	if err != nil {
		t.Fatal(err)
	}
	dev := devices.Device{Name: devices.NetdevDeviceName(parent.Attrs().Name), Kind: devices.KindNetdev, Share: &devices.Share{Interfaces: 8},
		Netdev: &devices.Netdev{Name: parent.Attrs().Name, MTU: before.Attrs().MTU, MAC: before.Attrs().HardwareAddr.String()}}

	chart := `"mode": "macvlan", "pinned": ["mode"], "sharedParent": {"macvlanModes": ["bridge", "private", "vepa"], "vlanProtocols": ["802.1q"]}`
	claim := func(name, body string) *resourceapi.ResourceClaim {
		c := testClaim(name, []alloc{{Request: "fast", Device: dev.Name}}, dratest.FromClass(config(chart)), fromClaim(config(body)))
		c.Spec.Devices.Requests[0].Exactly.DeviceClassName = "shared.fastpath.dev"
		c.Status.Allocation.Devices.Results[0].ShareID = new(types.UID("share-" + name))
		return c
	}
	a := claim("a", `"interface": {"name": "fast0", "addresses": ["10.79.0.2/24"]}`)
	b := claim("b", `"interface": {"name": "fast0", "addresses": ["10.79.0.3/24"]}`)
	c := claim("c", `"macvlan": {"mode": "passthru"}, "interface": {"name": "fast0", "addresses": ["10.79.0.4/24"]}`)
	e := claim("e", `"interface": {"name": "fast0", "addresses": ["10.79.0.5/24"]}`)
	d, k, ctx := startTestDriver(t, dra.NewFakeObject(a), dra.NewFakeObject(b), dra.NewFakeObject(c), dra.NewFakeObject(e))
	d.UseInventory(devices.Inventory{Devices: []devices.Device{dev}})
	attacher, err := dataplane.NewAttacher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = attacher.Close() })
	plugin := nri.New(nri.Options{Store: d.Store(), Attacher: attacher, Status: d.Opts().Status})
	pods := map[string]string{}
	run := func(c *resourceapi.ResourceClaim) {
		t.Helper()
		if msg := prepare(t, ctx, k, c); msg != "" {
			t.Fatalf("prepare %s: %s", c.Name, msg)
		}
		ns := netnstest.New(t, id+"-"+c.Name)
		pod := c.Status.ReservedFor[0]
		if err := plugin.AttachPod(ctx, nri.Pod{UID: pod.UID, Namespace: "default", Name: pod.Name, SandboxID: "s-" + c.Name, NetNS: ns}); err != nil {
			t.Fatalf("sandbox of %s: %v", c.Name, err)
		}
		pods[c.Name] = ns
	}
	ping := func(from, to string) error {
		out, err := exec.Command("ip", "netns", "exec", filepath.Base(pods[from]), "ping", "-c", "1", "-W", "2", to).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	run(a)
	run(b)
	if err := ping("a", "10.79.0.3"); err != nil {
		t.Fatalf("the two tenants do not reach each other through the shared parent: %v", err)
	}
	// A veth filters no unicast MAC: their macvlans made it promiscuous
	// once already.
	shared, err := netlink.LinkByName(parent.Attrs().Name)
	if err != nil {
		t.Fatal(err)
	}

	msg := prepare(t, ctx, k, c)
	want := `claim default/c, request "fast", device ` + dev.Name + `: config[1][FromClaim].parameters.macvlan.mode: Forbidden: ` +
		`macvlan mode passthru is not among those DeviceClass shared.fastpath.dev allows on its shared devices (bridge, private, vepa)`
	if !strings.Contains(msg, want) {
		t.Errorf("prepare of the passthru claim: %q\nwant %q", msg, want)
	}
	if _, ok := d.Store().Get(claims.Key{Driver: claims.DriverFastpath, UID: c.UID}); ok {
		t.Error("the refused claim is recorded")
	}

	after, err := netlink.LinkByName(parent.Attrs().Name)
	if err != nil {
		t.Fatal(err)
	}
	if after.Attrs().Promisc != shared.Attrs().Promisc || after.Attrs().HardwareAddr.String() != before.Attrs().HardwareAddr.String() || after.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("the parent changed: promiscuity %d (was %d), MAC %s (was %s), flags %v", after.Attrs().Promisc, shared.Attrs().Promisc,
			after.Attrs().HardwareAddr, before.Attrs().HardwareAddr, after.Attrs().Flags)
	}
	if err := ping("b", "10.79.0.2"); err != nil {
		t.Errorf("after the refusal the two tenants do not reach each other: %v", err)
	}
	run(e)
	if err := ping("e", "10.79.0.2"); err != nil {
		t.Errorf("a tenant after the refusal does not reach another: %v", err)
	}

	for _, c := range []*resourceapi.ResourceClaim{a, b, e} {
		pod := c.Status.ReservedFor[0]
		if err := plugin.DetachPod(ctx, nri.Pod{UID: pod.UID, NetNS: pods[c.Name]}); err != nil {
			t.Error(err)
		}
		unprepare(t, ctx, k, c)
	}
	assertNothingLeft(t, d)
}
