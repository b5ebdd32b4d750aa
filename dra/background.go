package dra

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

// backgroundErrors handles what the kubelet plugin helper meets in the
// background: its ResourceSlice controller retries a refused write with
// backoff for as long as it is refused (Forbidden: the admission policy or
// RBAC; Invalid), and would log the same refusal at every retry. An error
// is logged when it says something new, and again at most every
// repeatEvery while it goes on; a refusal by the API server counts as a
// failed publication in the metrics every time.
type backgroundErrors struct {
	metrics *metrics.Metrics

	mu     sync.Mutex
	last   string
	logged time.Time
	now    func() time.Time
}

// repeatEvery is how often an error that goes on is logged again.
const repeatEvery = 10 * time.Minute

func (b *backgroundErrors) handle(ctx context.Context, err error, msg string) {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		b.metrics.Published(nil, err)
	}
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
	case !errors.Is(err, kubeletplugin.ErrRecoverable):
		logger.Error(err, msg, "fatal", true)
	default:
		logger.Error(err, msg)
	}
}
