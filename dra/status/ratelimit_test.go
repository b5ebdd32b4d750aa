package status

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/dra/dratest"
)

// The daemon's other requests go before the statuses: a request issued
// while a thousand statuses are retried against a server that refuses
// them goes after at most the status requests already sent.
func TestRateLimiterOthersFirst(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := dratest.NewAPIServer(t)
	s.Refuse = func(verb, resource string) int {
		if resource == "resourceclaims/status" {
			return 500
		}
		return 0
	}
	limiter, err := NewRateLimiter(20, 4)
	if err != nil {
		t.Fatal(err)
	}
	config := s.Config()
	config.RateLimiter = limiter.Ahead()
	others, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	statusClient, err := kubernetes.NewForConfig(limiter.Paced(config))
	if err != nil {
		t.Fatal(err)
	}
	w := NewWriter(statusClient)
	w.Limiter, w.Backoff, w.MaxBackoff = limiter, time.Millisecond, time.Millisecond
	w.Start(ctx)
	for _, ref := range claimsOn(s, 1000) {
		w.Set(ctx, ref, statusOf(1))
	}
	// The statuses take the whole budget.
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		n, _ := claimRequests(s, 0, "update", 500)
		return n >= 20, nil
	}); err != nil {
		t.Fatal("the statuses were not written")
	}
	for range 5 {
		from := len(s.Requests())
		issued := time.Now()
		if _, err := others.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		before := 0
		for _, r := range s.Requests()[from:] {
			if r.Resource == "nodes" {
				break
			}
			before++
		}
		// Each worker may have taken its token before.
		if before > w.Workers {
			t.Errorf("%d status requests went before a request issued after them, want at most %d (the writes under way)", before, w.Workers)
		}
		t.Logf("the node's GET waited %v behind %d status requests", time.Since(issued), before)
	}
	if n := w.Pending(); n != 1000 {
		t.Errorf("%d statuses pending, want 1000", n)
	}
	cancel()
	w.Wait()
}
