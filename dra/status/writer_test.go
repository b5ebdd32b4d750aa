package status

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

func allocatedClaim(name string, uid types.UID, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: uid},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}}}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: "fastpath.dev", Pool: "node-a", Device: d})
	}
	return c
}

func ready(device string) resourceapi.AllocatedDeviceStatus {
	return NotReady("fastpath.dev", "node-a", device, ReasonReady, "x")
}

// countUpdates counts the status updates the fake API server gets.
func countUpdates(client *fake.Clientset, fail error) *atomic.Int32 {
	var n atomic.Int32
	client.PrependReactor("update", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "status" {
			return false, nil, nil
		}
		n.Add(1)
		if fail != nil {
			return true, nil, fail
		}
		return false, nil, nil
	})
	return &n
}

func newWriter(t *testing.T, client *fake.Clientset) (*Writer, context.Context) {
	_, ctx := ktesting.NewTestContext(t)
	w := NewWriter(client)
	w.Backoff, w.MaxBackoff, w.Attempts = time.Millisecond, 2*time.Millisecond, 4
	w.Start(ctx)
	return w, ctx
}

func TestWriterWritesAndKeepsOtherDrivers(t *testing.T) {
	claim := allocatedClaim("c", "uid-c", "dev-a")
	claim.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: "other.example.com", Pool: "p", Device: "d"}}
	client := fake.NewClientset(claim)
	w, ctx := newWriter(t, client)
	w.Set(ctx, ClaimRef{Namespace: "default", Name: "c", UID: "uid-c"}, ready("dev-a"))
	w.Wait()
	got, _ := client.ResourceV1().ResourceClaims("default").Get(ctx, "c", metav1.GetOptions{})
	if len(got.Status.Devices) != 2 || got.Status.Devices[1].Device != "dev-a" {
		t.Errorf("status devices = %+v", got.Status.Devices)
	}
	if w.Pending() != 0 {
		t.Errorf("%d pending after the write", w.Pending())
	}
}

// The writer stops for good, without retrying, when its status is moot.
func TestWriterStops(t *testing.T) {
	ref := ClaimRef{Namespace: "default", Name: "c", UID: "uid-c"}
	for name, claim := range map[string]*resourceapi.ResourceClaim{
		"deleted":            nil,
		"replaced":           allocatedClaim("c", "uid-other", "dev-a"),
		"not allocated":      {ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c", UID: "uid-c"}},
		"device reallocated": allocatedClaim("c", "uid-c", "dev-b"),
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset()
			if claim != nil {
				client = fake.NewClientset(claim)
			}
			updates := countUpdates(client, nil)
			w, ctx := newWriter(t, client)
			w.Set(ctx, ref, ready("dev-a"))
			w.Wait()
			if n := updates.Load(); n != 0 {
				t.Errorf("%d status updates of a moot status", n)
			}
		})
	}
}

func TestWriterRetriesBounded(t *testing.T) {
	client := fake.NewClientset(allocatedClaim("c", "uid-c", "dev-a"))
	updates := countUpdates(client, apierrors.NewServiceUnavailable("busy"))
	w, ctx := newWriter(t, client)
	w.Set(ctx, ClaimRef{Namespace: "default", Name: "c", UID: "uid-c"}, ready("dev-a"))
	w.Wait()
	if n := updates.Load(); n != int32(w.Attempts) {
		t.Errorf("%d attempts, want %d", n, w.Attempts)
	}
}

func TestWriterForbiddenOnce(t *testing.T) {
	client := fake.NewClientset(allocatedClaim("c", "uid-c", "dev-a"), allocatedClaim("d", "uid-d", "dev-b"))
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims/status"}, "c", errors.New("no"))
	updates := countUpdates(client, forbidden)
	w, ctx := newWriter(t, client)
	w.Set(ctx, ClaimRef{Namespace: "default", Name: "c", UID: "uid-c"}, ready("dev-a"))
	w.Set(ctx, ClaimRef{Namespace: "default", Name: "d", UID: "uid-d"}, ready("dev-b"))
	w.Wait()
	if n := updates.Load(); n != 2 {
		t.Errorf("%d attempts, want one per claim: Forbidden is not retried", n)
	}
	if !w.forbidden {
		t.Error("the Forbidden was not noted")
	}
}

func TestWriterForgetStops(t *testing.T) {
	client := fake.NewClientset(allocatedClaim("c", "uid-c", "dev-a"))
	updates := countUpdates(client, apierrors.NewServiceUnavailable("busy"))
	_, ctx := ktesting.NewTestContext(t)
	w := NewWriter(client)
	w.Backoff, w.MaxBackoff, w.Attempts = 20*time.Millisecond, 20*time.Millisecond, 1000
	w.Start(ctx)
	w.Set(ctx, ClaimRef{Namespace: "default", Name: "c", UID: "uid-c"}, ready("dev-a"))
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return updates.Load() > 0, nil
	}); err != nil {
		t.Fatal("no write")
	}
	w.Forget("uid-c")
	w.Wait()
	if n := updates.Load(); n > 3 {
		t.Errorf("%d attempts after the claim was forgotten", n)
	}
}

