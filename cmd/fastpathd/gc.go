package main

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"k8s.io/klog/v2"
)

// The daemon's garbage collector targets, unless $GOGC says otherwise.
// fastpathd idles between claims and discoveries, and its live heap is
// small (about 14 MiB with 1024 devices published): collecting at a
// quarter again the live heap instead of twice it keeps its resident
// memory 5-7 MiB smaller, for a few more collections per discovery. In a
// burst of claims (64 pods started at once: about 8 MB allocated a second)
// that quarter had the collector take a fifth of the daemon's CPU, on a
// node whose CPUs the runtime and the kubelet want too; the daemon then
// collects at Go's default, twice the live heap, until it has allocated
// less than busyAllocRate a second for gcQuiet.
const (
	idleGCPercent = 25
	busyGCPercent = 100
	busyAllocRate = 1 << 20 // bytes a second
	gcQuiet       = 10 * time.Second
	gcSample      = time.Second
)

// gcPace sets the collector's target by the daemon's allocation rate.
type gcPace struct {
	// set is debug.SetGCPercent.
	set func(int) int

	// busy is whether the target is busyGCPercent; last the bytes
	// allocated at the last sample; lastBusy the last sample over
	// busyAllocRate.
	busy     bool
	last     uint64
	lastBusy time.Time
}

// paceGC moves the collector from idleGCPercent, where the daemon set it,
// to busyGCPercent while the daemon allocates fast and back, until ctx
// ends.
func paceGC(ctx context.Context) {
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	allocated := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	g := &gcPace{set: debug.SetGCPercent, last: allocated()}
	t := time.NewTicker(gcSample)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			g.step(ctx, allocated(), now)
		}
	}
}

// step takes one sample: the bytes allocated since the daemon started, at
// now, gcSample after the last.
func (g *gcPace) step(ctx context.Context, allocated uint64, now time.Time) {
	rate := float64(allocated-g.last) / gcSample.Seconds()
	g.last = allocated
	switch {
	case rate >= busyAllocRate:
		g.lastBusy = now
		if !g.busy {
			g.busy = true
			g.set(busyGCPercent)
			klog.FromContext(ctx).V(4).Info("Collecting garbage at the busy target", "gcPercent", busyGCPercent, "allocatedPerSecond", uint64(rate))
		}
	case g.busy && now.Sub(g.lastBusy) >= gcQuiet:
		g.busy = false
		g.set(idleGCPercent)
		klog.FromContext(ctx).V(4).Info("Collecting garbage at the idle target", "gcPercent", idleGCPercent)
	}
}
