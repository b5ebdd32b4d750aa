package status

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane/fault"
	"github.com/fastpath-dra/fastpath/dra/metrics"
)

// fieldManager owns the entries fastpath writes in claims' status.
const fieldManager = "fastpath.dev"

// ClaimRef names a claim.
type ClaimRef struct {
	Namespace, Name string
	UID             types.UID
}

// Writer writes the status of claims' devices in the background: callers
// (the runtime's hooks among them) never wait for the API server. It is
// the node's one queue of claims' statuses: one entry per claim, however
// often its status changes before it is written, and the latest status of
// each (claim, driver, pool, device) wins. A few writes go at once, each
// request after the daemon's other requests (Limiter).
//
// A write is retried for as long as the claim is prepared on the node (an
// API server down for an hour gets the status when it is back); it stops
// for good when the claim is gone (NotFound, or replaced by another of the
// same name), when the device is no longer allocated to the claim, and when
// the daemon may not write claims' status (Forbidden: logged as an error
// once, with the permission it lacks). A refusal of a serving API server
// (a webhook's, an overload's) is retried after the claim's own backoff,
// Backoff doubled up to MaxBackoff.
//
// An API server that cannot be reached (down, restarting, not ready) is
// an outage of the whole queue, not of each claim: the writes stop, one
// line says so, and one retry at a time (a probe of the API server's
// /readyz, or else a write), on one backoff doubled up to ProbeInterval
// (MaxBackoff without a probe), finds out when it is back; then one line
// says how many statuses waited, and they are written as fast as the
// daemon's budget of requests allows: about the claims' count over its
// rate, in seconds.
//
// It reads the claim and updates its status rather than applying it
// server-side: a server-side apply of a claim's status re-encodes the
// opaque parameters recorded in status.allocation, and the API server then
// refuses that change to an immutable field. The claim it last read or
// wrote is kept (without its managed fields), so that a later status of
// the claim, the catch-up after an outage among them, costs one request,
// not two; a Conflict reads it again, and so does a status the kept claim
// has already (someone may have changed it since).
type Writer struct {
	client kubernetes.Interface
	// Attempts bounds the writes of one change (0: no bound, until the
	// claim is forgotten); Backoff is the first wait between them, doubled
	// up to MaxBackoff.
	Attempts            int
	Backoff, MaxBackoff time.Duration
	// Metrics counts the writes given up and the requests that failed;
	// nil for none.
	Metrics *metrics.Metrics
	// Probe says whether the API server is ready again (nil error) after
	// a write found it unreachable, at most every ProbeInterval while
	// writes wait for it; nil: a write finds out. NewWriter sets it to a
	// GET of the API server's /readyz when the client has a REST client.
	Probe         func(context.Context) error
	ProbeInterval time.Duration
	// Limiter gives each request of the writer its turn after the
	// daemon's other requests; nil: the client's own limit only.
	Limiter *RateLimiter
	// Workers is how many writes may be under way at once.
	Workers int

	mu   sync.Mutex
	idle *sync.Cond // broadcast when a claim is written or a goroutine ends
	base context.Context
	// claims holds every claim with a status; ready the claims to write
	// now, each once, in order; delayed those waiting for their own
	// backoff, soonest first.
	claims    map[types.UID]*claimStatus
	ready     []*claimStatus
	delayed   delayQueue
	workers   int
	ticking   bool          // the clock runs
	poke      chan struct{} // wakes the clock
	forbidden bool          // a Forbidden was logged
	// refusedLogged is when a refused write was last logged.
	refusedLogged time.Time
	outage        outage
	running       sync.WaitGroup
}

// outage is the writer's view of an API server it cannot reach: one for
// the whole queue.
type outage struct {
	down  bool
	since time.Time
	// failed counts the requests that failed since it began.
	failed int
	// backoff is the wait before the next retry, due at next; trial lets
	// one write go while down (no probe).
	backoff time.Duration
	next    time.Time
	trial   bool
}

// claimState is where a claim is in the queue.
type claimState int

const (
	idle    claimState = iota // written, given up, or moot
	queued                    // in ready
	delayed                   // in delayed
	writing                   // a worker writes it
)

