package dra

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// A claimed device is published as it was before Prepare while the claim
// holds it: its netdev moved into the pod (a VF's netdev leaves class/net,
// a virtual netdev the host), a daemon restart, nothing changes the node's
// slices; a PCI function gone from the node is unpublished; Unprepare
// gives back what discovery sees.
func TestPublishedWhileClaimed(t *testing.T) {
	veth := devices.Device{Name: devices.NetdevDeviceName("fpveth0"), Kind: devices.KindNetdev, ResourceName: devices.DefaultResourceName(devices.KindNetdev),
		Netdev: &devices.Netdev{Name: "fpveth0", MAC: "02:00:00:00:00:01", MTU: 1500, LinkType: "veth", OperState: "up"}}
	claim := testClaim("web", []alloc{{Request: "nic", Device: vfNetdev}, {Request: "dpdk", Device: vfVFIO}, {Request: "veth", Device: veth.Name}},
		fromClaimFor("nic", config(`"interface": {"name": "net1", "mtu": 9000}`)),
		fromClaimFor("dpdk", config(`"mode": "vfio"`)),
		fromClaimFor("veth", config(`"interface": {"name": "net2"}`)))
	d, k, ctx, checks, host, before := publishedRig(t, claim, veth)
	if dev := findDevice(before, vfNetdev); dev == nil || dev.Attributes["ifName"].StringValue == nil || dev.Attributes["mac"].StringValue == nil {
		t.Fatalf("the fixture's VF is published as %+v, want it with its netdev's ifName and mac", dev)
	}

	req := []*drapb.Claim{{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}}
	resp, err := k.dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: req})
	if err != nil {
		t.Fatal(err)
	}
	if e := resp.Claims[string(claim.UID)].Error; e != "" {
		t.Fatalf("prepare: %s", e)
	}
	d.Publish(ctx, host)
	assertResources(t, "prepared, in the host", wantResources(t, ctx, d.Driver), before)

	// In the pod, as the runtime's hook records it: discovery sees the
	// VF without its netdev, and not the virtual netdev at all.
	key := claims.Key{Driver: claims.DriverFastpath, UID: claim.UID}
	c, _ := d.store.Get(key)
	for i := range c.Devices {
		if c.Devices[i].Pod != nil {
			c.Devices[i].Attached = &claims.Attachment{SandboxID: "sandbox-web", NetNS: "/var/run/netns/web"}
		}
	}
	if err := d.store.Put(c); err != nil {
		t.Fatal(err)
	}
	inPod := host
	inPod.Devices = nil
	for _, dev := range host.Devices {
		switch dev.Name {
		case veth.Name:
			continue
		case vfNetdev:
			dev.Netdev = nil
		}
		inPod.Devices = append(inPod.Devices, dev)
	}
	if findDevice(Resources(testNode, inPod, nil, nil), vfNetdev).Attributes["ifName"].StringValue != nil {
		t.Fatal("discovery's view of the VF in the pod has its ifName")
	}
	d.Publish(ctx, inPod)
	assertResources(t, "in the pod", wantResources(t, ctx, d.Driver), before)
	waitPublished(t, ctx, d.client, before)

	// A daemon restart while the devices are in the pod: the store read
	// again from its file.
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

	// The VFIO function removed from the node: unpublished.
	addr := findDevice(before, vfVFIO).Attributes["pciAddress"].StringValue
	if err := os.Remove(filepath.Join(d.sysfsRoot(), "sys", "bus", "pci", "devices", *addr)); err != nil {
		t.Fatal(err)
	}
	gone := inPod
	gone.Devices = slices.DeleteFunc(slices.Clone(inPod.Devices), func(dev devices.Device) bool { return dev.Name == vfVFIO })
	d.Publish(ctx, gone)
	want := without(t, before, vfVFIO)
	assertResources(t, "its VFIO function gone", wantResources(t, ctx, d.Driver), want)
	waitPublished(t, ctx, d.client, want)

	// The virtual netdev deleted in the pod: unpublished.
	checks.inPod.Store(false)
	d.Publish(ctx, gone)
	want = without(t, want, veth.Name)
	assertResources(t, "the virtual netdev deleted", wantResources(t, ctx, d.Driver), want)
	waitPublished(t, ctx, d.client, want)

	// Released: what discovery sees (the devices' netdevs back in the
	// host are discovery's to say).
	uresp, err := k.dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: req})
	if err != nil {
		t.Fatal(err)
	}
	if e := uresp.Claims[string(claim.UID)].Error; e != "" {
		t.Fatalf("unprepare: %s", e)
	}
	// Until a discovery begun after the release, the VF stays as it was:
	// its netdev given back is not seen yet.
	assertResources(t, "released", wantResources(t, ctx, d.Driver), want)
	gone.Taken = time.Now()
	d.Publish(ctx, gone)
	assertResources(t, "released, discovered again", wantResources(t, ctx, d.Driver), Resources(testNode, gone, nil, nil))
	waitPublished(t, ctx, d.client, Resources(testNode, gone, nil, nil))
}

