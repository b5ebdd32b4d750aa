package bench

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fastpath-dra/fastpath/dra/metrics"
)

// BenchmarkMetricsScrape is one scrape of /metrics of a daemon that has
// been busy: both drivers' Prepares and Unprepares with successes and
// errors, every NRI hook, attaches and detaches in every latency bucket,
// 1024 devices published in four kinds, and the gauges the daemon reads
// at each scrape. It reports the size of the answer.
func BenchmarkMetricsScrape(b *testing.B) {
	m := metrics.New()
	fail := errors.New("failed")
	for i := range 4096 {
		took := time.Duration(1<<(i%15)) * time.Millisecond
		var err error
		if i%10 == 0 {
			err = fail
		}
		for _, driver := range []string{"fastpath.dev", "cni.dra.networking.x-k8s.io"} {
			m.Prepare(driver, err, took)
			m.Unprepare(driver, err, took)
		}
		for _, hook := range []string{"run_pod_sandbox", "stop_pod_sandbox", "remove_pod_sandbox", "create_container", "synchronize"} {
			m.Hook(hook, err, took)
		}
		m.Attach(err, took)
		m.Detach(err, took)
	}
	m.Published(map[string]int{"sriov-vf": 512, "vfio": 384, "netdev": 96, "memif": 32}, nil)
	m.GaugeByLabel("prepared_claims", "Claims prepared on the node, by driver.", "driver", func() map[string]float64 {
		return map[string]float64{"fastpath.dev": 60, "cni.dra.networking.x-k8s.io": 4}
	})
	m.Gauge("attached_devices", "Netdevs in pods and CNI networks added to pods now.", func() float64 { return 64 })
	m.Gauge("status_writes_pending", "Claims whose status is not written yet.", func() float64 { return 0 })
	m.GaugeByLabel("unhealthy_devices", "Devices reported unhealthy (tainted), by reason.", "reason", func() map[string]float64 {
		return map[string]float64{"PFLinkDown": 8}
	})
	h := m.Handler()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	var size int
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("scrape: %d", rec.Code)
		}
		size = rec.Body.Len()
	}
	b.ReportMetric(float64(size), "bytes/scrape")
}
