package dra

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// fakeChecks says what the test wants of prepared devices in their pods.
type fakeChecks struct{ inPod, xdp, inHost bool }

func (f *fakeChecks) InPod(string, dataplane.Netdev) (bool, error) { return f.inPod, nil }
func (f *fakeChecks) XDPAttached(string, string) (bool, error)     { return f.xdp, nil }
func (f *fakeChecks) InHost(string) (bool, error)                  { return f.inHost, nil }

type healthBed struct {
	h        *health
	clock    *clocktesting.FakeClock
	checks   *fakeChecks
	events   *record.FakeRecorder
	store    *claims.Store
	changes  int
	inv      devices.Inventory
	ctx      context.Context
	prepared claims.Claim
}

func newHealthBed(t *testing.T) *healthBed {
	t.Helper()
	// Degraded taints have a test of their own.
	return newHealthBedWith(t, HealthOptions{Grace: 2 * time.Second, Interval: time.Second, DegradedHold: -1})
}

func newHealthBedWith(t *testing.T, opts HealthOptions) *healthBed {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	b := &healthBed{clock: clocktesting.NewFakeClock(time.Unix(1000, 0)), checks: &fakeChecks{inPod: true, xdp: true},
		events: record.NewFakeRecorder(100), ctx: ctx}
	opts.Clock = b.clock
	store, err := claims.Open(filepath.Join(t.TempDir(), "checkpoint.json"), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	b.store = store
	b.h = newHealth(opts, testNode, store, b.checks, b.events)
	b.h.changed = func(context.Context) { b.changes++ }
	b.inv = testInventory(t)
	// A prepared afxdp netdev in a pod: the E810's first VF.
	b.prepared = claims.Claim{Driver: claims.DriverFastpath, UID: "uid-x", Namespace: "default", Name: "x", Prepared: true,
		Pod: claims.Pod{UID: "pod-x", Name: "p"},
		Devices: []claims.Device{{Request: "xsk", Pool: testNode, Device: vfNetdev, Mode: "afxdp", PCIAddress: "0000:3b:01.0", Driver: "iavf",
			Host: &claims.HostNetdev{Name: "ens1f0v0"}, Pod: &claims.PodInterface{Name: "xsk0"},
			XDP:      &claims.XDP{Program: "xsk-redirect", PinDir: "/pins"},
			Attached: &claims.Attachment{SandboxID: "s", NetNS: "/run/netns/p"}}}}
	if err := store.Admit(b.prepared); err != nil {
		t.Fatal(err)
	}
	b.h.setInventory(ctx, b.inv)
	return b
}

// withDevice changes a device of the inventory and looks again.
func (b *healthBed) withDevice(name string, change func(*devices.Device)) {
	inv := devices.Inventory{Devices: append([]devices.Device(nil), b.inv.Devices...), Taken: b.inv.Taken}
	for i := range inv.Devices {
		if inv.Devices[i].Name == name {
			d := inv.Devices[i]
			change(&d)
			inv.Devices[i] = d
		}
	}
	b.inv = inv
	b.h.setInventory(b.ctx, inv)
}

func (b *healthBed) after(d time.Duration) {
	b.clock.Step(d)
	b.h.look(b.ctx)
}

// settle lets the monitor look every second for three seconds, past the
// grace period of a problem found at the first look.
func (b *healthBed) settle() {
	for range 3 {
		b.after(time.Second)
	}
}

func (b *healthBed) taint(dev string) string {
	ts := b.h.taints()[dev]
	if len(ts) == 0 {
		return ""
	}
	return ts[0].Value + "/" + string(ts[0].Effect)
}

func (b *healthBed) event(t *testing.T) string {
	t.Helper()
	select {
	case e := <-b.events.Events:
		return e
	default:
		return ""
	}
}

// pfDown and pfUp change a VF of the fixture as discovery sees its PF's
// link go and come back.
func pfDown(d *devices.Device) {
	d.Health = devices.Health{Reason: devices.ReasonPFLinkDown, Message: "the link of PF ens1f0 is down"}
}

func pfUp(d *devices.Device) { d.Health = devices.Health{} }

// A problem shorter than the grace period goes unnoticed; a longer one
// taints the device, is reported and written as events on the node and
// the pod; its end does the same again.
func TestHealthGrace(t *testing.T) {
	b := newHealthBed(t)

	// A flap of a second.
	b.withDevice(vfNetdev2, pfDown)
	b.after(time.Second)
	b.withDevice(vfNetdev2, pfUp)
	b.after(5 * time.Second)
	if b.taint(vfNetdev2) != "" || b.changes != 0 || b.event(t) != "" {
		t.Fatalf("a flap shorter than the grace period was noticed: taint %q, %d changes", b.taint(vfNetdev2), b.changes)
	}

	b.withDevice(vfNetdev2, pfDown)
	b.after(time.Second)
	if b.taint(vfNetdev2) != "" {
		t.Fatal("tainted before the grace period ended")
	}
	b.after(time.Second)
	if got := b.taint(vfNetdev2); got != "PFLinkDown/NoSchedule" || b.changes != 1 {
		t.Fatalf("taint %q, %d changes; want PFLinkDown/NoSchedule once", got, b.changes)
	}
	if e := b.event(t); !strings.Contains(e, "Warning DeviceUnhealthy device "+vfNetdev2+" is unhealthy (PFLinkDown)") {
		t.Errorf("event %q", e)
	}
	if ts := b.h.taints()[vfNetdev2]; ts[0].TimeAdded == nil || !ts[0].TimeAdded.Time.Equal(time.Unix(1000+6+2, 0)) {
		t.Errorf("taint added at %v, want when the grace period ended", ts[0].TimeAdded)
	}
	// The metric fastpath_unhealthy_devices{reason} counts it.
	if got := b.h.unhealthyByReason(); got["PFLinkDown"] != 1 || len(got) != 1 {
		t.Errorf("unhealthy devices by reason = %v, want PFLinkDown: 1", got)
	}
	// Still down: nothing new, and the taint keeps its time.
	b.after(10 * time.Second)
	if b.changes != 1 || b.event(t) != "" {
		t.Errorf("%d changes while nothing changed", b.changes)
	}
	b.withDevice(vfNetdev2, pfUp)
	if b.taint(vfNetdev2) != "" || b.changes != 2 {
		t.Errorf("taint %q after the link came back, %d changes", b.taint(vfNetdev2), b.changes)
	}
	if got := b.h.unhealthyByReason(); got["PFLinkDown"] != 0 {
		t.Errorf("unhealthy devices by reason = %v after the link came back, want none PFLinkDown", got)
	}
	if e := b.event(t); !strings.Contains(e, "Normal DeviceHealthy device "+vfNetdev2+" is healthy again (it was PFLinkDown)") {
		t.Errorf("event %q", e)
	}
}

// A problem is reported when its grace period ends, not at the monitor's
// next look after that: a link that goes down is tainted within the grace
// period and discovery's debounce, whatever the interval.
func TestHealthReportedAtGraceEnd(t *testing.T) {
	b := newHealthBedWith(t, HealthOptions{Grace: 1500 * time.Millisecond, Interval: 10 * time.Second})
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.h.run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	waiters := func(n int) {
		t.Helper()
		err := wait.PollUntilContextTimeout(b.ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return b.clock.Waiters() == n, nil
		})
		if err != nil {
			t.Fatalf("the monitor waits on %d timers, want %d", b.clock.Waiters(), n)
		}
	}
	waiters(1) // its ticker
	b.clock.Step(300 * time.Millisecond)
	b.withDevice(vfNetdev2, func(d *devices.Device) {
		d.Health = devices.Health{Reason: devices.ReasonPFLinkDown, Message: "the link of PF ens1f0 is down"}
	})
	waiters(2) // and the end of the grace period
	b.clock.Step(1400 * time.Millisecond)
	if got := b.taint(vfNetdev2); got != "" {
		t.Fatalf("tainted %q before the grace period ended", got)
	}
	b.clock.Step(100 * time.Millisecond)
	err := wait.PollUntilContextTimeout(b.ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return b.taint(vfNetdev2) == "PFLinkDown/NoSchedule", nil
	})
	if err != nil {
		t.Errorf("not tainted when the grace period ended (the next tick is 8.5 s away): %q", b.taint(vfNetdev2))
	}
}

