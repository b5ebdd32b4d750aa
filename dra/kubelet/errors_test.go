package kubelet

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/dra/metrics"
)

// A slice write the API server refuses, retried by the publisher, is logged once with what to check, again only when the error
// changes or after repeatEvery; each refusal counts as a failed
// publication.
func TestBackgroundErrorsLoggedOnce(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(t.Context(), logger)
	m := metrics.New()
	now := time.Unix(1000, 0)
	b := Errors{Metrics: m, now: func() time.Time { return now }}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceslices"}, "node-a-fastpath.dev-x",
		errors.New("ValidatingAdmissionPolicy 'fastpath-own-node-slices' denied request"))

	for range 5 {
		b.PublishFailed(ctx, forbidden, "Publishing the node's devices")
		now = now.Add(10 * time.Second)
	}
	b.Handle(ctx, errors.New("DRA gRPC server failed: closed"), "DRA gRPC server failed")
	b.PublishFailed(ctx, forbidden, "Publishing the node's devices")
	now = now.Add(repeatEvery)
	b.PublishFailed(ctx, forbidden, "Publishing the node's devices")

	logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	if n := strings.Count(logs, "denied request"); n != 3 {
		t.Errorf("the refusal was logged %d times, want 3 (first, after another error, after %s):\n%s", n, repeatEvery, logs)
	}
	if !strings.Contains(logs, "check the chart's RBAC and ValidatingAdmissionPolicy") {
		t.Errorf("the refusal is not explained:\n%s", logs)
	}
	if !strings.Contains(logs, `DRA gRPC server failed err="DRA gRPC server failed: closed" fatal=true`) {
		t.Errorf("a fatal error is not said to be fatal:\n%s", logs)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if !strings.Contains(string(body), `fastpath_publish_total{result="error"} 7`) {
		t.Errorf("the refusals are not counted as failed publications:\n%s", body)
	}
}
