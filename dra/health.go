package dra

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/fastpath-dra/fastpath/bpf"
	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/attach"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// TaintKey is the taint fastpath puts on an unhealthy device in its
// ResourceSlice; its value is the reason.
const TaintKey = "fastpath.dev/unhealthy"

// DegradedTaintKey is the taint, with effect None, on a device whose
// problem ended less than the degraded hold ago (a link flap, however
// short): usable, and allocated as any other, but recently unreliable, for
// a claim to avoid with a selector or a tolerating scheduler to weigh.
// Its value is the problem's reason.
const DegradedTaintKey = "fastpath.dev/degraded"

// Reasons a prepared device is unhealthy, beyond what discovery sees
// (devices.Reason*).
const (
	// ReasonDeviceGone: the device is no longer on the node.
	ReasonDeviceGone = "DeviceGone"
	// ReasonDriverChanged: the PCI function is bound to another driver
	// than Prepare left it on, or to none.
	ReasonDriverChanged = "DriverChanged"
	// ReasonXDPDetached: the XDP program of an afxdp device is no longer
	// attached to its interface in the pod.
	ReasonXDPDetached = "XDPDetached"
	// ReasonNetdevMissing: the interface is not in the pod's network
	// namespace any more.
	ReasonNetdevMissing = "NetdevMissing"
)

// HealthOptions tune device health. Zero values take the defaults.
type HealthOptions struct {
	// Grace is how long a device must be unhealthy before it is tainted
	// and reported: a link flap shorter than it goes unnoticed. Default 1s.
	Grace time.Duration
	// Interval is how often prepared devices are checked in their pods.
	// Default 1s.
	Interval time.Duration
	// Evict adds a NoExecute taint to the NoSchedule one: the pods holding
	// an unhealthy device are evicted unless they tolerate it.
	Evict bool
	// DegradedHold is how long a device stays tainted degraded (effect
	// None) after a problem ended, shorter than the grace period or not.
	// Default 5m; negative: never.
	DegradedHold time.Duration
	// Clock is injected by tests. Default: the real clock.
	Clock clock.WithTicker
}