// Each check of a prepared device, with its reason, and the events on the
// pod that holds it.
func TestHealthReasons(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(*healthBed)
		reason string
	}{
		{"netdev out of the pod", func(b *healthBed) { b.checks.inPod = false }, ReasonNetdevMissing},
		{"XDP detached", func(b *healthBed) { b.checks.xdp = false }, ReasonXDPDetached},
		{"driver unbound", func(b *healthBed) { b.withDevice(vfNetdev, func(d *devices.Device) { d.PCI.Driver = "" }) }, ReasonDriverChanged},
		{"bound to another driver", func(b *healthBed) { b.withDevice(vfNetdev, func(d *devices.Device) { d.PCI.Driver = "vfio-pci" }) }, ReasonDriverChanged},
		{"an inventory taken before the device was prepared shows its old driver", func(b *healthBed) {
			taken := time.Now()
			b.h.prepared(b.prepared.Devices)
			b.inv.Taken = taken
			b.withDevice(vfNetdev, func(d *devices.Device) { d.PCI.Driver = "vfio-pci" })
		}, ""},
		{"an inventory taken after the device was prepared", func(b *healthBed) {
			b.h.prepared(b.prepared.Devices)
			b.inv.Taken = time.Now().Add(time.Millisecond)
			b.withDevice(vfNetdev, func(d *devices.Device) { d.PCI.Driver = "vfio-pci" })
		}, ReasonDriverChanged},
		{"device gone", func(b *healthBed) {
			// Not in a pod (a VF that vanished from a pod is NetdevMissing).
			c := b.prepared
			c.Devices[0].Attached = nil
			if err := b.store.Put(c); err != nil {
				panic(err)
			}
			b.inv.Devices = removeDevice(b.inv.Devices, vfNetdev)
			b.h.setInventory(b.ctx, b.inv)
		}, ReasonDeviceGone},
		{"a netdev given back to the host, not in the inventory yet", func(b *healthBed) {
			c := b.prepared
			c.Devices[0].Attached = nil
			if err := b.store.Put(c); err != nil {
				panic(err)
			}
			b.checks.inPod, b.checks.inHost = false, true
			b.inv.Devices = removeDevice(b.inv.Devices, vfNetdev)
			b.h.setInventory(b.ctx, b.inv)
		}, ""},
		{"a virtual netdev in its pod is not in the host's inventory", func(b *healthBed) {
			b.inv.Devices = removeDevice(b.inv.Devices, vfNetdev)
			b.h.setInventory(b.ctx, b.inv)
		}, ""},
		{"memif not answering", func(b *healthBed) {
			b.withDevice(memifSlave, func(d *devices.Device) {
				d.Health = devices.Health{Reason: devices.ReasonMemifNotAnswering, Message: "no HELLO"}
			})
		}, devices.ReasonMemifNotAnswering},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newHealthBed(t)
			tc.break_(b)
			b.settle()
			dev := vfNetdev
			if tc.reason == devices.ReasonMemifNotAnswering {
				dev = memifSlave
			}
			if tc.reason == "" {
				if got := b.taint(dev); got != "" {
					t.Fatalf("taint %q, want none", got)
				}
				return
			}
			if got := b.taint(dev); got != tc.reason+"/NoSchedule" {
				t.Fatalf("taint %q, want %s", got, tc.reason)
			}
			if dev != vfNetdev {
				return
			}
			node, pod := b.event(t), b.event(t)
			if !strings.Contains(node, tc.reason) || !strings.Contains(pod, `claim default/x, request "xsk"`) {
				t.Errorf("events %q and %q, want one on the node and one naming the claim", node, pod)
			}
			r := b.h.report()
			if len(r.Devices) != 1 || r.Devices[0].Health != kubeletplugin.HealthStatusUnhealthy || !strings.HasPrefix(r.Devices[0].Message, tc.reason+": ") {
				t.Errorf("health report %+v", r.Devices)
			}
		})
	}
}

