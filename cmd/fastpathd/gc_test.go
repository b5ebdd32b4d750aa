package main

import (
	"context"
	"slices"
	"testing"
	"time"
)

// The collector's target goes to busy with the first second over the
// rate, stays there through a lull shorter than gcQuiet, and goes back to
// idle gcQuiet after the last busy second.
func TestGCPace(t *testing.T) {
	var set []int
	g := &gcPace{set: func(p int) int { set = append(set, p); return 0 }}
	ctx := context.Background()
	start := time.Unix(0, 0)
	var allocated uint64
	second := func(i int, bytes uint64) {
		allocated += bytes
		g.step(ctx, allocated, start.Add(time.Duration(i)*gcSample))
	}
	i := 1
	for ; i <= 3; i++ {
		second(i, 64<<10) // idle: a scrape, a probe
	}
	if len(set) != 0 {
		t.Fatalf("idle seconds set the target: %v", set)
	}
	second(i, 8<<20) // a burst
	i++
	if !slices.Equal(set, []int{busyGCPercent}) {
		t.Fatalf("after a busy second the targets set are %v, want [%d]", set, busyGCPercent)
	}
	second(i, 8<<20)
	i++
	lastBusy := i - 1
	for ; time.Duration(i-lastBusy)*gcSample < gcQuiet; i++ {
		second(i, 0)
	}
	if !slices.Equal(set, []int{busyGCPercent}) {
		t.Fatalf("within gcQuiet of the last busy second the targets set are %v, want [%d]", set, busyGCPercent)
	}
	second(i, 0)
	if !slices.Equal(set, []int{busyGCPercent, idleGCPercent}) {
		t.Fatalf("gcQuiet after the last busy second the targets set are %v, want [%d %d]", set, busyGCPercent, idleGCPercent)
	}
}
