package status

import (
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
// (the runtime's hooks among them) never wait for the API server. The
// latest status of each (claim, driver, pool, device) wins. A write is
// retried with backoff for as long as the claim is prepared on the node
// (an API server down for an hour gets the status when it is back: the
// writer keeps only the latest status of each claim); it stops for good when
// the claim is gone (NotFound, or replaced by another of the same name),
// when the device is no longer allocated to the claim, and when the daemon
// may not write claims' status (Forbidden: logged as an error once, with
// the permission it lacks).
//
// A write that finds the API server unreachable (down, restarting, not
// ready) waits for its backoff or, sooner, for the API server to be
// ready again: one probe of its /readyz, every ProbeInterval while writes
// wait for it, wakes them all. However long an outage, the statuses
// changed during it are written within about ProbeInterval after it ends,
// not at the end of each claim's backoff (up to MaxBackoff later).
//
// It reads the claim and updates its status rather than applying it
// server-side: a server-side apply of a claim's status re-encodes the
// opaque parameters recorded in status.allocation, and the API server then
// refuses that change to an immutable field.
type Writer struct {
	client kubernetes.Interface
	// Attempts bounds the writes of one change (0: no bound, until the
	// claim is forgotten); Backoff is the first wait between them, doubled
	// up to MaxBackoff.
	Attempts            int
	Backoff, MaxBackoff time.Duration
	// Metrics counts the writes given up; nil for none.
	Metrics *metrics.Metrics
	// Probe says whether the API server is ready again (nil error) after
	// a write found it unreachable, every ProbeInterval while writes wait
	// for it; nil: writes wait for their backoff only. NewWriter sets it
	// to a GET of the API server's /readyz when the client has a REST
	// client.
	Probe         func(context.Context) error
	ProbeInterval time.Duration

	mu        sync.Mutex
	base      context.Context
	claims    map[types.UID]*claimStatus
	forbidden bool // a Forbidden was logged
	running   sync.WaitGroup
	// back is closed when the probe finds the API server ready again;
	// waiting counts the writes waiting for it, probing says that the
	// probe runs.
	back    chan struct{}
	waiting int
	probing bool
}

type claimStatus struct {
	ref        ClaimRef
	devices    map[deviceKey]resourceapi.AllocatedDeviceStatus
	generation int
	writing    bool
	forgotten  bool
	// stop is closed when the claim is forgotten: a write waiting to
	// retry ends at once.
	stop chan struct{}
}

type deviceKey struct{ driver, pool, device, share string }

// NewWriter returns a writer; Start gives it the context its writes run in.
func NewWriter(client kubernetes.Interface) *Writer {
	w := &Writer{client: client, Backoff: 100 * time.Millisecond, MaxBackoff: 30 * time.Second, ProbeInterval: time.Second,
		base: context.Background(), claims: map[types.UID]*claimStatus{}}
	if client == nil {
		return w
	}
	if rc := client.Discovery().RESTClient(); rc != nil {
		w.Probe = func(ctx context.Context) error {
			return rc.Get().AbsPath("/readyz").Do(ctx).Error()
		}
	}
	return w
}

// Start makes ctx the context of the writes: they stop when it ends.
func (w *Writer) Start(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.base = ctx
}

// Set records the status of a device of the claim and writes it.
func (w *Writer) Set(ctx context.Context, ref ClaimRef, st resourceapi.AllocatedDeviceStatus) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.claims[ref.UID]
	if !ok || c.forgotten {
		c = &claimStatus{ref: ref, devices: map[deviceKey]resourceapi.AllocatedDeviceStatus{}, stop: make(chan struct{})}
		w.claims[ref.UID] = c
	}
	c.devices[deviceKey{st.Driver, st.Pool, st.Device, shareID(st.ShareID)}] = st
	c.generation++
	if !c.writing {
		c.writing = true
		w.running.Add(1)
		go w.write(klog.NewContext(w.base, klog.FromContext(ctx).WithValues("claim", ref.Namespace+"/"+ref.Name)), c)
	}
}

// Forget drops what is known of a claim (it was unprepared): a write under
// way stops.
func (w *Writer) Forget(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.claims[uid]; ok {
		c.forgotten = true
		close(c.stop)
		delete(w.claims, uid)
	}
}

// Pending is how many claims have a status not written yet.
func (w *Writer) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.claims {
		if c.writing {
			n++
		}
	}
	return n
}

// Wait waits for the writes under way (tests).
func (w *Writer) Wait() { w.running.Wait() }

// retryLogEvery: a failed write is logged at its first attempt and every
// retryLogEvery after (about 10 minutes apart at the longest backoff).
const retryLogEvery = 20