func (o *HealthOptions) defaults() {
	if o.Grace <= 0 {
		o.Grace = time.Second
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.DegradedHold == 0 {
		o.DegradedHold = 5 * time.Minute
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
}

// HealthChecks look at prepared devices where they are.
type HealthChecks interface {
	// InPod says whether the netdev is where its attach to the pod's
	// namespace has it: there, configured or not, or, the attach under
	// way, still in the host. Health runs beside the runtime's hooks: an
	// attach cut in the middle by a look is not a missing interface.
	InPod(netns string, nd dataplane.Netdev) (bool, error)
	// XDPAttached says whether an XDP program is attached to the
	// interface in the namespace.
	XDPAttached(netns, ifName string) (bool, error)
	// InHost says whether an interface of the name is in the host's
	// network namespace.
	InHost(name string) (bool, error)
}

// LiveChecks are the checks on this node: netlink and BPF.
type LiveChecks struct{ *dataplane.Attacher }

// InPod implements HealthChecks (dataplane.Attacher.Present), not the
// Attacher's InPod, which says whether an attach completed.
func (c LiveChecks) InPod(netns string, nd dataplane.Netdev) (bool, error) {
	return c.Present(netns, nd)
}

// InHost implements HealthChecks.
func (c LiveChecks) InHost(name string) (bool, error) { return c.Attacher.InHost(name) }

// XDPAttached implements HealthChecks.
func (LiveChecks) XDPAttached(netns, ifName string) (bool, error) {
	id, err := bpf.Attached(netns, ifName)
	return id != 0, err
}

// problem is what is wrong with a device, since when.
type problem struct {
	devices.Health
	since time.Time
}

// health tracks the health of the node's devices: what discovery sees, and
// for prepared devices, what their pods have. A problem that lasts the
// grace period is reported: the device is tainted in its slice, reported to
// the kubelet's health stream, an event is written on the node and on the
// pod that holds it; and when it goes, the same again.
type health struct {
	opts     HealthOptions
	node     string
	store    *claims.Store
	checks   HealthChecks
	recorder record.EventRecorder
	// changed is called when the reported set changes (to publish the
	// slices again).
	changed func(context.Context)

	mu    sync.Mutex
	inv   map[string]devices.Device
	invAt time.Time // when the discovery of inv began
	// preparedAt is when this daemon last prepared each device: an
	// inventory taken before it may still show the driver the device had.
	preparedAt map[string]time.Time
	problems   map[string]problem // by device, from the last look
	reported   map[string]problem // those past the grace period
	// degraded are the devices whose problem ended less than the hold
	// ago, since when it ended.
	degraded map[string]problem
	streams  map[chan struct{}]bool
	// pending wakes run when a problem begins: the look at the end of its
	// grace period reports it, not the next tick after.
	pending chan struct{}
}

func newHealth(opts HealthOptions, node string, store *claims.Store, checks HealthChecks, recorder record.EventRecorder) *health {
	opts.defaults()
	return &health{opts: opts, node: node, store: store, checks: checks, recorder: recorder,
		problems: map[string]problem{}, reported: map[string]problem{}, degraded: map[string]problem{}, streams: map[chan struct{}]bool{}, pending: make(chan struct{}, 1),
		preparedAt: map[string]time.Time{}}
}

// adopt takes the taints of this daemon's kind from the node's slices as a
// previous daemon left them, before the first look: a device still
// unhealthy for the same reason keeps its taint, and the taint's
// TimeAdded, instead of being published untainted and tainted again a
// grace period later. A device healthy now loses it at the first look.
func (h *health) adopt(slices []resourceapi.ResourceSlice) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range slices {
		if s.Spec.Driver != devices.DriverName || s.Spec.NodeName == nil || *s.Spec.NodeName != h.node {
			continue
		}
		for _, dev := range s.Spec.Devices {
			for _, t := range dev.Taints {
				if t.Key == DegradedTaintKey && t.Value != "" && t.TimeAdded != nil && h.opts.DegradedHold > 0 {
					h.degraded[dev.Name] = problem{Health: devices.Health{Reason: t.Value}, since: t.TimeAdded.Time}
				}
				if t.Key != TaintKey || t.Value == "" || t.TimeAdded == nil {
					continue
				}
				p := problem{Health: devices.Health{Reason: t.Value}, since: t.TimeAdded.Add(-h.opts.Grace)}
				h.problems[dev.Name], h.reported[dev.Name] = p, p
			}
		}
	}
}

// prepared records that devs were just prepared (their drivers may have
// changed).
func (h *health) prepared(devs []claims.Device) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, d := range devs {
		h.preparedAt[d.Device] = now
	}
}

// setInventory makes inv what discovery sees now, and looks again.
func (h *health) setInventory(ctx context.Context, inv devices.Inventory) {
	byName := make(map[string]devices.Device, len(inv.Devices))
	for _, d := range inv.Devices {
		byName[d.Name] = d
	}
	h.mu.Lock()
	h.inv, h.invAt = byName, inv.Taken
	h.mu.Unlock()
	h.look(ctx)
}

// run looks at the devices every interval, and when the grace period of a
// problem ends, until ctx ends.
func (h *health) run(ctx context.Context) {
	t := h.opts.Clock.NewTicker(h.opts.Interval)
	defer t.Stop()
	var due clock.Timer
	defer func() {
		if due != nil {
			due.Stop()
		}
	}()
	var dueC <-chan time.Time
	for {
		dueC = nil
		if at, ok := h.nextDue(); ok {
			wait := max(at.Sub(h.opts.Clock.Now()), 0)
			if due == nil {
				due = h.opts.Clock.NewTimer(wait)
			} else {
				due.Stop()
				due.Reset(wait)
			}
			dueC = due.C()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			h.look(ctx)
		case <-dueC:
			h.look(ctx)
		case <-h.pending:
		}
	}
}

// nextDue is when the earliest grace period of a problem not reported yet
// ends, or the earliest degraded hold.
func (h *health) nextDue() (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var at time.Time
	for dev, p := range h.problems {
		if _, ok := h.reported[dev]; ok {
			continue
		}
		if end := p.since.Add(h.opts.Grace); at.IsZero() || end.Before(at) {
			at = end
		}
	}
	for _, p := range h.degraded {
		if end := p.since.Add(h.opts.DegradedHold); at.IsZero() || end.Before(at) {
			at = end
		}
	}
	return at, !at.IsZero()
}