func removeDevice(devs []devices.Device, name string) []devices.Device {
	var out []devices.Device
	for _, d := range devs {
		if d.Name != name {
			out = append(out, d)
		}
	}
	return out
}

// The health stream reports the prepared devices at once, and again at a
// change.
func TestHealthStream(t *testing.T) {
	b := newHealthBed(t)
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error, 1)
	go func() { done <- b.h.watch(ctx, reports) }()
	first := receive(t, reports)
	if len(first.Devices) != 1 || first.Devices[0].DeviceName != vfNetdev || first.Devices[0].Health != kubeletplugin.HealthStatusHealthy {
		t.Fatalf("first report %+v", first.Devices)
	}
	b.checks.inPod = false
	b.settle()
	second := receive(t, reports)
	if second.Devices[0].Health != kubeletplugin.HealthStatusUnhealthy {
		t.Errorf("after the netdev left the pod: %+v", second.Devices)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch: %v", err)
	}
}

func receive(t *testing.T, reports <-chan kubeletplugin.DeviceHealthReport) kubeletplugin.DeviceHealthReport {
	t.Helper()
	select {
	case r := <-reports:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no health report")
	}
	return kubeletplugin.DeviceHealthReport{}
}

// Evict adds a NoExecute taint.
func TestHealthEvict(t *testing.T) {
	b := newHealthBed(t)
	b.h.opts.Evict = true
	b.checks.inPod = false
	b.settle()
	ts := b.h.taints()[vfNetdev]
	if len(ts) != 2 || ts[1].Effect != resourceapi.DeviceTaintEffectNoExecute {
		t.Errorf("taints %+v, want NoSchedule and NoExecute", ts)
	}
}

