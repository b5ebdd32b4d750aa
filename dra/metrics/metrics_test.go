package metrics

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return string(body)
}

func TestMetrics(t *testing.T) {
	m := New()
	m.Prepare("fastpath.dev", nil, 3*time.Millisecond)
	m.Prepare("fastpath.dev", errors.New("no"), time.Millisecond)
	m.Unprepare("cni.dra.networking.x-k8s.io", nil, time.Millisecond)
	m.Hook("run_pod_sandbox", nil, 20*time.Millisecond)
	m.Attach(nil, 17*time.Millisecond)
	m.Detach(errors.New("gone"), time.Millisecond)
	m.Published(map[string]int{"sriov-vf": 4, "memif": 1}, nil)
	m.StatusWriteFailed("forbidden")
	m.Reconciled("undone")
	m.StoreWriteFailed("ENOSPC")
	m.Review("Pod", "denied", 300*time.Microsecond)
	m.Gauge("status_writes_pending", "pending", func() float64 { return 2 })
	m.GaugeByLabel("prepared_claims", "prepared", "driver", func() map[string]float64 { return map[string]float64{"fastpath.dev": 3} })
	body := scrape(t, m)
	for _, want := range []string{
		`fastpath_prepare_total{driver="fastpath.dev",result="success"} 1`,
		`fastpath_prepare_total{driver="fastpath.dev",result="error"} 1`,
		`fastpath_prepare_duration_seconds_count{driver="fastpath.dev"} 2`,
		`fastpath_unprepare_total{driver="cni.dra.networking.x-k8s.io",result="success"} 1`,
		`fastpath_nri_hook_total{hook="run_pod_sandbox",result="success"} 1`,
		`fastpath_nri_hook_duration_seconds_bucket{hook="run_pod_sandbox",le="0.032"} 1`,
		`fastpath_attach_duration_seconds_count 1`,
		`fastpath_detach_total{result="error"} 1`,
		`fastpath_published_devices{kind="sriov-vf"} 4`,
		`fastpath_publish_total{result="success"} 1`,
		`fastpath_status_writes_failed_total{reason="forbidden"} 1`,
		`fastpath_reconciled_claims_total{action="undone"} 1`,
		`fastpath_store_writes_failed_total{error="ENOSPC"} 1`,
		`fastpath_status_writes_pending 2`,
		`fastpath_webhook_reviews_total{kind="Pod",verdict="denied"} 1`,
		`fastpath_webhook_review_duration_seconds_bucket{kind="Pod",le="0.0004"} 1`,
		`fastpath_prepared_claims{driver="fastpath.dev"} 3`,
		`process_resident_memory_bytes`,
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the metrics lack %s", want)
		}
	}
	if !strings.Contains(body, "fastpath_last_publish_timestamp_seconds ") || strings.Contains(body, "fastpath_last_publish_timestamp_seconds 0\n") {
		t.Error("the last publication's time is not set")
	}
	// A failed publication keeps the last good counts and time.
	m.Published(nil, errors.New("API server away"))
	if body := scrape(t, m); !strings.Contains(body, `fastpath_published_devices{kind="memif"} 1`) || !strings.Contains(body, `fastpath_publish_total{result="error"} 1`) {
		t.Errorf("after a failed publication:\n%s", body)
	}
}

// A nil *Metrics records nothing and does not panic: parts run without
// metrics in tests.
func TestNilMetrics(t *testing.T) {
	var m *Metrics
	m.Prepare("d", nil, 0)
	m.Unprepare("d", nil, 0)
	m.Hook("h", nil, 0)
	m.Attach(nil, 0)
	m.Detach(nil, 0)
	m.Published(nil, nil)
	m.StatusWriteFailed("x")
	m.Reconciled("x")
	m.StoreWriteFailed("x")
	m.Gauge("g", "g", func() float64 { return 0 })
	m.GaugeByLabel("g", "g", "l", nil)
}