type claimStatus struct {
	ref ClaimRef
	// devices are the latest status of each (driver, pool, device, share):
	// a claim has few.
	devices []resourceapi.AllocatedDeviceStatus
	// generation counts the changes of devices; the write of one that is
	// not the latest is followed by another.
	generation int
	state      claimState
	forgotten  bool
	// attempt counts the writes of the latest change; backoff is the
	// claim's own wait after a refusal, due at notBefore.
	attempt   int
	backoff   time.Duration
	notBefore time.Time
	index     int // in delayed
	// claim is the claim as last read or written, trimmed; nil: read it.
	claim *resourceapi.ResourceClaim
}

// requestTimeout bounds each request: an API server that accepts the
// connection and never answers is an outage too.
const requestTimeout = 30 * time.Second

// NewWriter returns a writer; Start gives it the context its writes run in.
func NewWriter(client kubernetes.Interface) *Writer {
	w := &Writer{client: client, Backoff: 100 * time.Millisecond, MaxBackoff: 30 * time.Second, ProbeInterval: time.Second, Workers: 4,
		base: context.Background(), claims: map[types.UID]*claimStatus{}, poke: make(chan struct{}, 1)}
	w.idle = sync.NewCond(&w.mu)
	if client == nil {
		return w
	}
	if rc := client.Discovery().RESTClient(); rc != nil {
		w.Probe = func(ctx context.Context) error {
			// One request a probe: client-go would retry a GET whose
			// connection is closed ten times, a second apart.
			return rc.Get().AbsPath("/readyz").MaxRetries(0).Do(ctx).Error()
		}
	}
	return w
}

// Start makes ctx the context of the writes: they stop when it ends.
func (w *Writer) Start(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.base = ctx
	context.AfterFunc(ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.idle.Broadcast()
	})
}

// Set records the status of a device of the claim and queues the claim,
// unless it is queued already.
func (w *Writer) Set(ctx context.Context, ref ClaimRef, st resourceapi.AllocatedDeviceStatus) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.claims[ref.UID]
	if !ok {
		c = &claimStatus{ref: ref, index: -1}
		w.claims[ref.UID] = c
	}
	if i := slices.IndexFunc(c.devices, func(d resourceapi.AllocatedDeviceStatus) bool { return sameDevice(d, st) }); i >= 0 {
		c.devices[i] = st
	} else {
		c.devices = append(c.devices, st)
	}
	c.generation++
	c.attempt = 0
	switch c.state {
	case idle:
		w.enqueue(c)
	case delayed:
		// A new status is not a retry: it goes now.
		heap.Remove(&w.delayed, c.index)
		w.enqueue(c)
	}
	if logger := klog.FromContext(ctx).V(5); logger.Enabled() {
		logger.Info("Claim status queued", "claim", ref.Namespace+"/"+ref.Name, "state", c.state)
	}
}

// Seen keeps the claim as it was read for its Prepare (the kubelet plugin
// helper reads it just before): the claim's first status write starts
// from it instead of reading it again. A claim changed since fails that
// write with a conflict, and is read again at once. A claim the writer has
// read or written since is not replaced.
func (w *Writer) Seen(claim *resourceapi.ResourceClaim) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.claims[claim.UID]
	if !ok {
		c = &claimStatus{ref: ClaimRef{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}, index: -1}
		w.claims[claim.UID] = c
	}
	if c.claim == nil && c.state != writing {
		c.claim = trim(claim.DeepCopy())
	}
}

// Forget drops what is known of a claim (it was unprepared): it leaves
// the queue, and a write under way is not retried.
func (w *Writer) Forget(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.claims[uid]
	if !ok {
		return
	}
	c.forgotten = true
	delete(w.claims, uid)
	switch c.state {
	case queued:
		// Left in ready; the worker that pops it drops it.
	case delayed:
		heap.Remove(&w.delayed, c.index)
	}
	w.idle.Broadcast()
}

// Pending is how many claims have a status not written yet: the depth of
// the queue, one entry per claim.
func (w *Writer) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pending()
}