// publishedRig starts a test driver serving claim, its node object (the
// slices' owner), and health checks that find the pod's devices in the
// pod; it publishes the fixture's inventory with veth added and returns
// it and what the node then publishes.
func publishedRig(t *testing.T, claim *resourceapi.ResourceClaim, veth devices.Device) (*testDriver, *fakeKubelet, context.Context, *podChecks, devices.Inventory, resourceslice.DriverResources) {
	t.Helper()
	checks := &podChecks{}
	checks.inPod.Store(true)
	d, k, ctx := startTestDriverWith(t, &fakePF{}, func(o *Options) { o.HealthChecks = checks }, &fakeObject{claim})
	if _, err := d.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: "node-uid"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	host := testInventory(t)
	host.Devices = append(host.Devices, veth)
	slices.SortFunc(host.Devices, func(a, b devices.Device) int { return strings.Compare(a.Name, b.Name) })
	d.Publish(ctx, host)
	before := wantResources(t, ctx, d.Driver)
	waitPublished(t, ctx, d.client, before)
	return d, k, ctx, checks, host, before
}

// sysfsRoot is the root of the test driver's sysfs fixture.
func (d *testDriver) sysfsRoot() string {
	return d.opts.PCI.(dataplane.PCIBinder).SysfsRoot
}

func wantResources(t *testing.T, ctx context.Context, d *Driver) resourceslice.DriverResources {
	t.Helper()
	res, ok := d.resources(ctx)
	if !ok {
		t.Fatal("nothing to publish after an inventory")
	}
	return res
}

func assertResources(t *testing.T, when string, got, want resourceslice.DriverResources) {
	t.Helper()
	if !apiequality.Semantic.DeepEqual(got, want) {
		t.Errorf("%s: the node publishes\n%s\nwant\n%s", when, describe(got), describe(want))
	}
}

// describe lists the devices of res, one a line, with their attributes.
func describe(res resourceslice.DriverResources) string {
	var b strings.Builder
	for _, pool := range res.Pools {
		for i, s := range pool.Slices {
			for _, dev := range s.Devices {
				b.WriteString(dev.Name + " (slice " + strconv.Itoa(i) + "):")
				var names []string
				for n := range dev.Attributes {
					names = append(names, string(n))
				}
				slices.Sort(names)
				for _, n := range names {
					a := dev.Attributes[resourceapi.QualifiedName(n)]
					b.WriteString(" " + n + "=")
					switch {
					case a.StringValue != nil:
						b.WriteString(*a.StringValue)
					case a.IntValue != nil:
						b.WriteString(strconv.FormatInt(*a.IntValue, 10))
					case a.BoolValue != nil && *a.BoolValue:
						b.WriteString("true")
					case a.BoolValue != nil:
						b.WriteString("false")
					}
				}
				b.WriteString("\n")
			}
		}
	}
	return b.String()
}

func findDevice(res resourceslice.DriverResources, name string) *resourceapi.Device {
	for _, pool := range res.Pools {
		for _, s := range pool.Slices {
			for i := range s.Devices {
				if s.Devices[i].Name == name {
					return &s.Devices[i]
				}
			}
		}
	}
	return nil
}