// look finds the devices' problems now, reports those that outlasted the
// grace period and those that went, and says whether that changed.
func (h *health) look(ctx context.Context) bool {
	now := h.opts.Clock.Now()
	found := h.find()
	h.mu.Lock()
	if h.inv == nil {
		h.mu.Unlock()
		return false // nothing discovered yet
	}
	next := map[string]problem{}
	for dev, hl := range found {
		p := problem{Health: hl, since: now}
		if old, ok := h.problems[dev]; ok && old.Reason == hl.Reason {
			p.since = old.since
		}
		next[dev] = p
	}
	fresh := false
	for dev := range next {
		if _, ok := h.problems[dev]; !ok {
			fresh = true
		}
	}
	// A problem that ended, reported or not, leaves the device degraded
	// for the hold; one that began again takes over from it.
	degraded := map[string]problem{}
	var flapped []string
	for dev, p := range h.degraded {
		if now.Sub(p.since) < h.opts.DegradedHold {
			degraded[dev] = p
		}
	}
	if h.opts.DegradedHold > 0 {
		for dev, p := range h.problems {
			// Only what discovery sees of a device itself: a pod's view of
			// it ends with the pod.
			if _, still := next[dev]; still || !discovered(p.Reason) || h.inv[dev].Name == "" {
				continue
			}
			degraded[dev] = problem{Health: devices.Health{Reason: p.Reason,
				Message: fmt.Sprintf("%s for %s, over", p.Reason, now.Sub(p.since).Round(time.Millisecond))}, since: now}
			flapped = append(flapped, dev)
		}
	}
	degradedChanged := !maps.EqualFunc(degraded, h.degraded, func(a, b problem) bool { return a.Reason == b.Reason && a.since.Equal(b.since) })
	expired := []string{}
	for dev := range h.degraded {
		if _, ok := degraded[dev]; !ok {
			expired = append(expired, dev)
		}
	}
	h.problems = next
	h.degraded = degraded
	if fresh {
		select {
		case h.pending <- struct{}{}:
		default:
		}
	}
	reported := map[string]problem{}
	for dev, p := range next {
		if old, ok := h.reported[dev]; ok && old.Reason == p.Reason {
			reported[dev] = problem{Health: p.Health, since: old.since}
		} else if now.Sub(p.since) >= h.opts.Grace {
			reported[dev] = p
		}
	}
	var began, ended []string
	for dev := range reported {
		if _, ok := h.reported[dev]; !ok {
			began = append(began, dev)
		}
	}
	for dev := range h.reported {
		if _, ok := reported[dev]; !ok {
			ended = append(ended, dev)
		}
	}
	unhealthyChanged := !maps.EqualFunc(reported, h.reported, func(a, b problem) bool { return a.Health == b.Health })
	changed := unhealthyChanged || degradedChanged
	old := h.reported
	h.reported = reported
	if unhealthyChanged {
		for s := range h.streams {
			select {
			case s <- struct{}{}:
			default:
			}
		}
	}
	h.mu.Unlock()
	if !changed {
		return false
	}
	logger := klog.FromContext(ctx)
	slices.Sort(began)
	slices.Sort(ended)
	for _, dev := range began {
		p := reported[dev]
		logger.Info("Device unhealthy", "device", dev, "reason", p.Reason, "message", p.Message)
		h.event(dev, corev1.EventTypeWarning, "DeviceUnhealthy", fmt.Sprintf("device %s is unhealthy (%s): %s", dev, p.Reason, p.Message))
	}
	for _, dev := range ended {
		logger.Info("Device healthy again", "device", dev, "was", old[dev].Reason)
		h.event(dev, corev1.EventTypeNormal, "DeviceHealthy", fmt.Sprintf("device %s is healthy again (it was %s)", dev, old[dev].Reason))
	}
	slices.Sort(flapped)
	for _, dev := range flapped {
		p := degraded[dev]
		logger.Info("Device degraded", "device", dev, "reason", p.Reason, "message", p.Message, "hold", h.opts.DegradedHold)
		h.event(dev, corev1.EventTypeNormal, "DeviceDegraded", fmt.Sprintf("device %s was %s; tainted %s=%s (effect None) for %s",
			dev, p.Message, DegradedTaintKey, p.Reason, h.opts.DegradedHold))
	}
	slices.Sort(expired)
	for _, dev := range expired {
		logger.V(2).Info("Device no longer degraded", "device", dev)
	}
	if h.changed != nil {
		h.changed(ctx)
	}
	return true
}

