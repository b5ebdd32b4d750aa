package dra

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/claimspec"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// The binding conditions (KEP-5007) of the devices --binding-conditions
// selects: the scheduler binds a pod whose claim has such a device only
// once the node set ConditionReadyToBind in the device's status, and
// allocates the claim again, elsewhere, once it set
// ConditionBindingFailed.
const (
	ConditionReadyToBind   = "fastpath.dev/ReadyToBind"
	ConditionBindingFailed = "fastpath.dev/BindingFailed"
)

// Reasons of the binding conditions, beyond the health reasons
// (devices.Reason*, ReasonDeviceGone) a failure may have.
const (
	// ReasonDeviceReady: the device is on the node, healthy, and its link
	// is up (a netdev) or it can be bound to vfio-pci (mode vfio).
	ReasonDeviceReady = "DeviceReady"
	// ReasonWaiting: the device is not ready yet (ConditionReadyToBind
	// False); the message says what it waits for.
	ReasonWaiting = "Waiting"
	// ReasonLinkDown: the device's link did not come up within the
	// binding timeout.
	ReasonLinkDown = "LinkDown"
	// ReasonNoIOMMUGroup: a claim in mode vfio got a PCI function without
	// an IOMMU group, which vfio-pci cannot take.
	ReasonNoIOMMUGroup = "NoIOMMUGroup"
)

// BindingOptions turn binding conditions on (--binding-conditions).
type BindingOptions struct {
	// Selector chooses the devices published with binding conditions;
	// nil: none.
	Selector devices.Selector
	// Timeout is how long a device may take to become ready after its
	// claim was allocated before the node reports the binding failed.
	// Default 1m.
	Timeout time.Duration
	// Interval is how often devices not ready yet are looked at again.
	// Default 1s.
	Interval time.Duration
	// Clock is injected by tests. Default: the real clock.
	Clock clock.WithTicker
}

func (o *BindingOptions) defaults() {
	if o.Timeout <= 0 {
		o.Timeout = time.Minute
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
}

// verdict is what the node says of an allocated device before its pod is
// bound.
type verdict struct {
	ready, failed bool
	reason, msg   string
}

// binder reports whether the devices with binding conditions allocated on
// this node are ready, for the scheduler to bind their pods or to
// allocate elsewhere. A device whose binding failed is tainted NoSchedule
// (TaintKey, the failure's reason) until it is ready again, so that the
// next allocation takes another.
type binder struct {
	d    *Driver
	opts BindingOptions
	// claims reads the claims of the informer; set by run.
	claims cache.Store

	mu sync.Mutex
	// pending are the claims with devices of this node not judged yet, by
	// namespace/name, with when the binder first saw them.
	pending map[string]time.Time
	// said is the verdict last written for each device of a claim, by
	// claim and device.
	said map[types.UID]map[string]verdict
	// failed are the devices whose binding failed, with why and when.
	failed map[string]failure
	wake   chan struct{}
}

// failure is why a device's binding failed, since when.
type failure struct {
	verdict
	at time.Time
}

func newBinder(d *Driver, opts BindingOptions) *binder {
	opts.defaults()
	return &binder{d: d, opts: opts, pending: map[string]time.Time{}, said: map[types.UID]map[string]verdict{}, failed: map[string]failure{}, wake: make(chan struct{}, 1)}
}

// ours says whether the claim has a device of this node with binding
// conditions.
func (b *binder) ours(claim *resourceapi.ResourceClaim) bool {
	return len(b.results(claim)) > 0
}

// results are the claim's devices of this node with binding conditions.
func (b *binder) results(claim *resourceapi.ResourceClaim) []resourceapi.DeviceRequestAllocationResult {
	if claim.Status.Allocation == nil {
		return nil
	}
	var out []resourceapi.DeviceRequestAllocationResult
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == devices.DriverName && r.Pool == b.d.opts.NodeName && len(r.BindingConditions) > 0 {
			out = append(out, r)
		}
	}
	return out
}

// run watches the claims until ctx ends.
func (b *binder) run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("binding")
	ctx = klog.NewContext(ctx, logger)
	factory := informers.NewSharedInformerFactory(b.d.opts.Client, 0)
	inf := factory.Resource().V1().ResourceClaims().Informer()
	b.claims = inf.GetStore()
	note := func(obj any) {
		if claim, ok := obj.(*resourceapi.ResourceClaim); ok {
			b.note(claim)
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    note,
		UpdateFunc: func(_, obj any) { note(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if claim, ok := obj.(*resourceapi.ResourceClaim); ok {
				b.forget(claim.UID)
				if _, prepared := b.d.opts.Store.Get(claims.Key{Driver: claims.DriverFastpath, UID: claim.UID}); !prepared {
					b.d.opts.Status.Forget(claim.UID)
				}
			}
		},
	})
	if err != nil {
		logger.Error(err, "Binding conditions: cannot watch claims; pods of devices with binding conditions wait for the scheduler's timeout")
		return
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
	}
	logger.Info("Reporting binding conditions", "timeout", b.opts.Timeout)
	tick := b.opts.Clock.NewTicker(b.opts.Interval)
	defer tick.Stop()
	for {
		b.judgeAll(ctx)
		b.recover(ctx)
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
		case <-tick.C():
		}
	}
}

