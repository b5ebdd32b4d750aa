package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/dratest"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// statusClaims is how many claims the node has in BenchmarkStatusOutage.
const statusClaims = 1000

// benchEnv is the value of a benchmark's parameter from the environment,
// def when it is not set.
func benchEnv[T any](b *testing.B, name string, def T, parse func(string) (T, error)) T {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def
	}
	t, err := parse(v)
	if err != nil {
		b.Fatalf("$%s: %v", name, err)
	}
	return t
}

// BenchmarkStatusOutage: the node's claim status writer through an API
// outage. 1,000 claims have their status written; the API server goes
// down (unavailable: it answers 503; closed: it closes every connection)
// for $FASTPATH_BENCH_OUTAGE (1s; RESULTS.md's figure is 40s), during
// which every claim's status changes (its pod's sandbox is new); it comes
// back, and the statuses are written at $FASTPATH_BENCH_QPS (the daemon's
// --kube-api-qps, with a burst of twice that; 500 here so that a run is
// short, 50 is the daemon's default). A ResourceSlice write goes through
// the daemon's other client in the middle of the outage and while the
// statuses catch up. Reported: each slice write's wait (under 1 s), the
// time from the API server's return to the last status written (under
// claims / QPS + 5 s, the bound, reported beside it), the requests that
// failed during the outage (status writes and probes), and the writer's
// memory per claim (the status and the claim it keeps). The API server is
// an httptest server behind real client-go clientsets, their rate
// limiters and retries included.
func BenchmarkStatusOutage(b *testing.B) {
	outage := benchEnv(b, "FASTPATH_BENCH_OUTAGE", time.Second, time.ParseDuration)
	qps := benchEnv(b, "FASTPATH_BENCH_QPS", 500.0, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) })
	for _, mode := range []struct {
		name string
		down dratest.Down
	}{{"unavailable", dratest.Unavailable}, {"closed", dratest.Closed}} {
		b.Run(mode.name, func(b *testing.B) {
			b.ReportAllocs()
			var r outageRun
			for b.Loop() {
				r = runOutage(b, mode.down, outage, qps)
			}
			bound := float64(statusClaims)/qps + 5
			b.ReportMetric(r.sliceDuring.Seconds(), "slice-wait-outage-s")
			b.ReportMetric(r.sliceAfter.Seconds(), "slice-wait-after-s")
			b.ReportMetric(r.catchUp.Seconds(), "catch-up-s")
			b.ReportMetric(bound, "bound-s")
			b.ReportMetric(float64(r.failed), "failed-requests")
			b.ReportMetric(r.perClaim, "B/claim")
			if r.sliceDuring >= time.Second || r.sliceAfter >= time.Second {
				b.Errorf("a slice write waited %v during the outage and %v after it, want under 1s", r.sliceDuring, r.sliceAfter)
			}
			if r.catchUp.Seconds() >= bound {
				b.Errorf("the statuses were all written %v after the API server came back, want under %d / %v + 5 = %.1fs", r.catchUp, statusClaims, qps, bound)
			}
		})
	}
}

// outageRun is what one run of BenchmarkStatusOutage measured.
type outageRun struct {
	sliceDuring, sliceAfter, catchUp time.Duration
	failed                           int
	perClaim                         float64
}

// podStatus is the status of the claim's device attached to the pod whose
// sandbox is sandbox.
func podStatus(i int, sandbox string) resourceapi.AllocatedDeviceStatus {
	dev := claims.Device{Request: "nic", Pool: dratest.Node, Device: fmt.Sprintf("vf-%d", i)}
	return status.NetdevReady(dev, status.Interface{Name: "net1", MAC: fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256), MTU: 9000,
		Addresses: []string{fmt.Sprintf("10.1.%d.%d/16", i/256, i%256)}, Sandbox: "/var/run/netns/cni-" + sandbox})
}

