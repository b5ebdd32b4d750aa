package status

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// RateLimiter is the daemon's one budget of API requests (--kube-api-qps,
// --kube-api-burst) in two classes. The daemon's clients (ResourceSlice
// publication, node labels, events, reads of claims and networks) take
// their tokens first, as from a plain token bucket: they never wait behind
// claims' statuses. The status writer takes only what they leave: a token
// while more than half the burst is in the bucket and no other request
// waits for one. After an API outage the statuses waiting for it go at the
// full rate when nothing else asks, and each other request then waits at
// most for the few status requests already sent.
//
// Status writes are the one class that can pile up (one per claim on the
// node, retried until they land); every other request of the daemon comes
// from a loop of its own that waits for its answer.
type RateLimiter struct {
	limiter *rate.Limiter
	qps     float32
	// reserve is the tokens status requests leave in the bucket for the
	// others' bursts.
	reserve float64
}

// NewRateLimiter returns a budget of qps requests a second, burst at once.
func NewRateLimiter(qps float32, burst int) (*RateLimiter, error) {
	if qps <= 0 || burst < 1 {
		return nil, fmt.Errorf("a rate of %v requests a second with a burst of %d: both must be positive", qps, burst)
	}
	return &RateLimiter{limiter: rate.NewLimiter(rate.Limit(qps), burst), qps: qps, reserve: float64(burst / 2)}, nil
}

// Ahead is the limiter of the daemon's clients (rest.Config.RateLimiter):
// their requests go before every status request.
func (l *RateLimiter) Ahead() flowcontrol.RateLimiter { return ahead{l} }

// Paced returns a copy of config for the status writer's client: the
// client itself does not throttle, since the writer waits for its turn
// (Wait) before each request.
func (l *RateLimiter) Paced(config *rest.Config) *rest.Config {
	config = rest.CopyConfig(config)
	config.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	return config
}

// Wait takes a token for a status request, waiting while the others'
// requests need the bucket; it fails when ctx ends first.
func (l *RateLimiter) Wait(ctx context.Context) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		now := time.Now()
		tokens := l.limiter.TokensAt(now)
		if tokens >= l.reserve+1 && l.limiter.AllowN(now, 1) {
			return nil
		}
		// Until the bucket refills above the reserve, unless the others
		// take it first.
		wait := time.Duration((l.reserve + 1 - tokens) / float64(l.qps) * float64(time.Second))
		wait = max(wait, time.Millisecond)
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// ahead is the class of every request but the status writer's: a token
// bucket, the writer's share of it taken only from its surplus.
type ahead struct{ l *RateLimiter }

var _ flowcontrol.RateLimiter = ahead{}

func (a ahead) TryAccept() bool { return a.l.limiter.Allow() }

func (a ahead) Accept() {
	r := a.l.limiter.Reserve()
	time.Sleep(r.Delay())
}

func (a ahead) Wait(ctx context.Context) error { return a.l.limiter.Wait(ctx) }

func (a ahead) Stop() {}

func (a ahead) QPS() float32 { return a.l.qps }

// waiter is what the writer waits on before each request: a RateLimiter.
type waiter interface {
	Wait(ctx context.Context) error
}

var _ waiter = (*RateLimiter)(nil)
