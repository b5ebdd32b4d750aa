//go:build privileged

package dra_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/devices/filter"
	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/nri"
	"github.com/fastpath-dra/fastpath/test/netnstest"
)

// TestPublishedThroughAttach: a veth standing in for a VF, discovered on
// the live host, is claimed, moved into a pod's namespace by the runtime's
// hook and given back: what the driver hands its publisher stays what it
// was before Prepare throughout, across a restart of the driver while the
// veth is in the pod; once unprepared, it is discovery's view again.
func TestPublishedThroughAttach(t *testing.T) {
	name := fmt.Sprintf("fpp%d", os.Getpid()%100000)
	host := netnstest.Veth(t, name+"a", name+"b")
	disc, err := devices.New(devices.Options{Filter: fmt.Sprintf(`device.attributes["fastpath.dev"].ifName == %q`, host.Attrs().Name),
		Compile: func(expr string) (devices.Selector, error) { return filter.Compile(expr) }})
	if err != nil {
		t.Fatal(err)
	}
	discover := func() devices.Inventory {
		t.Helper()
		inv, err := disc.Discover(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return inv
	}
	dev := devices.NetdevDeviceName(host.Attrs().Name)
	claim := testClaim("veth", []alloc{{Request: "nic", Device: dev}},
		fromClaim(config(`"interface": {"name": "net1", "mtu": 9000, "mac": "02:00:00:fa:57:71"}`)))
	attacher, err := dataplane.NewAttacher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = attacher.Close() })
	d, k, ctx := dra.StartTestDriverWith(t, nil, func(o *dra.Options) { o.HealthChecks = dra.LiveChecks{Attacher: attacher} }, dra.NewFakeObject(claim))

	inHost := discover()
	if len(inHost.Devices) != 1 || inHost.Devices[0].Name != dev {
		t.Fatalf("discovered %+v, want %s alone", inHost.Devices, dev)
	}
	d.Publish(ctx, inHost)
	before := wanted(t, ctx, d.Driver)
	if msg := prepare(t, ctx, k, claim); msg != "" {
		t.Fatalf("prepare: %s", msg)
	}
	d.Publish(ctx, discover())
	assertWanted(t, "prepared", wanted(t, ctx, d.Driver), before)

	plugin := nri.New(nri.Options{Store: d.Store(), Attacher: attacher, Status: d.Opts().Status})
	podNS := netnstest.New(t, name)
	pod := nri.Pod{UID: claim.Status.ReservedFor[0].UID, Namespace: claim.Namespace, Name: claim.Status.ReservedFor[0].Name, SandboxID: "s-" + name, NetNS: podNS}
	if err := plugin.AttachPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	inPod := discover()
	if len(inPod.Devices) != 0 {
		t.Fatalf("discovered %+v with the veth in the pod", inPod.Devices)
	}
	d.Publish(ctx, inPod)
	assertWanted(t, "in the pod", wanted(t, ctx, d.Driver), before)

	// The driver restarted while the veth is in the pod: the store read
	// again from its file.
	store, err := claims.Open(d.Store().Path(), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	opts := d.Opts()
	opts.Store = store
	again, err := dra.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	again.Publish(ctx, inPod)
	assertWanted(t, "in the pod, after a restart", wanted(t, ctx, again), before)

	if err := plugin.DetachPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	d.Publish(ctx, discover())
	assertWanted(t, "back in the host", wanted(t, ctx, d.Driver), before)

	unprepare(t, ctx, k, claim)
	back := discover()
	assertWanted(t, "released", wanted(t, ctx, d.Driver), dra.Resources(testNode, back, nil, nil))
	assertWanted(t, "released, as discovery sees it", dra.Resources(testNode, back, nil, nil), before)
	assertNothingLeft(t, d)
}

func wanted(t *testing.T, ctx context.Context, d *dra.Driver) resourceslice.DriverResources {
	t.Helper()
	res, ok := d.Wanted(ctx)
	if !ok {
		t.Fatal("nothing to publish after an inventory")
	}
	return res
}

func assertWanted(t *testing.T, when string, got, want resourceslice.DriverResources) {
	t.Helper()
	if !apiequality.Semantic.DeepEqual(got, want) {
		t.Errorf("%s: the driver publishes\n%+v\nwant\n%+v", when, got.Pools[testNode].Slices, want.Pools[testNode].Slices)
	}
}