// note is the informer's news of a claim added or changed: one with
// devices of this node to judge is pending.
func (b *binder) note(claim *resourceapi.ResourceClaim) {
	if claim.Status.Allocation == nil {
		// Deallocated (a failed binding): what was said of its devices
		// went with the allocation, and is said again of the next.
		b.forget(claim.UID)
	}
	if !b.ours(claim) {
		return
	}
	b.mu.Lock()
	key := claim.Namespace + "/" + claim.Name
	if _, ok := b.pending[key]; !ok {
		b.pending[key] = b.opts.Clock.Now()
	}
	b.mu.Unlock()
	b.poke()
}

func (b *binder) poke() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// forget drops what was said of a claim deleted or deallocated.
func (b *binder) forget(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.said, uid)
}

// judgeAll judges the pending claims' devices; a claim leaves the pending
// set once each has a verdict.
func (b *binder) judgeAll(ctx context.Context) {
	b.mu.Lock()
	keys := slices.Sorted(maps.Keys(b.pending))
	b.mu.Unlock()
	for _, key := range keys {
		obj, ok, _ := b.claims.GetByKey(key)
		var claim *resourceapi.ResourceClaim
		if ok {
			claim, _ = obj.(*resourceapi.ResourceClaim)
		}
		b.mu.Lock()
		seen := b.pending[key]
		b.mu.Unlock()
		if claim == nil || !b.ours(claim) || b.judge(ctx, claim, seen) {
			b.mu.Lock()
			delete(b.pending, key)
			b.mu.Unlock()
		}
	}
}

// judge looks at the claim's devices with binding conditions and writes
// what it finds in their status; it says whether each has a final verdict
// (ready or failed), in the status already or written now.
func (b *binder) judge(ctx context.Context, claim *resourceapi.ResourceClaim, seen time.Time) bool {
	logger := klog.FromContext(ctx)
	since := seen
	if at := claim.Status.Allocation.AllocationTimestamp; at != nil && at.Time.Before(since) {
		since = at.Time
	}
	final := true
	for _, res := range b.results(claim) {
		if decided(claim, res) {
			continue
		}
		v := b.check(claim, res)
		if !v.ready && !v.failed {
			final = false
			if waited := b.opts.Clock.Since(since); waited >= b.opts.Timeout {
				v = verdict{failed: true, reason: ReasonLinkDown, msg: fmt.Sprintf("%s, %s after the claim was allocated (binding timeout %s)", v.msg, waited.Round(time.Second), b.opts.Timeout)}
				final = true
			}
		}
		b.mu.Lock()
		if b.said[claim.UID] == nil {
			b.said[claim.UID] = map[string]verdict{}
		}
		last, said := b.said[claim.UID][res.Device]
		b.said[claim.UID][res.Device] = v
		b.mu.Unlock()
		if said && last == v {
			continue
		}
		ref := status.ClaimRef{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}
		b.d.opts.Status.Set(ctx, ref, bindingStatus(res, v))
		switch {
		case v.failed:
			logger.Info("Device not ready to bind: the scheduler allocates the claim again", "claim", klog.KObj(claim), "request", res.Request, "device", res.Device, "reason", v.reason, "message", v.msg)
			b.fail(ctx, res.Device, v)
		case v.ready:
			logger.V(2).Info("Device ready to bind", "claim", klog.KObj(claim), "request", res.Request, "device", res.Device)
		default:
			logger.V(2).Info("Device not ready to bind yet", "claim", klog.KObj(claim), "request", res.Request, "device", res.Device, "waitingFor", v.msg)
		}
	}
	return final
}

// decided says whether the device's status has a final binding verdict.
func decided(claim *resourceapi.ResourceClaim, res resourceapi.DeviceRequestAllocationResult) bool {
	for _, st := range claim.Status.Devices {
		if st.Driver != res.Driver || st.Pool != res.Pool || st.Device != res.Device || shareOf(st.ShareID) != shareOf((*string)(res.ShareID)) {
			continue
		}
		for _, c := range res.BindingFailureConditions {
			if apimeta.IsStatusConditionTrue(st.Conditions, c) {
				return true
			}
		}
		return slices.IndexFunc(res.BindingConditions, func(c string) bool { return !apimeta.IsStatusConditionTrue(st.Conditions, c) }) < 0
	}
	return false
}

func shareOf(id *string) string {
	if id == nil {
		return ""
	}
	return *id
}

