package metrics

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const namespace = "fastpath"

// latency buckets: 1 ms to about 16 s.
var buckets = prometheus.ExponentialBuckets(0.001, 2, 15)

// reviewBuckets are the admission webhook's: 50 µs to about 1.6 s (the
// API server gives it 2 s at most).
var reviewBuckets = prometheus.ExponentialBuckets(0.00005, 2, 16)

// Metrics are the daemon's metrics, in a registry of their own.
type Metrics struct {
	registry *prometheus.Registry

	prepare, unprepare *prometheus.CounterVec
	prepareDuration    *prometheus.HistogramVec
	unprepareDuration  *prometheus.HistogramVec
	hooks              *prometheus.CounterVec
	hookDuration       *prometheus.HistogramVec
	attach, detach     *prometheus.CounterVec
	attachDuration     prometheus.Observer
	detachDuration     prometheus.Observer
	published          *prometheus.GaugeVec
	publishes          *prometheus.CounterVec
	lastPublish        prometheus.Gauge
	statusFailed       *prometheus.CounterVec
	storeWritesFailed  *prometheus.CounterVec
	statusErrors       *prometheus.CounterVec
	reconciled         *prometheus.CounterVec
	reviews            *prometheus.CounterVec
	reviewDuration     *prometheus.HistogramVec
	apiRequests        *prometheus.CounterVec
	claimPrefetch      *prometheus.CounterVec
}

// New makes the metrics, with Go's runtime and the process's metrics.
func New() *Metrics {
	m := &Metrics{registry: prometheus.NewRegistry()}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
		m.registry.MustRegister(c)
		return c
	}
	histogram := func(name, help string, labels ...string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets}, labels)
		m.registry.MustRegister(h)
		return h
	}
	m.prepare = counter("prepare_total", "Claims prepared (NodePrepareResources), by driver and result.", "driver", "result")
	m.prepareDuration = histogram("prepare_duration_seconds", "Time to prepare a claim, by driver.", "driver")
	m.unprepare = counter("unprepare_total", "Claims unprepared (NodeUnprepareResources), by driver and result.", "driver", "result")
	m.unprepareDuration = histogram("unprepare_duration_seconds", "Time to unprepare a claim, by driver.", "driver")
	m.hooks = counter("nri_hook_total", "Calls of the runtime's NRI hooks, by hook and result.", "hook", "result")
	m.hookDuration = histogram("nri_hook_duration_seconds", "Time the runtime waited for an NRI hook, by hook.", "hook")
	m.attach = counter("attach_total", "Netdevs moved into pods, by result.", "result")
	m.attachDuration = histogram("attach_duration_seconds", "Time to put a netdev into a pod: the move, addresses, routes, link up, XDP.").WithLabelValues()
	m.detach = counter("detach_total", "Netdevs returned from pods, by result.", "result")
	m.detachDuration = histogram("detach_duration_seconds", "Time to return a netdev from a pod and restore it.").WithLabelValues()
	m.published = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "published_devices", Help: "Devices the node publishes in its ResourceSlices, by kind."}, []string{"kind"})
	m.registry.MustRegister(m.published)
	m.publishes = counter("publish_total", "Publications of the node's ResourceSlices, by result.", "result")
	m.lastPublish = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "last_publish_timestamp_seconds", Help: "When the node's ResourceSlices were last published successfully (Unix time)."})
	m.registry.MustRegister(m.lastPublish)
	m.statusFailed = counter("status_writes_failed_total", "Claim status writes given up, by reason (attempts, forbidden).", "reason")
	m.storeWritesFailed = counter("store_writes_failed_total", "Writes of the claim store's files (checkpoint, journal) that failed, by error (ENOSPC, EDQUOT, EROFS, EIO, other).", "error")
	m.statusErrors = counter("status_request_errors_total", "Requests of claim status writes that failed and are retried, by reason (unreachable: the API server could not be reached; conflict; refused: it refused them).", "reason")
	m.reconciled = counter("reconciled_claims_total", "Claims reconciled at start, by what was done (undone, reapplied, failed).", "action")
	m.reviews = counter("webhook_reviews_total", "Admission reviews the webhook answered, by kind (other: one it does not judge) and verdict (allowed, denied, unjudged, error).", "kind", "verdict")
	m.reviewDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "webhook_review_duration_seconds",
		Help: "Time to answer an admission review, from its body read to its answer written, by kind.", Buckets: reviewBuckets}, []string{"kind"})
	m.registry.MustRegister(m.reviewDuration)
	m.apiRequests = counter("api_requests_total", "Requests to the API server, by verb, resource (with its subresource) and status code (error: none came).", "verb", "resource", "code")
	m.claimPrefetch = counter("claim_prefetch_total", "Reads of a claim by the kubelet plugin at Prepare, by how they were answered (hit: by the claim read ahead when its pod was bound to the node; waited: by that read, once it ended; miss: by the API server).", "result")
	m.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.zero()
	return m
}

// Handler serves the metrics in Prometheus's text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{Registry: m.registry})
}

// Gauge adds a gauge read at each scrape.
// Names are the names of every metric registered, with their prefix, as
// /metrics gives them (a histogram's without its _bucket, _sum and
// _count), including those with no sample yet.
func (m *Metrics) Names() []string {
	ch := make(chan *prometheus.Desc)
	go func() {
		m.registry.Describe(ch)
		close(ch)
	}()
	var names []string
	for d := range ch {
		// A Desc says its name only in its String: fqName: "name".
		if _, rest, ok := strings.Cut(d.String(), `fqName: "`); ok {
			if name, _, ok := strings.Cut(rest, `"`); ok {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func (m *Metrics) Gauge(name, help string, read func() float64) {
	if m == nil {
		return
	}
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, read))
}

// GaugeByLabel adds a gauge with one label, its values read at each
// scrape.
func (m *Metrics) GaugeByLabel(name, help, label string, read func() map[string]float64) {
	if m == nil {
		return
	}
	m.registry.MustRegister(&labelledGauge{desc: prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, []string{label}, nil), read: read})
}

type labelledGauge struct {
	desc *prometheus.Desc
	read func() map[string]float64
}

func (g *labelledGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }
func (g *labelledGauge) Collect(ch chan<- prometheus.Metric) {
	for label, v := range g.read() {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, label)
	}
}

