package dra

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// returnsWithin runs call and waits, up to a deadline, for it to return:
// a call that ignores its context's end would wait for a lock forever.
func returnsWithin[T any](t *testing.T, call func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- call() }()
	select {
	case v := <-done:
		return v
	case <-time.After(30 * time.Second):
		t.Fatal("did not return after its context ended")
	}
	var zero T
	return zero
}

// TestPrepareStopsWhenContextEnds: a Prepare waiting for its claim's lock
// (a runtime hook holds it) returns when its context ends, with an error
// naming the claim and wrapping the context's; the claims after it are
// not started.
func TestPrepareStopsWhenContextEnds(t *testing.T) {
	held := testClaim("held", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"interface": {"name": "net1"}`)))
	next := testClaim("next", []alloc{{Request: "nic", Device: vfNetdev2}}, fromClaim(config(`"interface": {"name": "net1"}`)))
	d, _, ctx := startTestDriver(t)
	unlock := d.store.Lock(claims.Key{Driver: claims.DriverFastpath, UID: held.UID})
	defer unlock()
	ctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	out := returnsWithin(t, func() map[types.UID]kubeletplugin.PrepareResult {
		out, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{held, next})
		if err != nil {
			t.Error(err)
		}
		return out
	})
	for _, c := range []*resourceapi.ResourceClaim{held, next} {
		err := out[c.UID].Err
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "claim default/"+c.Name) {
			t.Errorf("claim %s: %v, want the claim named and the context's end", c.Name, err)
		}
		if _, ok := d.store.Get(claims.Key{Driver: claims.DriverFastpath, UID: c.UID}); ok {
			t.Errorf("claim %s recorded", c.Name)
		}
	}
}

// TestUnprepareStopsWhenContextEnds: so does an Unprepare; the claim stays
// prepared, for the kubelet's retry.
func TestUnprepareStopsWhenContextEnds(t *testing.T) {
	claim := testClaim("web", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"interface": {"name": "net1"}`)))
	d, _, ctx := startTestDriver(t)
	out, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
	if err != nil || out[claim.UID].Err != nil {
		t.Fatalf("prepare: %v %v", err, out[claim.UID].Err)
	}
	key := claims.Key{Driver: claims.DriverFastpath, UID: claim.UID}
	unlock := d.store.Lock(key)
	ctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	errs := returnsWithin(t, func() map[types.UID]error {
		errs, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{NamespacedName: types.NamespacedName{Namespace: "default", Name: "web"}, UID: claim.UID}})
		if err != nil {
			t.Error(err)
		}
		return errs
	})
	unlock()
	if err := errs[claim.UID]; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "claim default/web") {
		t.Errorf("unprepare: %v, want the claim named and the context's end", err)
	}
	if c, ok := d.store.Get(key); !ok || !c.Prepared {
		t.Errorf("the claim is no longer prepared: %+v", c)
	}
}

// TestStepsStopWhenContextEnds: Prepare's steps stop between two when the
// context ends, the steps done left recorded, as after a crash.
func TestStepsStopWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ran []string
	steps := []step{
		{name: "one", apply: func(context.Context) error { ran = append(ran, "one"); cancel(); return nil }, undo: func(context.Context) error { return nil }},
		{name: "two", apply: func(context.Context) error { ran = append(ran, "two"); return nil }, undo: func(context.Context) error { return nil }},
	}
	store := testStore(t)
	c := &claims.Claim{Driver: claims.DriverFastpath, UID: "uid-steps", Namespace: "default", Name: "steps"}
	err := (stepRunner{store}).run(ctx, c, steps)
	if !errors.Is(err, context.Canceled) || strings.Join(ran, " ") != "one" {
		t.Errorf("run: %v, steps run: %v", err, ran)
	}
	rec, ok := store.Get(c.Key())
	if !ok || rec.Prepared || rec.StepState("one") != claims.StepDone || rec.StepState("two") != claims.StepStarted {
		t.Errorf("record %+v", rec)
	}
}
