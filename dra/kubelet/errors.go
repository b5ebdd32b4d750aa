package kubelet

import (
	"context"
	"errors"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dra/metrics"
)

// Errors handles what goes wrong in the background: a
// ResourceSlice write the publisher retries with backoff for as long as
// it is refused (Forbidden: the admission policy or RBAC; Invalid), and
// what the kubelet plugin helper reports. Each would be logged at every
// retry; an error is logged when it says something new, and again at most
// every repeatEvery while it goes on. A failed publication counts in the
// metrics every time.
type Errors struct {
	Metrics *metrics.Metrics

	mu     sync.Mutex
	last   string
	logged time.Time
	now    func() time.Time
}

// repeatEvery is how often an error that goes on is logged again.
const repeatEvery = 10 * time.Minute

// publishFailed counts and logs a failed write of the node's slices; the
// publisher tries again.
func (b *Errors) PublishFailed(ctx context.Context, err error, msg string) {
	b.Metrics.Published(nil, err)
	b.log(ctx, err, msg, true)
}

// handle logs an error the kubelet plugin helper reports.
func (b *Errors) Handle(ctx context.Context, err error, msg string) {
	b.log(ctx, err, msg, errors.Is(err, kubeletplugin.ErrRecoverable))
}

func (b *Errors) log(ctx context.Context, err error, msg string, recoverable bool) {
	now := time.Now
	if b.now != nil {
		now = b.now
	}
	said := msg + ": " + err.Error()
	b.mu.Lock()
	repeat := said == b.last && now().Sub(b.logged) < repeatEvery
	if !repeat {
		b.last, b.logged = said, now()
	}
	b.mu.Unlock()
	if repeat {
		return
	}
	logger := klog.FromContext(ctx)
	switch {
	case apierrors.IsForbidden(err):
		logger.Error(err, msg, "hint", "the API server refuses fastpathd this write: check the chart's RBAC and ValidatingAdmissionPolicy (a daemon writes only its own node's ResourceSlices); logged again only if it changes or every 10m")
	case !recoverable:
		logger.Error(err, msg, "fatal", true)
	default:
		logger.Error(err, msg)
	}
}