// Hooks are the runtime's NRI hooks Hook counts.
var Hooks = []string{"synchronize", "run_pod_sandbox", "create_container", "start_container", "stop_pod_sandbox", "remove_pod_sandbox"}

// zero makes the counters of failures exist, at 0, for every label value
// they may take but a driver's: a series that first appears at 1 has no
// increase, and an alert on its increase would miss the first failure.
func (m *Metrics) zero() {
	for _, r := range []string{"success", "error"} {
		for _, h := range Hooks {
			m.hooks.WithLabelValues(h, r)
		}
		m.attach.WithLabelValues(r)
		m.detach.WithLabelValues(r)
		m.publishes.WithLabelValues(r)
	}
	for _, e := range []string{"ENOSPC", "EDQUOT", "EROFS", "EIO", "other"} {
		m.storeWritesFailed.WithLabelValues(e)
	}
	for _, r := range []string{"attempts", "forbidden"} {
		m.statusFailed.WithLabelValues(r)
	}
	for _, r := range []string{"unreachable", "conflict", "refused"} {
		m.statusErrors.WithLabelValues(r)
	}
	for _, r := range []string{"hit", "waited", "miss"} {
		m.claimPrefetch.WithLabelValues(r)
	}
}

// Serving makes the counters of driver's Prepares and Unprepares exist,
// at 0, for both results (see zero): the driver calls it as it starts.
func (m *Metrics) Serving(driver string) {
	if m == nil {
		return
	}
	for _, r := range []string{"success", "error"} {
		m.prepare.WithLabelValues(driver, r)
		m.unprepare.WithLabelValues(driver, r)
	}
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "success"
}

// Prepare records the preparation of a claim.
func (m *Metrics) Prepare(driver string, err error, took time.Duration) {
	if m == nil {
		return
	}
	m.prepare.WithLabelValues(driver, result(err)).Inc()
	m.prepareDuration.WithLabelValues(driver).Observe(took.Seconds())
}

// Unprepare records the unpreparation of a claim.
func (m *Metrics) Unprepare(driver string, err error, took time.Duration) {
	if m == nil {
		return
	}
	m.unprepare.WithLabelValues(driver, result(err)).Inc()
	m.unprepareDuration.WithLabelValues(driver).Observe(took.Seconds())
}

// Hook records a call of an NRI hook.
func (m *Metrics) Hook(hook string, err error, took time.Duration) {
	if m == nil {
		return
	}
	m.hooks.WithLabelValues(hook, result(err)).Inc()
	m.hookDuration.WithLabelValues(hook).Observe(took.Seconds())
}

// Attach records a netdev put into a pod.
func (m *Metrics) Attach(err error, took time.Duration) {
	if m == nil {
		return
	}
	m.attach.WithLabelValues(result(err)).Inc()
	if err == nil {
		m.attachDuration.Observe(took.Seconds())
	}
}

// Detach records a netdev returned from a pod.
func (m *Metrics) Detach(err error, took time.Duration) {
	if m == nil {
		return
	}
	m.detach.WithLabelValues(result(err)).Inc()
	if err == nil {
		m.detachDuration.Observe(took.Seconds())
	}
}

// Published records a publication of the node's devices, counted by kind.
func (m *Metrics) Published(byKind map[string]int, err error) {
	if m == nil {
		return
	}
	m.publishes.WithLabelValues(result(err)).Inc()
	if err != nil {
		return
	}
	m.published.Reset()
	for kind, n := range byKind {
		m.published.WithLabelValues(kind).Set(float64(n))
	}
	m.lastPublish.SetToCurrentTime()
}

// StatusWriteFailed records a claim status write given up.
func (m *Metrics) StatusWriteFailed(reason string) {
	if m == nil {
		return
	}
	m.statusFailed.WithLabelValues(reason).Inc()
}

// StoreWriteFailed records a write of the claim store's files that
// failed, by its error: the errno's name, "other" for any other.
func (m *Metrics) StoreWriteFailed(errno string) {
	if m == nil {
		return
	}
	m.storeWritesFailed.WithLabelValues(errno).Inc()
}

// StatusRequestFailed records a request of a claim status write that
// failed and is retried.
func (m *Metrics) StatusRequestFailed(reason string) {
	if m == nil {
		return
	}
	m.statusErrors.WithLabelValues(reason).Inc()
}

// Reconciled records what the start did to a claim.
func (m *Metrics) Reconciled(action string) {
	if m == nil {
		return
	}
	m.reconciled.WithLabelValues(action).Inc()
}

// ClaimPrefetch records a read of a claim by the kubelet plugin at
// Prepare, by how it was answered (kubelet.PrefetchHit, ...).
func (m *Metrics) ClaimPrefetch(result string) {
	if m == nil {
		return
	}
	m.claimPrefetch.WithLabelValues(result).Inc()
}

// Review records an admission review the webhook answered.
func (m *Metrics) Review(kind, verdict string, took time.Duration) {
	if m == nil {
		return
	}
	m.reviews.WithLabelValues(kind, verdict).Inc()
	m.reviewDuration.WithLabelValues(kind).Observe(took.Seconds())
}