func (w *Writer) pending() int {
	n := 0
	for _, c := range w.claims {
		if c.state != idle {
			n++
		}
	}
	return n
}

// Unreachable says whether the writer finds the API server unreachable
// now: its writes wait for it.
func (w *Writer) Unreachable() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.outage.down
}

// Wait waits until every status is written or given up, or the writer's
// context ended and its goroutines with it (tests).
func (w *Writer) Wait() {
	w.mu.Lock()
	for w.workers > 0 || w.ticking || (w.pending() > 0 && w.base.Err() == nil) {
		w.idle.Wait()
	}
	w.mu.Unlock()
	w.running.Wait()
}

// enqueue puts the claim at the end of the queue and starts a worker if
// one is needed.
func (w *Writer) enqueue(c *claimStatus) {
	c.state = queued
	w.ready = append(w.ready, c)
	w.kick()
}

// kick starts the workers the queue needs, up to Workers, and the clock
// when a claim waits for it.
func (w *Writer) kick() {
	if w.base.Err() != nil {
		return
	}
	want := len(w.ready)
	if w.outage.down {
		want = 0
		if w.outage.trial {
			want = 1
		}
	}
	for w.workers < max(w.Workers, 1) && w.workers < want {
		w.workers++
		w.running.Add(1)
		go w.work(w.base)
	}
	if (w.outage.down && len(w.ready) > 0) || w.delayed.Len() > 0 {
		if !w.ticking {
			w.ticking = true
			w.running.Add(1)
			go w.clock(w.base)
			return
		}
		select {
		case w.poke <- struct{}{}:
		default:
		}
	}
}

// next pops the claim to write next; nil when there is none, or the API
// server is down and no trial is due.
func (w *Writer) next(ctx context.Context) *claimStatus {
	if ctx.Err() != nil {
		return nil
	}
	if w.outage.down {
		if !w.outage.trial {
			return nil
		}
	}
	for len(w.ready) > 0 {
		c := w.ready[0]
		w.ready[0] = nil
		w.ready = w.ready[1:]
		if c.forgotten {
			continue
		}
		w.outage.trial = false
		return c
	}
	return nil
}

// work writes claims until the queue has none it may write now.
func (w *Writer) work(ctx context.Context) {
	defer w.running.Done()
	for {
		w.mu.Lock()
		c := w.next(ctx)
		if c == nil {
			w.workers--
			w.idle.Broadcast()
			w.mu.Unlock()
			return
		}
		c.state = writing
		c.attempt++
		gen := c.generation
		want := make([]resourceapi.AllocatedDeviceStatus, 0, len(c.devices))
		for _, st := range c.devices {
			want = append(want, *st.DeepCopy())
		}
		cached := c.claim
		w.mu.Unlock()

		attempt, cancel := context.WithTimeout(ctx, requestTimeout)
		stop, written, err := w.update(attempt, c.ref, want, cached)
		cancel()
		w.mu.Lock()
		w.done(ctx, c, gen, stop, written, err)
		w.idle.Broadcast()
		w.mu.Unlock()
	}
}

// refusedLogEvery: writes the API server refuses (it answers, with an
// error that is neither a conflict nor an outage's: a 5xx, a throttle, an
// invalid status) are logged once per refusedLogEvery for the whole
// writer, with how many claims wait on their backoff: a server refusing
// every claim's write logs one line, not one per claim. Each refused
// request is counted in the metrics.
const refusedLogEvery = 30 * time.Second

