package dra

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	testclock "k8s.io/utils/clock/testing"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/devices/filter"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// bindingBed is a driver with binding conditions on every device, its
// binder driven by hand (no informer) on a fake clock.
type bindingBed struct {
	t      *testing.T
	ctx    context.Context
	d      *Driver
	b      *binder
	client *fake.Clientset
	clock  *testclock.FakeClock
	store  cache.Store
	inv    devices.Inventory
}

func newBindingBed(t *testing.T, objs ...*resourceapi.ResourceClaim) *bindingBed {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sel, err := filter.Compile("true")
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	for _, c := range objs {
		if _, err := client.ResourceV1().ResourceClaims(c.Namespace).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		_ = store.Add(c)
	}
	clock := testclock.NewFakeClock(time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC))
	dir := t.TempDir()
	d, err := New(Options{NodeName: testNode, Client: client, PluginDir: filepath.Join(dir, "plugins"), StateDir: filepath.Join(dir, "state"),
		CDIDir: filepath.Join(dir, "cdi"), Store: testStore(t), Status: status.NewWriter(client), BootID: "boot",
		Binding: BindingOptions{Selector: sel, Timeout: 30 * time.Second, Clock: clock}})
	if err != nil {
		t.Fatal(err)
	}
	d.opts.Status.Start(ctx)
	bed := &bindingBed{t: t, ctx: ctx, d: d, b: d.binder, client: client, clock: clock, store: store, inv: testInventory(t)}
	bed.b.claims = store
	d.Publish(ctx, bed.inv)
	return bed
}

// bindingClaim is a claim of device, allocated with fastpath's binding
// conditions, as the scheduler copies them from the slice.
func bindingClaim(name, device string, cfg ...string) *resourceapi.ResourceClaim {
	var c *resourceapi.ResourceClaim
	if len(cfg) > 0 {
		c = testClaim(name, []alloc{{Request: "nic", Device: device}}, fromClaim(config(cfg[0])))
	} else {
		c = testClaim(name, []alloc{{Request: "nic", Device: device}})
	}
	c.Status.ReservedFor = nil
	r := &c.Status.Allocation.Devices.Results[0]
	r.BindingConditions, r.BindingFailureConditions = []string{ConditionReadyToBind}, []string{ConditionBindingFailed}
	return c
}

// setLink gives the device's netdev the operational state, and publishes.
func (bb *bindingBed) setLink(device, state string) {
	for i := range bb.inv.Devices {
		if bb.inv.Devices[i].Name == device {
			bb.inv.Devices[i].Netdev.OperState = state
		}
	}
	bb.d.Publish(bb.ctx, bb.inv)
}

// note is what the informer's handler does for the claim.
func (bb *bindingBed) note(c *resourceapi.ResourceClaim) { bb.b.note(c) }

// round judges the pending claims and waits for their status to be
// written; it returns the device's conditions as the API server has them.
func (bb *bindingBed) round(c *resourceapi.ResourceClaim) []metav1.Condition {
	bb.t.Helper()
	bb.b.judgeAll(bb.ctx)
	bb.b.recover(bb.ctx)
	bb.d.opts.Status.Wait()
	got, err := bb.client.ResourceV1().ResourceClaims(c.Namespace).Get(bb.ctx, c.Name, metav1.GetOptions{})
	if err != nil {
		bb.t.Fatal(err)
	}
	for _, st := range got.Status.Devices {
		if st.Device == c.Status.Allocation.Devices.Results[0].Device {
			return st.Conditions
		}
	}
	return nil
}

func condition(conds []metav1.Condition, t string) string {
	c := apimeta.FindStatusCondition(conds, t)
	if c == nil {
		return "none"
	}
	return string(c.Status) + " " + c.Reason + ": " + c.Message
}

// TestBindingPublished: the selector's devices carry fastpath's binding
// conditions; a device claims hold does not.
func TestBindingPublished(t *testing.T) {
	bb := newBindingBed(t)
	res, ok := bb.d.resources(bb.ctx)
	if !ok {
		t.Fatal("nothing published")
	}
	n := 0
	for _, s := range res.Pools[testNode].Slices {
		for _, dev := range s.Devices {
			if len(dev.BindingConditions) != 1 || dev.BindingConditions[0] != ConditionReadyToBind ||
				len(dev.BindingFailureConditions) != 1 || dev.BindingFailureConditions[0] != ConditionBindingFailed {
				t.Errorf("device %s: binding conditions %v, failure conditions %v", dev.Name, dev.BindingConditions, dev.BindingFailureConditions)
			}
			n++
		}
	}
	if n != len(bb.inv.Devices) {
		t.Errorf("published %d devices of %d", n, len(bb.inv.Devices))
	}
	none := ResourcesWith(testNode, bb.inv, nil, nil, PublishOptions{})
	if dev := none.Pools[testNode].Slices[0].Devices[0]; len(dev.BindingConditions) > 0 {
		t.Errorf("without a selector, %s has binding conditions %v", dev.Name, dev.BindingConditions)
	}
}