// find says what is wrong with each device now: what discovery saw, and
// for a prepared device, whether it is still on the node, on its driver,
// in its pod, with its XDP program.
func (h *health) find() map[string]devices.Health {
	h.mu.Lock()
	inv := h.inv
	h.mu.Unlock()
	found := map[string]devices.Health{}
	for name, d := range inv {
		if !d.Health.Healthy() {
			found[name] = d.Health
		}
	}
	if inv == nil || h.store == nil {
		return found
	}
	for _, c := range h.store.View() {
		if c.Driver != claims.DriverFastpath || !c.Prepared {
			continue
		}
		for _, d := range c.Devices {
			if _, ok := found[d.Device]; ok {
				continue
			}
			if hl := h.check(inv, d); !hl.Healthy() {
				found[d.Device] = hl
			}
		}
	}
	return found
}

// check looks at one prepared device: in its pod if it is attached (a
// virtual netdev in a pod is not in the host's inventory), else in the
// inventory; and at its PCI function's driver.
func (h *health) check(inv map[string]devices.Device, d claims.Device) devices.Health {
	dev, inInventory := inv[d.Device]
	inPod := false
	if nd, isNetdev := attach.Netdev(d); isNetdev && d.Attached != nil && h.checks != nil {
		a := d.Attached
		in, err := h.checks.InPod(a.NetNS, nd)
		if err == nil && !in {
			return devices.Health{Reason: ReasonNetdevMissing, Message: fmt.Sprintf("interface %s (host %s) is not in the pod's network namespace", d.Pod.Name, d.Host.Name)}
		}
		inPod = err == nil
		if inPod && d.XDP != nil {
			if on, err := h.checks.XDPAttached(a.NetNS, d.Pod.Name); err == nil && !on {
				return devices.Health{Reason: ReasonXDPDetached, Message: fmt.Sprintf("XDP program %s is no longer attached to %s", d.XDP.Program, d.Pod.Name)}
			}
		}
	}
	if !inInventory {
		// A delegated virtual netdev is where its network's CNI plugin
		// put it, out of the host's sight: its PCI function, when it has
		// one, still stands for it.
		if inPod || (d.Mode == v1alpha1.ModeDelegate && d.PCIAddress == "") {
			return devices.Health{}
		}
		// A netdev its pod's stop gave back to the host since the
		// inventory was taken, which discovery sees a debounce later.
		if nd, isNetdev := attach.Netdev(d); isNetdev && nd.HostName != "" && h.checks != nil {
			if here, err := h.checks.InHost(nd.HostName); err == nil && here {
				return devices.Health{}
			}
		}
		return devices.Health{Reason: ReasonDeviceGone, Message: fmt.Sprintf("device %s is no longer on the node", d.Device)}
	}
	want := d.Driver
	if d.VFIO != nil {
		want = dataplane.VFIODriver
	}
	h.mu.Lock()
	stale := h.invAt.Before(h.preparedAt[d.Device])
	h.mu.Unlock()
	if dev.PCI != nil && want != "" && dev.PCI.Driver != want && !stale {
		return devices.Health{Reason: ReasonDriverChanged, Message: fmt.Sprintf("PCI function %s is bound to %s, not %s", d.PCIAddress, driverOr(dev.PCI.Driver), want)}
	}
	return devices.Health{}
}

func driverOr(d string) string {
	if d == "" {
		return "no driver"
	}
	return d
}

// event writes an event on the node, and on the pod that holds the
// device if it is prepared.
func (h *health) event(dev, kind, reason, msg string) {
	if h.recorder == nil {
		return
	}
	h.recorder.Event(&corev1.ObjectReference{Kind: "Node", Name: h.node, UID: types.UID(h.node)}, kind, reason, msg)
	if h.store == nil {
		return
	}
	for _, c := range h.store.View() {
		if c.Driver != claims.DriverFastpath {
			continue
		}
		for _, d := range c.Devices {
			if d.Device == dev {
				h.recorder.Event(&corev1.ObjectReference{Kind: "Pod", Namespace: c.Namespace, Name: c.Pod.Name, UID: c.Pod.UID}, kind, reason,
					fmt.Sprintf("claim %s, request %q: %s", c.String(), d.Request, msg))
			}
		}
	}
}