// done takes the outcome of a write of c's change gen: c leaves the queue,
// or goes back to it now, after its backoff, or once the API server is
// back.
func (w *Writer) done(ctx context.Context, c *claimStatus, gen int, stop string, written *resourceapi.ResourceClaim, err error) {
	logger := klog.FromContext(ctx).WithValues("claim", c.ref.Namespace+"/"+c.ref.Name)
	if err == nil && w.outage.down {
		w.reachable(ctx)
	}
	switch {
	case c.forgotten:
		c.state = idle
		return
	case ctx.Err() != nil:
		// The daemon stops: the claim stays pending.
		c.state = queued
		w.ready = append(w.ready, c)
		return
	case stop != "":
		logger.V(2).Info("Not writing claim status", "reason", stop)
		c.state, c.claim, c.backoff = idle, nil, 0
		return
	case err == nil:
		c.claim = written
		if c.attempt > 1 {
			logger.V(2).Info("Wrote claim status after failed attempts", "attempts", c.attempt)
		}
		c.backoff = 0
		if c.generation != gen {
			c.attempt = 0
			w.enqueue(c) // a newer status arrived: write it
			return
		}
		c.state, c.attempt = idle, 0
		return
	case apierrors.IsForbidden(err):
		if !w.forbidden {
			logger.Error(err, "Not allowed to write claim status: the daemon's service account needs get on resourceclaims and update on resourceclaims/status", "namespace", c.ref.Namespace)
		}
		w.forbidden = true
		w.Metrics.StatusWriteFailed("forbidden")
		c.state = idle
		return
	}
	reason := "refused"
	switch {
	case apierrors.IsConflict(err):
		reason = "conflict"
	case unreachable(err):
		reason = "unreachable"
	}
	w.Metrics.StatusRequestFailed(reason)
	if w.Attempts > 0 && c.attempt >= w.Attempts {
		logger.Error(err, "Writing claim status failed; giving up", "attempts", c.attempt)
		w.Metrics.StatusWriteFailed("attempts")
		c.state = idle
		return
	}
	switch reason {
	case "conflict":
		// Changed since it was read: read it again, now.
		c.claim = nil
		w.enqueue(c)
	case "unreachable":
		w.unreachable(ctx, err)
		// First in the queue again: it was the first to go.
		c.state = queued
		w.ready = append([]*claimStatus{c}, w.ready...)
		w.kick()
	default:
		c.backoff = min(max(2*c.backoff, w.Backoff), max(w.MaxBackoff, w.Backoff))
		now := time.Now()
		c.state, c.notBefore = delayed, now.Add(c.backoff)
		heap.Push(&w.delayed, c)
		if w.refusedLogged.IsZero() || now.Sub(w.refusedLogged) >= refusedLogEvery {
			w.refusedLogged = now
			logger.Info("Writing claim status failed; retrying until it lands or the claim is unprepared (said once per 30s for every claim)",
				"err", err.Error(), "attempt", c.attempt, "in", c.backoff, "claimsWaiting", w.delayed.Len())
		}
		w.kick()
	}
}

// unreachable notes a request that found the API server unreachable: the
// first begins an outage, said in one line.
func (w *Writer) unreachable(ctx context.Context, err error) {
	o := &w.outage
	if o.down {
		o.failed++
		return
	}
	now := time.Now()
	backoff := min(w.Backoff, w.retryCap())
	*o = outage{down: true, since: now, failed: 1, backoff: backoff, next: now.Add(backoff)}
	klog.FromContext(ctx).Info("The API server cannot be reached: claim statuses wait until it can", "err", err.Error(), "claims", w.pending())
}

// reachable ends the outage, in one line.
func (w *Writer) reachable(ctx context.Context) {
	o := w.outage
	w.outage = outage{}
	klog.FromContext(ctx).Info("The API server can be reached again: writing the claim statuses that waited for it",
		"claims", w.pending(), "after", time.Since(o.since).Round(time.Millisecond), "failedRequests", o.failed)
	w.kick()
}

// retryCap is the longest wait between the retries of an outage.
func (w *Writer) retryCap() time.Duration {
	if w.Probe != nil && w.ProbeInterval > 0 {
		return w.ProbeInterval
	}
	return max(w.MaxBackoff, w.Backoff)
}