// TestBindingWaitsForLink: a netdev whose link is down is not ready to
// bind (ConditionReadyToBind False, saying why) until it comes up; once
// ready the verdict stays, and the Ready condition Prepare writes later
// keeps it.
func TestBindingWaitsForLink(t *testing.T) {
	claim := bindingClaim("bind-link", vfNetdev)
	bb := newBindingBed(t, claim)
	bb.setLink(vfNetdev, "lowerlayerdown")
	bb.note(claim)
	conds := bb.round(claim)
	if got := condition(conds, ConditionReadyToBind); !strings.HasPrefix(got, "False Waiting: the link of "+vfNetdev+" (ens1f0v0) is lowerlayerdown") {
		t.Fatalf("link down: %s %s", ConditionReadyToBind, got)
	}
	if got := condition(conds, ConditionBindingFailed); !strings.HasPrefix(got, "False") {
		t.Errorf("link down within the timeout: %s %s", ConditionBindingFailed, got)
	}
	// The scheduler frees the allocation and makes the same one again
	// (its status cleared): the node says again that it waits.
	freed := claim.DeepCopy()
	freed.Status.Allocation, freed.Status.Devices = nil, nil
	if _, err := bb.client.ResourceV1().ResourceClaims("default").UpdateStatus(bb.ctx, freed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	bb.note(freed)
	again := claim.DeepCopy()
	if _, err := bb.client.ResourceV1().ResourceClaims("default").UpdateStatus(bb.ctx, again, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = bb.store.Update(again)
	bb.note(again)
	if got := condition(bb.round(claim), ConditionReadyToBind); !strings.HasPrefix(got, "False Waiting") {
		t.Fatalf("allocated again, the link still down: %s %s", ConditionReadyToBind, got)
	}
	bb.clock.Step(10 * time.Second)
	bb.setLink(vfNetdev, "up")
	conds = bb.round(claim)
	if got := condition(conds, ConditionReadyToBind); got != "True DeviceReady: device "+vfNetdev+" is ready" {
		t.Fatalf("link up: %s %s", ConditionReadyToBind, got)
	}
	if len(bb.b.pending) != 0 {
		t.Errorf("claims still pending once judged: %v", bb.b.pending)
	}

	// Prepare's status of the device keeps the binding conditions.
	bb.d.opts.Status.Set(bb.ctx, status.ClaimRef{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}, resourceapi.AllocatedDeviceStatus{
		Driver: devices.DriverName, Pool: testNode, Device: vfNetdev, Conditions: []metav1.Condition{status.Condition(true, status.ReasonReady, "prepared")}})
	conds = bb.round(claim)
	if condition(conds, ConditionReadyToBind) != "True DeviceReady: device "+vfNetdev+" is ready" || !strings.HasPrefix(condition(conds, status.ConditionReady), "True") {
		t.Errorf("after Prepare's status: %+v", conds)
	}
}

// TestBindingFails: a link still down at the binding timeout fails the
// binding (the scheduler allocates again) and taints the device
// NoSchedule until its link is up; a device gone fails at once; mode vfio
// on a NIC without an IOMMU group fails at once, whatever its link.
func TestBindingFails(t *testing.T) {
	down := bindingClaim("bind-down", vfNetdev)
	gone := bindingClaim("bind-gone", "pci-0000-99-00-0")
	vfio := bindingClaim("bind-vfio", noIOMMU, `"mode": "vfio"`)
	bb := newBindingBed(t, down, gone, vfio)
	bb.setLink(vfNetdev, "down")
	for _, c := range []*resourceapi.ResourceClaim{down, gone, vfio} {
		bb.note(c)
	}
	bb.b.judgeAll(bb.ctx)
	bb.clock.Step(31 * time.Second)
	conds := bb.round(down)
	if got := condition(conds, ConditionBindingFailed); !strings.HasPrefix(got, "True LinkDown: the link of "+vfNetdev+" (ens1f0v0) is down, 31s after the claim was allocated (binding timeout 30s)") {
		t.Fatalf("at the timeout: %s %s", ConditionBindingFailed, got)
	}
	if got := condition(conds, ConditionReadyToBind); !strings.HasPrefix(got, "False LinkDown") {
		t.Errorf("at the timeout: %s %s", ConditionReadyToBind, got)
	}
	if got := condition(bb.round(gone), ConditionBindingFailed); got != "True DeviceGone: device pci-0000-99-00-0 is not on node "+testNode+" (any more)" {
		t.Errorf("device gone: %s", got)
	}
	if got := condition(bb.round(vfio), ConditionBindingFailed); got != "True NoIOMMUGroup: device "+noIOMMU+" has no IOMMU group: vfio-pci cannot take it" {
		t.Errorf("vfio without an IOMMU group: %s", got)
	}

	taint := func() string {
		res, _ := bb.d.resources(bb.ctx)
		for _, s := range res.Pools[testNode].Slices {
			for _, dev := range s.Devices {
				if dev.Name == vfNetdev && len(dev.Taints) > 0 {
					return dev.Taints[0].Key + "=" + dev.Taints[0].Value + ":" + string(dev.Taints[0].Effect)
				}
			}
		}
		return ""
	}
	if got := taint(); got != TaintKey+"=LinkDown:NoSchedule" {
		t.Fatalf("after its binding failed, %s is tainted %q", vfNetdev, got)
	}
	bb.setLink(vfNetdev, "up")
	bb.b.recover(bb.ctx)
	if got := taint(); got != "" {
		t.Errorf("once its link is up, %s is still tainted %q", vfNetdev, got)
	}
}