// A restarted daemon keeps the taints its predecessor published: a device
// still unhealthy for the same reason keeps its taint and the taint's
// TimeAdded from the first publish on, without a grace period untainted;
// one healthy now loses its taint at once, and is degraded.
func TestHealthAdoptsTaints(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clock := clocktesting.NewFakeClock(time.Unix(5000, 0))
	h := newHealth(HealthOptions{Grace: 2 * time.Second, Interval: time.Second, Clock: clock}, testNode, testStore(t), &fakeChecks{inPod: true, xdp: true}, record.NewFakeRecorder(100))
	h.changed = func(context.Context) {}
	added := metav1.NewTime(time.Unix(1002, 0))
	taint := func(dev, reason string) resourceapi.Device {
		return resourceapi.Device{Name: dev, Taints: []resourceapi.DeviceTaint{{Key: TaintKey, Value: reason, Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: &added}}}
	}
	node := testNode
	h.adopt([]resourceapi.ResourceSlice{{Spec: resourceapi.ResourceSliceSpec{Driver: "fastpath.dev", NodeName: &node,
		Devices: []resourceapi.Device{taint(vfNetdev2, devices.ReasonPFLinkDown), taint(vfVFIO, devices.ReasonPFLinkDown)}}}})
	inv := testInventory(t)
	for i := range inv.Devices {
		if inv.Devices[i].Name == vfNetdev2 {
			inv.Devices[i].Health = devices.Health{Reason: devices.ReasonPFLinkDown, Message: "the link of PF ens1f0 is down"}
		}
	}
	h.setInventory(ctx, inv)
	ts := h.taints()
	if got := ts[vfNetdev2]; len(got) != 1 || got[0].Value != devices.ReasonPFLinkDown || !got[0].TimeAdded.Equal(&added) {
		t.Errorf("the still unhealthy device's taints: %+v, want its taint as published, added at %s", got, added)
	}
	// Its problem ended: degraded from now on, for the hold.
	if got := ts[vfVFIO]; len(got) != 1 || got[0].Key != DegradedTaintKey || got[0].Effect != resourceapi.DeviceTaintEffectNone || !got[0].TimeAdded.Time.Equal(clock.Now()) {
		t.Errorf("the device healthy now has taints %+v, want only %s:None from now", got, DegradedTaintKey)
	}
}