func runOutage(b *testing.B, down dratest.Down, outage time.Duration, qps float64) outageRun {
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	s := dratest.NewAPIServer(b)
	refs := make([]status.ClaimRef, statusClaims)
	for i := range refs {
		name := fmt.Sprintf("pod-%04d-nic", i)
		c := dratest.Claim(name, []dratest.Alloc{{Request: "nic", Device: fmt.Sprintf("vf-%d", i)}},
			dratest.FromClaim(dratest.InterfaceConfig(`"interface": {"name": "net1", "mtu": 9000, "addresses": ["10.1.0.1/16"]}`)))
		// As big as what the writer writes, so that the server's objects
		// keep their size.
		c.Status.Devices = []resourceapi.AllocatedDeviceStatus{podStatus(i, "00000000-0000-0000-0000-000000000000")}
		s.AddClaim(c)
		refs[i] = status.ClaimRef{Namespace: c.Namespace, Name: c.Name, UID: c.UID}
	}
	limiter, err := status.NewRateLimiter(float32(qps), int(2*qps))
	if err != nil {
		b.Fatal(err)
	}
	config := s.Config()
	config.RateLimiter = limiter.Ahead()
	others, err := kubernetes.NewForConfig(config)
	if err != nil {
		b.Fatal(err)
	}
	statusClient, err := kubernetes.NewForConfig(limiter.Paced(config))
	if err != nil {
		b.Fatal(err)
	}
	w := status.NewWriter(statusClient)
	w.Start(ctx)

	// The statuses of the pods started before the outage, not paced (not
	// measured): what the writer keeps of each claim.
	before := heapInUse()
	for i, ref := range refs {
		w.Set(ctx, ref, podStatus(i, "11111111-1111-1111-1111-111111111111"))
	}
	w.Wait()
	var r outageRun
	r.perClaim = float64(int64(heapInUse())-int64(before)) / statusClaims
	w.Limiter = limiter

	s.SetDown(down)
	from := len(s.Requests())
	for i, ref := range refs {
		w.Set(ctx, ref, podStatus(i, "22222222-2222-2222-2222-222222222222"))
	}
	half := time.NewTimer(outage / 2)
	<-half.C
	r.sliceDuring = writeSlice(ctx, others, "during")
	half.Reset(outage - outage/2)
	<-half.C
	for _, req := range s.Requests()[from:] {
		if req.Resource != "resourceslices" && req.Code != 200 {
			r.failed++
		}
	}

	s.SetDown(dratest.Up)
	back := time.Now()
	from = len(s.Requests())
	// Once the statuses take the whole budget.
	written := func() int {
		n := 0
		for _, req := range s.Requests()[from:] {
			if req.Resource == "resourceclaims/status" && req.Code == 200 {
				n++
			}
		}
		return n
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return written() >= int(qps), nil
	}); err != nil {
		b.Fatalf("%d statuses written after the outage", written())
	}
	r.sliceAfter = writeSlice(ctx, others, "after")
	stale := func() int {
		n := 0
		s.Claims(func(c *resourceapi.ResourceClaim) {
			if len(c.Status.Devices) != 1 || c.Status.Devices[0].Data == nil || !strings.Contains(string(c.Status.Devices[0].Data.Raw), "cni-22222222") {
				n++
			}
		})
		return n
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Minute, true, func(context.Context) (bool, error) {
		return w.Pending() == 0 && stale() == 0, nil
	}); err != nil {
		b.Fatalf("%d of %d claims with a stale status after the outage", stale(), statusClaims)
	}
	var last time.Time
	for _, req := range s.Requests()[from:] {
		if req.Resource == "resourceclaims/status" && req.Code == 200 {
			last = req.At
		}
	}
	r.catchUp = last.Sub(back)
	cancel()
	w.Wait()
	return r
}

// writeSlice creates a ResourceSlice through the daemon's other client
// and returns how long it took, answered or refused.
func writeSlice(ctx context.Context, client kubernetes.Interface, name string) time.Duration {
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-a-fastpath.dev-" + name},
		Spec: resourceapi.ResourceSliceSpec{Driver: "fastpath.dev", NodeName: new(dratest.Node),
			Pool: resourceapi.ResourcePool{Name: dratest.Node, ResourceSliceCount: 1}}}
	start := time.Now()
	_, _ = client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{})
	return time.Since(start)
}