// notify wakes the health streams (a claim was prepared or unprepared:
// the set of devices to report changed).
func (h *health) notify() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.streams {
		select {
		case s <- struct{}{}:
		default:
		}
	}
}

// reportedProblem is the device's problem, if it is reported unhealthy.
func (h *health) reportedProblem(dev string) (devices.Health, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, ok := h.reported[dev]
	return p.Health, ok
}

// lost says whether the last look found the prepared device gone from the
// node (DeviceGone) or from the pod it was attached to (NetdevMissing),
// reported or not yet.
func (h *health) lost(dev string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, ok := h.problems[dev]
	return ok && (p.Reason == ReasonDeviceGone || p.Reason == ReasonNetdevMissing)
}

// discovered says whether reason is one discovery finds on the device
// itself (a PF's link, a memif endpoint), not in a pod holding it.
func discovered(reason string) bool {
	switch reason {
	case ReasonDeviceGone, ReasonDriverChanged, ReasonXDPDetached, ReasonNetdevMissing:
		return false
	}
	return true
}

// taints are the taints of the devices reported unhealthy, and of those
// degraded.
func (h *health) taints() map[string][]resourceapi.DeviceTaint {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][]resourceapi.DeviceTaint{}
	for dev, p := range h.degraded {
		if _, unhealthy := h.reported[dev]; unhealthy {
			continue
		}
		added := metav1.NewTime(p.since.Truncate(time.Second))
		out[dev] = []resourceapi.DeviceTaint{{Key: DegradedTaintKey, Value: p.Reason, Effect: resourceapi.DeviceTaintEffectNone, TimeAdded: &added}}
	}
	for dev, p := range h.reported {
		added := metav1.NewTime(p.since.Add(h.opts.Grace).Truncate(time.Second))
		out[dev] = []resourceapi.DeviceTaint{{Key: TaintKey, Value: p.Reason, Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: &added}}
		if h.opts.Evict {
			out[dev] = append(out[dev], resourceapi.DeviceTaint{Key: TaintKey, Value: p.Reason, Effect: resourceapi.DeviceTaintEffectNoExecute, TimeAdded: &added})
		}
	}
	return out
}

// degradedByReason counts the devices tainted degraded, for metrics.
func (h *health) degradedByReason() map[string]float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]float64{}
	for dev, p := range h.degraded {
		if _, unhealthy := h.reported[dev]; !unhealthy {
			out[p.Reason]++
		}
	}
	return out
}

// unhealthyByReason counts the devices reported unhealthy, for metrics.
func (h *health) unhealthyByReason() map[string]float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]float64{}
	for _, p := range h.reported {
		out[p.Reason]++
	}
	return out
}

// reportTimeout is how long the kubelet keeps a device's reported health;
// the stream reports again well within it, and within the kubelet's
// default of 30 s that an empty report (no device prepared) gets.
const (
	reportTimeout = 60 * time.Second
	reportEvery   = 10 * time.Second
)

// report is the health of the node's prepared devices, for the kubelet.
func (h *health) report() kubeletplugin.DeviceHealthReport {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.opts.Clock.Now()
	var r kubeletplugin.DeviceHealthReport
	if h.store == nil {
		return r
	}
	seen := map[string]bool{}
	for _, c := range h.store.View() {
		if c.Driver != claims.DriverFastpath || !c.Prepared {
			continue
		}
		for _, d := range c.Devices {
			if seen[d.Device] {
				continue
			}
			seen[d.Device] = true
			dh := kubeletplugin.DeviceHealth{PoolName: d.Pool, DeviceName: d.Device, Health: kubeletplugin.HealthStatusHealthy,
				LastUpdated: now, HealthCheckTimeout: reportTimeout}
			if p, ok := h.reported[d.Device]; ok {
				dh.Health, dh.Message = kubeletplugin.HealthStatusUnhealthy, p.Reason+": "+p.Message
			}
			r.Devices = append(r.Devices, dh)
		}
	}
	return r
}

// watch streams the prepared devices' health to the kubelet: now, at each
// change, and every reportEvery, until ctx ends.
func (h *health) watch(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	wake := make(chan struct{}, 1)
	h.mu.Lock()
	h.streams[wake] = true
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.streams, wake)
		h.mu.Unlock()
	}()
	t := h.opts.Clock.NewTicker(reportEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case reports <- h.report():
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-t.C():
		}
	}
}