// without is res, of one slice, without the device named name.
func without(t *testing.T, res resourceslice.DriverResources, name string) resourceslice.DriverResources {
	t.Helper()
	pool := res.Pools[testNode]
	if len(pool.Slices) != 1 {
		t.Fatalf("%d slices, want the fixture's devices in one", len(pool.Slices))
	}
	devs := slices.DeleteFunc(slices.Clone(pool.Slices[0].Devices), func(d resourceapi.Device) bool { return d.Name == name })
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{testNode: {Slices: []resourceslice.Slice{{Devices: devs}}}}}
}

// waitPublished waits until the node's slices in the API hold the devices
// of want.
func waitPublished(t *testing.T, ctx context.Context, client kubernetes.Interface, want resourceslice.DriverResources) {
	t.Helper()
	var wantDevs []resourceapi.Device
	for _, s := range want.Pools[testNode].Slices {
		wantDevs = append(wantDevs, s.Devices...)
	}
	var got []resourceapi.Device
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(list.Items, func(a, b resourceapi.ResourceSlice) int { return strings.Compare(a.Name, b.Name) })
		got = nil
		for _, s := range list.Items {
			got = append(got, s.Spec.Devices...)
		}
		if apiequality.Semantic.DeepEqual(got, wantDevs) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node's slices hold %d devices, not the %d wanted:\n%v", len(got), len(wantDevs), got)
		}
		<-tick.C
	}
}

// podChecks find the devices in their pods, or not.
type podChecks struct{ inPod atomic.Bool }

func (c *podChecks) InPod(string, dataplane.Netdev) (bool, error) { return c.inPod.Load(), nil }
func (c *podChecks) XDPAttached(string, string) (bool, error)     { return true, nil }
func (c *podChecks) InHost(string) (bool, error)                  { return false, nil }

// A virtual netdev given back to the host just before its claim is
// unprepared, while health's last look (taken as it left the pod, against
// an inventory older than its return) still says it is gone: it stays
// published as it was until discovery sees it back, with no write of the
// slices in between.
func TestPublishedReleasedWhileHealthLags(t *testing.T) {
	veth := devices.Device{Name: devices.NetdevDeviceName("fpveth1"), Kind: devices.KindNetdev, ResourceName: devices.DefaultResourceName(devices.KindNetdev),
		Netdev: &devices.Netdev{Name: "fpveth1", MAC: "02:00:00:00:00:02", MTU: 1500, LinkType: "veth", OperState: "up"}}
	claim := testClaim("lag", []alloc{{Request: "veth", Device: veth.Name}}, fromClaimFor("veth", config(`"interface": {"name": "net1"}`)))
	d, k, ctx, checks, host, before := publishedRig(t, claim, veth)

	req := []*drapb.Claim{{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}}
	if resp, err := k.dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: req}); err != nil || resp.Claims[string(claim.UID)].Error != "" {
		t.Fatalf("prepare: %v %+v", err, resp)
	}
	// In the pod, and discovery no longer sees it on the host.
	key := claims.Key{Driver: claims.DriverFastpath, UID: claim.UID}
	c, _ := d.store.Get(key)
	c.Devices[0].Attached = &claims.Attachment{SandboxID: "sandbox-lag", NetNS: "/var/run/netns/lag"}
	if err := d.store.Put(c); err != nil {
		t.Fatal(err)
	}
	inPod := host
	inPod.Devices = slices.DeleteFunc(slices.Clone(host.Devices), func(dev devices.Device) bool { return dev.Name == veth.Name })
	d.Publish(ctx, inPod)
	assertResources(t, "in the pod", wantResources(t, ctx, d.Driver), before)

	// On its way back: health looks while it is in neither place...
	checks.inPod.Store(false)
	d.Publish(ctx, inPod)
	// ...then the runtime's hook gives it back and records so, and the
	// kubelet unprepares the claim before discovery has looked again.
	c, _ = d.store.Get(key)
	c.Devices[0].Attached = nil
	if err := d.store.Put(c); err != nil {
		t.Fatal(err)
	}
	if resp, err := k.dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: req}); err != nil || resp.Claims[string(claim.UID)].Error != "" {
		t.Fatalf("unprepare: %v %+v", err, resp)
	}
	assertResources(t, "released, not seen back yet", wantResources(t, ctx, d.Driver), before)
	host.Taken = time.Now()
	d.Publish(ctx, host)
	assertResources(t, "released, seen back", wantResources(t, ctx, d.Driver), before)
}