// clock runs while claims wait for their backoff or for the API server:
// it queues each claim when its backoff ends, and retries an outage on
// its backoff, with a probe or by letting one write go.
func (w *Writer) clock(ctx context.Context) {
	defer w.running.Done()
	logger := klog.FromContext(ctx)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		w.mu.Lock()
		outage := w.outage.down && w.pending() > 0
		if ctx.Err() != nil || (!outage && w.delayed.Len() == 0) {
			w.ticking = false
			w.idle.Broadcast()
			w.mu.Unlock()
			return
		}
		now := time.Now()
		for w.delayed.Len() > 0 && !w.delayed[0].notBefore.After(now) {
			c := heap.Pop(&w.delayed).(*claimStatus)
			c.state = queued
			w.ready = append(w.ready, c)
		}
		probe := false
		o := &w.outage
		if outage && !o.trial && !o.next.After(now) {
			if w.Probe != nil {
				probe = true
			} else {
				o.trial = true
			}
			o.backoff = min(2*o.backoff, w.retryCap())
			o.next = now.Add(o.backoff)
		}
		w.kick()
		if !outage && w.delayed.Len() == 0 {
			// Every claim it waited for is queued: it stops (above)
			// rather than sleep with nothing to wake it.
			w.mu.Unlock()
			continue
		}
		next := now.Add(time.Hour)
		if w.delayed.Len() > 0 {
			next = w.delayed[0].notBefore
		}
		if outage && o.next.Before(next) {
			next = o.next
		}
		w.mu.Unlock()

		if probe {
			err := w.probe(ctx)
			w.mu.Lock()
			switch {
			case err == nil && w.outage.down:
				w.reachable(ctx)
			case err != nil && ctx.Err() == nil:
				w.outage.failed++
				w.Metrics.StatusRequestFailed("unreachable")
				logger.V(4).Info("The API server is not ready yet", "err", err.Error())
			}
			w.mu.Unlock()
			continue
		}
		timer.Reset(time.Until(next))
		select {
		case <-ctx.Done():
		case <-timer.C:
		case <-w.poke:
		}
	}
}

// probe asks the API server whether it is ready, in its turn.
func (w *Writer) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, max(w.ProbeInterval, 5*time.Second))
	defer cancel()
	if err := w.wait(ctx); err != nil {
		return err
	}
	return w.Probe(ctx)
}

// wait waits for the turn of a request of the writer.
func (w *Writer) wait(ctx context.Context) error {
	if w.Limiter == nil {
		return nil
	}
	return w.Limiter.Wait(ctx)
}

// unreachable says whether a failed request did not reach an API server
// that could serve it: no answer, or one saying that it is unavailable
// (starting, or not ready). An overloaded API server's refusals (429,
// timeouts) are left to each claim's backoff: they are not an outage.
func unreachable(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return true
	}
	return apierrors.IsServiceUnavailable(err)
}

// update sets the entries of want in the claim's status.devices, leaving
// other entries (other drivers' devices) as they are, starting from cached
// if it is not nil, and returns the claim written. A non-empty stop says
// why the status is moot.
func (w *Writer) update(ctx context.Context, ref ClaimRef, want []resourceapi.AllocatedDeviceStatus, cached *resourceapi.ResourceClaim) (stop string, written *resourceapi.ResourceClaim, err error) {
	var claim *resourceapi.ResourceClaim
	if cached != nil {
		claim = cached.DeepCopy()
	} else {
		if err := w.wait(ctx); err != nil {
			return "", nil, err
		}
		got, err := w.client.ResourceV1().ResourceClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return "the claim was deleted", nil, nil
		case err != nil:
			return "", nil, err
		case got.UID != ref.UID:
			return "the claim was replaced by another of the same name", nil, nil
		}
		claim = trim(got)
	}
	stop, changed := merge(claim, want)
	switch {
	case (stop != "" || !changed) && cached != nil:
		// What was kept may be old (someone else changed the claim since):
		// read the claim before giving up or deciding it has this status.
		return w.update(ctx, ref, want, nil)
	case stop != "":
		return stop, nil, nil
	case !changed:
		return "", claim, nil // the claim has this status already
	}
	if err := w.wait(ctx); err != nil {
		return "", nil, err
	}
	fault.Point("claim.status.before")
	claim, err = w.client.ResourceV1().ResourceClaims(ref.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{FieldManager: fieldManager})
	if err != nil {
		return "", nil, err
	}
	fault.Point("claim.status.written")
	return "", trim(claim), nil
}