// A problem discovery sees on the device that ends, shorter than the grace
// period or not, leaves the device tainted degraded with effect None for
// the hold, from its end: published, written as an event, counted; the
// kubelet's health stream hears nothing. A new problem takes over from the
// degraded taint and hands back to it when it ends. A daemon started later
// keeps the degraded taints its predecessor published until their hold
// ends.
func TestHealthDegraded(t *testing.T) {
	b := newHealthBedWith(t, HealthOptions{Grace: 2 * time.Second, Interval: time.Second, DegradedHold: time.Minute})

	// A flap of a second: never reported unhealthy, degraded from its end.
	b.withDevice(vfNetdev2, pfDown)
	b.after(time.Second)
	b.withDevice(vfNetdev2, pfUp)
	ended := b.clock.Now()
	if got := b.taint(vfNetdev2); got != "PFLinkDown/None" || b.changes != 1 {
		t.Fatalf("after a flap of 1s: taint %q, %d changes; want PFLinkDown/None once", got, b.changes)
	}
	ts := b.h.taints()[vfNetdev2]
	if len(ts) != 1 || ts[0].Key != DegradedTaintKey || ts[0].TimeAdded == nil || !ts[0].TimeAdded.Time.Equal(ended) {
		t.Errorf("taints %+v, want one %s added at %v", ts, DegradedTaintKey, ended)
	}
	if e := b.event(t); !strings.Contains(e, "Normal DeviceDegraded device "+vfNetdev2+" was PFLinkDown for 1s, over; tainted fastpath.dev/degraded=PFLinkDown (effect None) for 1m0s") {
		t.Errorf("event %q", e)
	}
	if got := b.h.degradedByReason(); got["PFLinkDown"] != 1 || len(b.h.unhealthyByReason()) != 0 {
		t.Errorf("degraded by reason %v, unhealthy %v; want one degraded PFLinkDown, none unhealthy", got, b.h.unhealthyByReason())
	}
	// Nothing changes within the hold.
	b.after(30 * time.Second)
	if b.changes != 1 || b.taint(vfNetdev2) != "PFLinkDown/None" {
		t.Errorf("within the hold: taint %q, %d changes", b.taint(vfNetdev2), b.changes)
	}

	// Down long enough to be reported: unhealthy replaces degraded, and
	// degraded comes back, anew, when it ends.
	b.withDevice(vfNetdev2, pfDown)
	b.settle()
	if got := b.taint(vfNetdev2); got != "PFLinkDown/NoSchedule" || len(b.h.taints()[vfNetdev2]) != 1 {
		t.Fatalf("reported unhealthy: taints %+v, want PFLinkDown/NoSchedule alone", b.h.taints()[vfNetdev2])
	}
	if got := b.h.degradedByReason(); len(got) != 0 {
		t.Errorf("degraded by reason %v while the device is unhealthy", got)
	}
	b.withDevice(vfNetdev2, pfUp)
	again := b.clock.Now()
	if ts := b.h.taints()[vfNetdev2]; len(ts) != 1 || ts[0].Effect != "None" || !ts[0].TimeAdded.Time.Equal(again) {
		t.Fatalf("after the link came back: taints %+v, want degraded from %v", ts, again)
	}

	// A daemon started now adopts the taint, and drops it when its hold
	// ends, not before.
	var slice resourceapi.ResourceSlice
	slice.Spec.Driver, slice.Spec.NodeName = devices.DriverName, new(testNode)
	slice.Spec.Devices = []resourceapi.Device{{Name: vfNetdev2, Taints: b.h.taints()[vfNetdev2]}}
	next := newHealthBedWith(t, HealthOptions{Grace: 2 * time.Second, Interval: time.Second, DegradedHold: time.Minute})
	next.clock.SetTime(b.clock.Now().Add(10 * time.Second))
	next.h.adopt([]resourceapi.ResourceSlice{slice})
	next.after(time.Second)
	if got := next.taint(vfNetdev2); got != "PFLinkDown/None" {
		t.Fatalf("the next daemon's taint %q, want the adopted PFLinkDown/None", got)
	}
	next.after(49 * time.Second)
	if got := next.taint(vfNetdev2); got != "" {
		t.Errorf("taint %q once the hold ended", got)
	}

	// An event of a pod's device (its netdev gone from the pod) that ends
	// with the pod leaves nothing degraded.
	b.checks.inPod = false
	b.settle()
	b.checks.inPod = true
	b.after(time.Second)
	if got := b.taint(vfNetdev); got != "" {
		t.Errorf("taint %q of a device whose pod lost it and got it back: only discovery's problems degrade", got)
	}
}