// write writes the claim's device statuses until the latest one landed,
// the claim is gone or forgotten, or the attempts (if bounded) are spent.
func (w *Writer) write(ctx context.Context, c *claimStatus) {
	defer w.running.Done()
	logger := klog.FromContext(ctx)
	backoff := w.Backoff
	for attempt := 1; ; attempt++ {
		w.mu.Lock()
		if c.forgotten {
			c.writing = false
			w.mu.Unlock()
			return
		}
		gen := c.generation
		want := make([]resourceapi.AllocatedDeviceStatus, 0, len(c.devices))
		for _, st := range c.devices {
			want = append(want, *st.DeepCopy())
		}
		w.mu.Unlock()

		stop, err := w.update(ctx, c.ref, want)
		w.mu.Lock()
		switch {
		case stop != "":
			logger.V(2).Info("Not writing claim status", "reason", stop)
			c.writing = false
			w.mu.Unlock()
			return
		case err == nil && c.generation == gen:
			if attempt > 1 {
				logger.Info("Wrote claim status after failed attempts", "attempts", attempt)
			}
			c.writing = false
			w.mu.Unlock()
			return
		case err == nil:
			attempt, backoff = 0, w.Backoff // a newer status arrived: write it
			w.mu.Unlock()
			continue
		case apierrors.IsForbidden(err):
			if !w.forbidden {
				logger.Error(err, "Not allowed to write claim status: the daemon's service account needs get on resourceclaims and update on resourceclaims/status", "namespace", c.ref.Namespace)
			}
			w.forbidden = true
			w.Metrics.StatusWriteFailed("forbidden")
			c.writing = false
			w.mu.Unlock()
			return
		case w.Attempts > 0 && attempt >= w.Attempts:
			logger.Error(err, "Writing claim status failed; giving up", "attempts", attempt)
			w.Metrics.StatusWriteFailed("attempts")
			c.writing = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		// An outage is said when it begins and every retryLogEvery
		// attempts after, not at every retry of every claim.
		if !apierrors.IsConflict(err) {
			verbosity := 4
			if attempt%retryLogEvery == 1 {
				verbosity = 0
			}
			logger.V(verbosity).Info("Writing claim status failed; retrying until it lands or the claim is unprepared", "err", err.Error(), "attempt", attempt, "in", backoff)
		}
		var back <-chan struct{}
		if unreachable(err) {
			back = w.awaitBack()
		}
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-c.stop:
		case <-timer.C:
		case <-back:
			logger.V(2).Info("Writing claim status again: the API server is ready again", "attempt", attempt+1)
		}
		timer.Stop()
		if back != nil {
			w.mu.Lock()
			w.waiting--
			w.mu.Unlock()
		}
		if ctx.Err() != nil {
			w.mu.Lock()
			c.writing = false
			w.mu.Unlock()
			return
		}
		backoff = min(2*backoff, w.MaxBackoff)
	}
}

// unreachable says whether a failed request did not reach an API server
// that could serve it: no answer, or one saying that it is unavailable
// (starting, or not ready). An overloaded API server's refusals (429,
// timeouts) are left to the backoff: waking every write when its /readyz
// answers would only add to its load.
func unreachable(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return true
	}
	return apierrors.IsServiceUnavailable(err)
}

// awaitBack is closed when the API server is ready again, and starts the
// probe that finds out if it does not run; nil without a probe. The
// caller waits for it and then decrements w.waiting.
func (w *Writer) awaitBack() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.Probe == nil {
		return nil
	}
	w.waiting++
	if w.back == nil {
		w.back = make(chan struct{})
	}
	if !w.probing {
		w.probing = true
		w.running.Add(1)
		go w.probe(w.base, w.back)
	}
	return w.back
}

// probe probes the API server every ProbeInterval until it is ready,
// then closes back; it stops when no write waits any more.
func (w *Writer) probe(ctx context.Context, back chan struct{}) {
	defer w.running.Done()
	logger := klog.FromContext(ctx)
	interval := w.ProbeInterval
	if interval <= 0 {
		interval = time.Second
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
		case <-ticker.C:
		}
		w.mu.Lock()
		if ctx.Err() != nil || w.waiting == 0 {
			w.probing = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		attempt, cancel := context.WithTimeout(ctx, max(interval, 5*time.Second))
		err := w.Probe(attempt)
		cancel()
		if err != nil {
			logger.V(4).Info("The API server is not ready yet", "err", err.Error())
			continue
		}
		w.mu.Lock()
		logger.Info("The API server is ready again: writing the claim statuses that wait for it", "claims", w.waiting)
		close(back)
		w.back, w.probing = nil, false
		w.mu.Unlock()
		return
	}
}

// update sets the entries of want in the claim's status.devices, leaving
// other entries (other drivers' devices) as they are. A non-empty stop says
// why the status is moot.
func (w *Writer) update(ctx context.Context, ref ClaimRef, want []resourceapi.AllocatedDeviceStatus) (stop string, err error) {
	claim, err := w.client.ResourceV1().ResourceClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "the claim was deleted", nil
	case err != nil:
		return "", err
	case claim.UID != ref.UID:
		return "the claim was replaced by another of the same name", nil
	case claim.Status.Allocation == nil:
		return "the claim is no longer allocated", nil
	}
	n, changed := 0, false
	for _, st := range want {
		if !allocated(claim, st) {
			continue
		}
		n++
		i := slices.IndexFunc(claim.Status.Devices, func(d resourceapi.AllocatedDeviceStatus) bool {
			return d.Driver == st.Driver && d.Pool == st.Pool && d.Device == st.Device && shareID(d.ShareID) == shareID(st.ShareID)
		})
		if i < 0 {
			claim.Status.Devices = append(claim.Status.Devices, st)
			changed = true
			continue
		}
		// Keep the transition times of conditions that do not change.
		old := claim.Status.Devices[i].Conditions
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
		return fmt.Sprintf("none of its %d devices is allocated to the claim any more", len(want)), nil
	}
	if !changed {
		return "", nil // the claim has this status already
	}
	fault.Point("claim.status.before")
	_, err = w.client.ResourceV1().ResourceClaims(ref.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{FieldManager: fieldManager})
	if err == nil {
		fault.Point("claim.status.written")
	}
	return "", err
}

// allocated reports whether the claim's allocation holds the device.
func allocated(claim *resourceapi.ResourceClaim, st resourceapi.AllocatedDeviceStatus) bool {
	return slices.ContainsFunc(claim.Status.Allocation.Devices.Results, func(r resourceapi.DeviceRequestAllocationResult) bool {
		return r.Driver == st.Driver && r.Pool == st.Pool && r.Device == st.Device && shareID((*string)(r.ShareID)) == shareID(st.ShareID)
	})
}

// shareID is a device's share, "" for a device allocated once.
func shareID(id *string) string {
	if id == nil {
		return ""
	}
	return *id
}
