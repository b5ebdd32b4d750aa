package nri

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestHooksStopWhenContextEnds: a hook waiting for its pod's lock (another
// hook of the pod holds it) returns when the runtime's context ends, with
// an error naming the pod and wrapping the context's, and does nothing.
func TestHooksStopWhenContextEnds(t *testing.T) {
	r := newNPWGRig(t)
	pod := npwgPod("net-a")
	unlock := r.plugin.pods.Lock(pod.UID)
	defer unlock()
	for name, hook := range map[string]func(context.Context, Pod) error{
		"RunPodSandbox":  r.plugin.AttachPod,
		"StopPodSandbox": r.plugin.DetachPod,
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(r.ctx)
			defer cancel()
			time.AfterFunc(100*time.Millisecond, cancel)
			done := make(chan error, 1)
			go func() { done <- hook(ctx, pod) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the hook did not return after its context ended")
			}
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "pod default/web") {
				t.Errorf("error %v, want the pod named and the context's end", err)
			}
			if len(r.cni.order) != 0 {
				t.Errorf("CNI ran: %v", r.cni.order)
			}
		})
	}
}