// check says whether the allocated device is ready: on the node, healthy,
// its link up (a netdev), or bindable to vfio-pci (a claim in mode vfio).
func (b *binder) check(claim *resourceapi.ResourceClaim, res resourceapi.DeviceRequestAllocationResult) verdict {
	if res.AdminAccess != nil && *res.AdminAccess {
		// A view of the device, which may be in another pod: nothing of
		// the device needs to be ready.
		return verdict{ready: true, reason: ReasonDeviceReady, msg: fmt.Sprintf("a view of device %s (adminAccess)", res.Device)}
	}
	vfio := false
	if cfg, errs := claimspec.ResolveConfig(claim, res.Request); len(errs) == 0 {
		vfio = cfg.Mode == v1alpha1.ModeVFIO
	}
	return b.checkDevice(res.Device, vfio)
}

// checkDevice says whether the device is ready for a claim (in mode vfio
// or not).
func (b *binder) checkDevice(name string, vfio bool) verdict {
	dev, ok := b.d.inventoryMap()[name]
	switch {
	case !ok:
		return verdict{failed: true, reason: ReasonDeviceGone, msg: fmt.Sprintf("device %s is not on node %s (any more)", name, b.d.opts.NodeName)}
	case !dev.Health.Healthy():
		return verdict{failed: true, reason: dev.Health.Reason, msg: dev.Health.Message}
	}
	if p, bad := b.d.health.reportedProblem(name); bad {
		return verdict{failed: true, reason: p.Reason, msg: p.Message}
	}
	if vfio {
		if !dev.PCI.VFIOCapable() {
			return verdict{failed: true, reason: ReasonNoIOMMUGroup, msg: fmt.Sprintf("device %s has no IOMMU group: vfio-pci cannot take it", name)}
		}
		return verdict{ready: true, reason: ReasonDeviceReady, msg: fmt.Sprintf("device %s can be bound to vfio-pci", name)}
	}
	if n := dev.Netdev; n != nil && !linkUp(n.OperState) {
		return verdict{reason: ReasonWaiting, msg: fmt.Sprintf("the link of %s (%s) is %s", name, n.Name, n.OperState)}
	}
	return verdict{ready: true, reason: ReasonDeviceReady, msg: fmt.Sprintf("device %s is ready", name)}
}

// linkUp says whether an operational state lets traffic through: up, or
// unknown (a driver that does not say).
func linkUp(state string) bool { return state == "up" || state == "unknown" || state == "" }

// bindingStatus is the device's status entry saying v.
func bindingStatus(res resourceapi.DeviceRequestAllocationResult, v verdict) resourceapi.AllocatedDeviceStatus {
	now := metav1.Now()
	cond := func(t string, on bool) metav1.Condition {
		s := metav1.ConditionFalse
		if on {
			s = metav1.ConditionTrue
		}
		return metav1.Condition{Type: t, Status: s, Reason: v.reason, Message: v.msg, LastTransitionTime: now}
	}
	st := resourceapi.AllocatedDeviceStatus{Driver: res.Driver, Pool: res.Pool, Device: res.Device, ShareID: (*string)(res.ShareID)}
	for _, t := range res.BindingConditions {
		st.Conditions = append(st.Conditions, cond(t, v.ready))
	}
	for _, t := range res.BindingFailureConditions {
		st.Conditions = append(st.Conditions, cond(t, v.failed))
	}
	return st
}

// fail taints the device whose binding failed, and publishes it so.
func (b *binder) fail(ctx context.Context, device string, v verdict) {
	b.mu.Lock()
	f, was := b.failed[device]
	if !was {
		f.at = b.opts.Clock.Now()
	}
	f.verdict = v
	b.failed[device] = f
	b.mu.Unlock()
	if !was {
		b.d.republish(ctx)
	}
}

// recover lifts the taint of the devices whose binding failed once they
// are ready again (or gone).
func (b *binder) recover(ctx context.Context) {
	b.mu.Lock()
	names := slices.Sorted(maps.Keys(b.failed))
	b.mu.Unlock()
	changed := false
	for _, name := range names {
		v := b.checkDevice(name, false)
		if !v.ready && v.reason != ReasonDeviceGone {
			continue
		}
		klog.FromContext(ctx).Info("Device whose binding failed is ready again: taint lifted", "device", name)
		b.mu.Lock()
		delete(b.failed, name)
		b.mu.Unlock()
		changed = true
	}
	if changed {
		b.d.republish(ctx)
	}
}

// taints adds the taints of the devices whose binding failed to taints,
// for those not tainted already.
func (b *binder) taints(taints map[string][]resourceapi.DeviceTaint) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for name, f := range b.failed {
		if slices.ContainsFunc(taints[name], func(t resourceapi.DeviceTaint) bool { return t.Key == TaintKey }) {
			continue
		}
		added := metav1.NewTime(f.at.Truncate(time.Second))
		taints[name] = append(taints[name], resourceapi.DeviceTaint{Key: TaintKey, Value: f.reason, Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: &added})
	}
}
