//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// apiRequests reads the daemon's fastpath_api_requests_total, by
// "verb resource", summed over the status codes.
func apiRequests(t *testing.T, ctx context.Context, port int) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for line := range strings.Lines(scrapeMetrics(t, ctx, port)) {
		rest, ok := strings.CutPrefix(line, "fastpath_api_requests_total{")
		if !ok {
			continue
		}
		labels, value, _ := strings.Cut(rest, "} ")
		var verb, resource string
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "verb":
				verb = strings.Trim(v, `"`)
			case "resource":
				resource = strings.Trim(v, `"`)
			}
		}
		n, _ := strconv.ParseFloat(strings.TrimSpace(value), 64)
		out[verb+" "+resource] += n
	}
	return out
}

// writeVerbs are the verbs that write.
var writeVerbs = []string{"create", "update", "patch", "delete", "deletecollection"}

// TestAPIWritesPerPod: what the daemon writes to the API server for a
// burst of pods, each with one netdev claim on its own device, from
// their creation to their deletion and the devices' return, read from
// its own request counters: no ResourceSlice write, one claim status
// write per claim start (the device ready with its network data), no
// event. The figures per pod are printed.
func TestAPIWritesPerPod(t *testing.T) {
	ctx := testContext(t)
	const port, pods = 26275, 4
	// Returns once the four devices are in the node's slices: the
	// daemon's start-up (its checks, its first publish) is done.
	setup := dataplaneSetup(t, ctx, 75, port, 76, 77, 78)
	before := apiRequests(t, ctx, port)
	prefetchBefore := scrapeMetrics(t, ctx, port)

	for i := range pods {
		name := fmt.Sprintf("e2e-apiwrites-%d", i)
		claim := netdevClaim(name, nil)
		claim.Spec.Devices.Requests[0].Exactly.Selectors = nil
		if _, err := bed.Client().ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = bed.Client().ResourceV1().ResourceClaims("default").Delete(context.Background(), name, metav1.DeleteOptions{})
		})
		pod := claimPod(name, "sleep", &corev1.PodResourceClaim{Name: "fast", ResourceClaimName: &claim.Name})
		if _, err := bed.Client().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", name) })
	}
	for i := range pods {
		if _, err := bed.WaitPod(ctx, "default", fmt.Sprintf("e2e-apiwrites-%d", i), 90*time.Second, func(p *corev1.Pod) (bool, error) {
			return p.Status.Phase == corev1.PodRunning, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// Each claim's status says its device is ready, once.
	for i := range pods {
		name := fmt.Sprintf("e2e-apiwrites-%d", i)
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			c, err := bed.Client().ResourceV1().ResourceClaims("default").Get(ctx, name, metav1.GetOptions{})
			return err == nil && len(c.Status.Devices) == 1 && len(c.Status.Devices[0].Conditions) > 0, nil
		})
		if err != nil {
			t.Fatalf("claim %s: no device status", name)
		}
	}
	for i := range pods {
		if err := bed.DeletePod(ctx, "default", fmt.Sprintf("e2e-apiwrites-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, orig := range setup {
		assertReturned(t, ctx, orig)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return checkpointClaims(t, lastDaemon) == 0, nil
	})
	if err != nil {
		t.Fatal("the claims were never released")
	}
	// The devices back in the host are seen and published (a write only
	// if what is published changed).
	waitPublishedAfter(t, ctx, port, waitLogged(t, ctx, lastDaemon, `"Publishing devices"`, fmt.Sprintf(" devices=%d ", len(setup))))
	after := apiRequests(t, ctx, port)
	prefetchAfter := scrapeMetrics(t, ctx, port)

	perPod := map[string]float64{}
	var rows []string
	for key, n := range after {
		verb, resource, _ := strings.Cut(key, " ")
		if d := n - before[key]; d > 0 {
			perPod[key] = d / pods
			kind := "read"
			for _, w := range writeVerbs {
				if verb == w {
					kind = "write"
				}
			}
			rows = append(rows, fmt.Sprintf("%-5s %-6s %-32s %5.2f per pod", kind, verb, resource, d/pods))
		}
	}
	sort.Strings(rows)
	t.Logf("the daemon's API requests for %d pods with a netdev claim each, created, Running, deleted, their devices back:\n%s", pods, strings.Join(rows, "\n"))
	for _, w := range writeVerbs {
		if n := perPod[w+" resourceslices"]; n != 0 {
			t.Errorf("%s resourceslices: %.2f per pod, want none", w, n)
		}
		if n := perPod[w+" events"]; n != 0 {
			t.Errorf("%s events: %.2f per pod, want none (nothing failed)", w, n)
		}
	}
	if n := perPod["update resourceclaims/status"] + perPod["patch resourceclaims/status"]; n > 1 {
		t.Errorf("claim status writes: %.2f per claim start, want at most 1", n)
	}
	// Each claim is read once, when its pod is bound to the node
	// (--claim-prefetch), and the kubelet plugin's read at Prepare is
	// answered with it. The daemon's watch of its pods and the kubelet's
	// race: under load the kubelet may ask for a claim before the daemon
	// has seen its pod bound, and the helper reads the API server then (a
	// miss). Each miss is one more read, and most reads are answered by
	// the read ahead.
	counts := map[string]float64{}
	for _, r := range []string{"hit", "waited", "miss"} {
		series := fmt.Sprintf("fastpath_claim_prefetch_total{result=%q}", r)
		counts[r] = gaugeValue(prefetchAfter, series) - gaugeValue(prefetchBefore, series)
		t.Logf("the kubelet plugin's reads of a claim at Prepare, %s: %.0f", r, counts[r])
	}
	prefetched := counts["hit"] + counts["waited"]
	if n, want := perPod["get resourceclaims"], 1+counts["miss"]/pods; n > want {
		t.Errorf("get resourceclaims: %.2f per pod, want at most %.2f (read ahead and given to Prepare; %.0f misses)", n, want, counts["miss"])
	}
	if prefetched+counts["miss"] != pods {
		t.Errorf("%.0f of the kubelet plugin's reads of a claim counted, want %d", prefetched+counts["miss"], pods)
	}
	if prefetched < pods/2 {
		t.Errorf("%.0f of the kubelet plugin's %d reads of a claim answered by the read ahead, want most", prefetched, pods)
	}
}
