//go:build sriov

package dra

import (
	"fmt"
	"os"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/devices/filter"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/nri"
	"github.com/fastpath-dra/fastpath/test/netnstest"
	"github.com/fastpath-dra/fastpath/test/sriovtest"
)

// TestSRIOVPublishedWhileClaimed: a real VF (igbvf), discovered on the
// node, is claimed in netdev mode and moved into a pod's namespace by the
// runtime's hook, so that its netdev leaves the host's class/net: what the
// driver hands its publisher (its ifName, mac, mtu included) stays what it
// was before Prepare, in the pod, across a restart of the driver, and
// after the VF is back and released, as discovery then sees it again.
func TestSRIOVPublishedWhileClaimed(t *testing.T) {
	pf := sriovtest.RequirePF(t)
	vf := pf.VFsReady(t, 4)[1]
	t.Cleanup(func() { pf.ResetVF(t, vf) })
	disc, err := devices.New(devices.Options{Filter: fmt.Sprintf(`device.attributes["fastpath.dev"].pciAddress == %q`, vf.Address),
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
	name := devices.PCIDeviceName(vf.Address)
	claim := testClaim("pub", []alloc{{Request: "nic", Device: name}}, fromClaim(config(`"interface": {"name": "net1", "mtu": 1400}`)))
	attacher, err := dataplane.NewAttacher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = attacher.Close() })
	d, k, ctx := startDriverWith(t, dataplane.NetlinkPF{}, dataplane.PCIBinder{SysfsRoot: "/", DevRoot: "/"}, discover(),
		func(o *Options) { o.HealthChecks = LiveChecks{Attacher: attacher} }, &fakeObject{claim})

	inHost := discover()
	if len(inHost.Devices) != 1 || inHost.Devices[0].Netdev == nil {
		t.Fatalf("discovered %+v, want VF %s with its netdev", inHost.Devices, vf.Address)
	}
	d.Publish(ctx, inHost)
	before := wantResources(t, ctx, d.Driver)
	if msg := prepare(t, ctx, k, claim); msg != "" {
		t.Fatalf("prepare: %s", msg)
	}
	d.Publish(ctx, discover())
	assertResources(t, "prepared", wantResources(t, ctx, d.Driver), before)

	plugin := nri.New(nri.Options{Store: d.store, Attacher: attacher, Status: d.opts.Status})
	podNS := netnstest.New(t, fmt.Sprintf("%s-%d-pub", sriovtest.Prefix, os.Getpid()))
	pod := nri.Pod{UID: claim.Status.ReservedFor[0].UID, Namespace: claim.Namespace, Name: claim.Status.ReservedFor[0].Name, SandboxID: "sandbox-pub", NetNS: podNS}
	if err := plugin.AttachPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	inPod := discover()
	if len(inPod.Devices) != 1 || inPod.Devices[0].Netdev != nil {
		t.Fatalf("discovered %+v with the VF's netdev in the pod, want the VF without it", inPod.Devices)
	}
	if apiequality.Semantic.DeepEqual(Resources(testNode, inPod, nil, nil), before) {
		t.Fatal("discovery's view of the VF in the pod is what was published: the test shows nothing")
	}
	d.Publish(ctx, inPod)
	assertResources(t, "in the pod", wantResources(t, ctx, d.Driver), before)

	// The driver restarted while the VF is in the pod.
	store, err := claims.Open(d.store.Path(), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	opts := d.opts
	opts.Store = store
	again, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	again.Publish(ctx, inPod)
	assertResources(t, "in the pod, after a restart", wantResources(t, ctx, again), before)

	if err := plugin.DetachPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	sriovtest.WaitFor(t, 10*time.Second, "the VF's netdev back in the host", func() bool { return sriovtest.Netdev(vf.Address) != "" })
	d.Publish(ctx, discover())
	assertResources(t, "back in the host", wantResources(t, ctx, d.Driver), before)

	unprepare(t, ctx, k, claim)
	back := discover()
	back.Taken = time.Now()
	d.Publish(ctx, back)
	assertResources(t, "released", wantResources(t, ctx, d.Driver), before)
	assertResources(t, "released, as discovery sees it", Resources(testNode, back, nil, nil), before)
}