// trim drops what the writer has no use for from a claim it keeps: its
// managed fields, which the API server keeps as they are on an update of
// the status.
func trim(claim *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	c := *claim
	c.ManagedFields = nil
	return &c
}

// merge sets the entries of want in claim's status.devices and says
// whether that changed them; a non-empty stop says why the status is moot.
func merge(claim *resourceapi.ResourceClaim, want []resourceapi.AllocatedDeviceStatus) (stop string, changed bool) {
	if claim.Status.Allocation == nil {
		return "the claim is no longer allocated", false
	}
	n := 0
	for _, st := range want {
		if !allocated(claim, st) {
			continue
		}
		n++
		i := slices.IndexFunc(claim.Status.Devices, func(d resourceapi.AllocatedDeviceStatus) bool { return sameDevice(d, st) })
		if i < 0 {
			claim.Status.Devices = append(claim.Status.Devices, st)
			changed = true
			continue
		}
		// Keep the transition times of conditions that do not change, and
		// the device's binding conditions (the scheduler's, which the
		// node set before the pod was bound) that st does not say.
		old := claim.Status.Devices[i].Conditions
		for _, c := range old {
			if slices.Contains(bindingConditions(claim, st), c.Type) && !slices.ContainsFunc(st.Conditions, func(n metav1.Condition) bool { return n.Type == c.Type }) {
				st.Conditions = append(slices.Clone(st.Conditions), c)
			}
		}
		for j, c := range st.Conditions {
			if k := slices.IndexFunc(old, func(o metav1.Condition) bool { return o.Type == c.Type }); k >= 0 && old[k].Status == c.Status {
				st.Conditions[j].LastTransitionTime = old[k].LastTransitionTime
			}
		}
		if !equality.Semantic.DeepEqual(claim.Status.Devices[i], st) {
			claim.Status.Devices[i], changed = st, true
		}
	}
	if n == 0 {
		return fmt.Sprintf("none of its %d devices is allocated to the claim any more", len(want)), false
	}
	return "", changed
}

// delayQueue is a heap of the claims waiting for their backoff, the
// soonest first.
type delayQueue []*claimStatus

func (q delayQueue) Len() int           { return len(q) }
func (q delayQueue) Less(i, j int) bool { return q[i].notBefore.Before(q[j].notBefore) }
func (q delayQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *delayQueue) Push(x any) {
	c := x.(*claimStatus)
	c.index = len(*q)
	*q = append(*q, c)
}
func (q *delayQueue) Pop() any {
	old := *q
	c := old[len(old)-1]
	old[len(old)-1] = nil
	c.index = -1
	*q = old[:len(old)-1]
	return c
}

// sameDevice says whether two entries of status.devices are of the same
// (driver, pool, device, share).
func sameDevice(a, b resourceapi.AllocatedDeviceStatus) bool {
	return a.Driver == b.Driver && a.Pool == b.Pool && a.Device == b.Device && shareID(a.ShareID) == shareID(b.ShareID)
}

// allocated reports whether the claim's allocation holds the device.
func allocated(claim *resourceapi.ResourceClaim, st resourceapi.AllocatedDeviceStatus) bool {
	return slices.ContainsFunc(claim.Status.Allocation.Devices.Results, func(r resourceapi.DeviceRequestAllocationResult) bool {
		return r.Driver == st.Driver && r.Pool == st.Pool && r.Device == st.Device && shareID((*string)(r.ShareID)) == shareID(st.ShareID)
	})
}

// bindingConditions are the binding conditions and binding failure
// conditions of the device in the claim's allocation.
func bindingConditions(claim *resourceapi.ResourceClaim, st resourceapi.AllocatedDeviceStatus) []string {
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == st.Driver && r.Pool == st.Pool && r.Device == st.Device && shareID((*string)(r.ShareID)) == shareID(st.ShareID) {
			return append(slices.Clone(r.BindingConditions), r.BindingFailureConditions...)
		}
	}
	return nil
}

// shareID is a device's share, "" for a device allocated once.
func shareID(id *string) string {
	if id == nil {
		return ""
	}
	return *id
}