// An API server that refuses writes for longer than any bound (here forty
// attempts) gets the status once it is back: the writer retries for as
// long as the claim is prepared.
func TestWriterRetriesThroughOutage(t *testing.T) {
	client := fake.NewClientset(allocatedClaim("c", "uid-c", "dev-a"))
	var n atomic.Int32
	client.PrependReactor("update", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && n.Add(1) <= 40 {
			return true, nil, apierrors.NewServiceUnavailable("the API server is down")
		}
		return false, nil, nil
	})
	_, ctx := ktesting.NewTestContext(t)
	w := NewWriter(client)
	w.Backoff, w.MaxBackoff = time.Millisecond, time.Millisecond
	w.Start(ctx)
	w.Set(ctx, ClaimRef{Namespace: "default", Name: "c", UID: "uid-c"}, ready("dev-a"))
	w.Wait()
	got, _ := client.ResourceV1().ResourceClaims("default").Get(ctx, "c", metav1.GetOptions{})
	if len(got.Status.Devices) != 1 || got.Status.Devices[0].Device != "dev-a" {
		t.Errorf("after the outage the status is %+v, want dev-a's", got.Status.Devices)
	}
	if n.Load() != 41 {
		t.Errorf("%d writes, want 40 refused and the one that landed", n.Load())
	}
}

// A write that finds the API server unreachable goes as soon as the probe
// says it is ready again, not at the end of its backoff: after an outage
// long enough for the backoff to reach its longest (here an hour), the
// status still lands at once.
func TestWriterWritesWhenTheAPIServerIsBack(t *testing.T) {
	client := fake.NewClientset(allocatedClaim("c", "uid-c", "dev-a"))
	var up atomic.Bool
	var refused atomic.Int32
	client.PrependReactor("*", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		if up.Load() {
			return false, nil, nil
		}
		refused.Add(1)
		return true, nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	})
	_, ctx := ktesting.NewTestContext(t)
	w := NewWriter(client)
	w.Backoff, w.MaxBackoff, w.ProbeInterval = time.Hour, time.Hour, time.Millisecond
	var probes atomic.Int32
	w.Probe = func(context.Context) error {
		probes.Add(1)
		if !up.Load() {
			return errors.New("connection refused")
		}
		return nil
	}
	w.Start(ctx)
	w.Set(ctx, ClaimRef{Namespace: "default", Name: "c", UID: "uid-c"}, ready("dev-a"))
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return refused.Load() > 0 && probes.Load() > 3, nil
	}); err != nil {
		t.Fatalf("the write was refused %d times and the API server probed %d times, want both", refused.Load(), probes.Load())
	}
	up.Store(true)
	written := make(chan struct{})
	go func() { w.Wait(); close(written) }()
	select {
	case <-written:
	case <-time.After(10 * time.Second):
		t.Fatal("the API server is back and the status is not written: the write waits for its backoff")
	}
	got, _ := client.ResourceV1().ResourceClaims("default").Get(ctx, "c", metav1.GetOptions{})
	if len(got.Status.Devices) != 1 || got.Status.Devices[0].Device != "dev-a" {
		t.Errorf("after the outage the status is %+v, want dev-a's", got.Status.Devices)
	}
}

// Refusals of an API server that serves (a Conflict, an admission error)
// wait for the backoff: the probe, which would find it ready at once,
// does not cut them short.
func TestWriterProbesOnlyWhenUnreachable(t *testing.T) {
	client := fake.NewClientset(allocatedClaim("c", "uid-c", "dev-a"))
	updates := countUpdates(client, apierrors.NewInternalError(errors.New("a webhook failed")))
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	w := NewWriter(client)
	w.Backoff, w.MaxBackoff, w.ProbeInterval = time.Hour, time.Hour, time.Millisecond
	var probes atomic.Int32
	w.Probe = func(context.Context) error { probes.Add(1); return nil }
	w.Start(ctx)
	w.Set(ctx, ClaimRef{Namespace: "default", Name: "c", UID: "uid-c"}, ready("dev-a"))
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return updates.Load() >= 1, nil
	}); err != nil {
		t.Fatal("no write")
	}
	// Long enough for a probe to have woken it.
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		return updates.Load() > 1, nil
	}); err == nil {
		t.Errorf("%d writes: a refusal of a serving API server was retried before its backoff", updates.Load())
	}
	if n := probes.Load(); n != 0 {
		t.Errorf("the API server was probed %d times after it refused a write", n)
	}
	cancel()
	w.Wait()
}

// A claim forgotten while its write waits for an API server that is down
// ends the write and the probe at once.
func TestWriterForgetStopsProbe(t *testing.T) {
	client := fake.NewClientset(allocatedClaim("c", "uid-c", "dev-a"))
	updates := countUpdates(client, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	_, ctx := ktesting.NewTestContext(t)
	w := NewWriter(client)
	w.Backoff, w.MaxBackoff, w.ProbeInterval = time.Hour, time.Hour, time.Millisecond
	var probes atomic.Int32
	w.Probe = func(context.Context) error { probes.Add(1); return errors.New("connection refused") }
	w.Start(ctx)
	w.Set(ctx, ClaimRef{Namespace: "default", Name: "c", UID: "uid-c"}, ready("dev-a"))
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return updates.Load() >= 1 && probes.Load() > 1, nil
	}); err != nil {
		t.Fatalf("%d writes and %d probes, want the write refused and the API server probed", updates.Load(), probes.Load())
	}
	w.Forget("uid-c")
	done := make(chan struct{})
	go func() { w.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the write or the probe still runs after the claim was forgotten")
	}
	if n := updates.Load(); n != 1 {
		t.Errorf("%d writes, want the one refused", n)
	}
}
