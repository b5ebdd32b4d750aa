//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// TestPublishedWhileAttached: a device moved into a pod stays published as
// it was in the host, its slice not written, while the pod runs, across
// a daemon restart while it runs, and after the pod is gone.
func TestPublishedWhileAttached(t *testing.T) {
	ctx := testContext(t)
	const port = 26270
	orig := dataplaneSetup(t, ctx, 70, port)[0]
	dev := "netdev-" + orig.Name
	before := publishedEntry(t, ctx, dev)
	if before == nil {
		t.Fatalf("%s is not published", dev)
	}

	claim := netdevClaim("e2e-stable", &v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{
		Name: "net1", MTU: 9000, MAC: "02:00:00:fa:57:70"}})
	claim.Spec.Devices.Requests[0].Exactly.Selectors = nil
	if _, err := bed.Client().ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bed.Client().ResourceV1().ResourceClaims("default").Delete(context.Background(), claim.Name, metav1.DeleteOptions{})
	})
	pod := claimPod("e2e-stable", "sleep", &corev1.PodResourceClaim{Name: "fast", ResourceClaimName: &claim.Name})
	if _, err := bed.RunPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", pod.Name) })
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := netlink.LinkByName(orig.Name)
		return err != nil, nil
	})
	if err != nil {
		t.Fatalf("%s never left the host for the pod", orig.Name)
	}
	// Discovery saw it leave (the daemon publishes an empty inventory),
	// and the node's slices were synced after.
	waitPublishedAfter(t, ctx, port, waitLogged(t, ctx, lastDaemon, `"Publishing devices"`, " devices=0 "))
	assertEntry(t, ctx, "while the pod runs", dev, before)

	lastDaemon.restart(t, ctx)
	waitPublishedAfter(t, ctx, port, waitLogged(t, ctx, lastDaemon, `"Publishing devices"`, " devices=0 "))
	assertEntry(t, ctx, "after a restart of the daemon while the pod runs", dev, before)

	if err := bed.DeletePod(ctx, "default", pod.Name); err != nil {
		t.Fatal(err)
	}
	assertReturned(t, ctx, orig)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return checkpointClaims(t, lastDaemon) == 0, nil
	})
	if err != nil {
		t.Fatal("the claim was never released")
	}
	back := waitLogged(t, ctx, lastDaemon, `"Publishing devices"`, " devices=1 ")
	released := waitLogged(t, ctx, lastDaemon, `"Unprepared claim"`)
	waitPublishedAfter(t, ctx, port, later(back, released))
	assertEntry(t, ctx, "after the pod", dev, before)
}

// sliceEntry is a device's entry in the node's slices, with the slice's
// name, resourceVersion and pool generation, and the slice's other
// devices.
type sliceEntry struct {
	slice, resourceVersion string
	generation             int64
	device                 resourceapi.Device
	others                 []resourceapi.Device
}

// publishedEntry is the device's entry in the node's slices, nil when it
// is not published.
func publishedEntry(t *testing.T, ctx context.Context, device string) *sliceEntry {
	t.Helper()
	all, err := nodeSlices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range all {
		for i, d := range s.Spec.Devices {
			if d.Name == device {
				others := slices.Delete(slices.Clone(s.Spec.Devices), i, i+1)
				return &sliceEntry{slice: name, resourceVersion: s.ResourceVersion, generation: s.Spec.Pool.Generation, device: d, others: others}
			}
		}
	}
	return nil
}

// assertEntry checks that the device's entry, and its slice, are as
// before: the slice not written since, unless another device of it
// changed (another test's stand-in coming back to the host as its pod
// goes), in the same pool generation; before then takes the slice as it
// is now.
func assertEntry(t *testing.T, ctx context.Context, when, device string, before *sliceEntry) {
	t.Helper()
	now := publishedEntry(t, ctx, device)
	switch {
	case now == nil:
		t.Errorf("%s: %s is no longer published", when, device)
	case now.slice == before.slice && now.generation == before.generation && now.resourceVersion != before.resourceVersion &&
		!apiequality.Semantic.DeepEqual(now.others, before.others):
		t.Logf("%s: slice %s was written (resourceVersion %s, was %s) for its other devices: %d now, %d before",
			when, now.slice, now.resourceVersion, before.resourceVersion, len(now.others), len(before.others))
		before.resourceVersion, before.others = now.resourceVersion, now.others
	case now.slice != before.slice || now.resourceVersion != before.resourceVersion || now.generation != before.generation:
		t.Errorf("%s: %s is in slice %s, resourceVersion %s, pool generation %d; want them unchanged: %s, %s, %d",
			when, device, now.slice, now.resourceVersion, now.generation, before.slice, before.resourceVersion, before.generation)
	}
	if now != nil && !apiequality.Semantic.DeepEqual(now.device, before.device) {
		t.Errorf("%s: %s is published as\n%+v\nwant as before\n%+v", when, device, now.device, before.device)
	}
}

// waitLogged waits until the daemon's current pod has logged a line with
// every one of parts, and returns when the last such line was logged (its
// klog header's time of day, this day).
func waitLogged(t *testing.T, ctx context.Context, d *daemon, parts ...string) time.Time {
	t.Helper()
	var at time.Time
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		log, err := bed.PodLogs(ctx, d.pod.Namespace, d.pod.Name)
		if err != nil {
			return false, nil
		}
		sc := bufio.NewScanner(strings.NewReader(log))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			l := sc.Text()
			if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(l, p) }) {
				if when, ok := klogTime(l); ok {
					at = when
				}
			}
		}
		return !at.IsZero(), nil
	})
	if err != nil {
		t.Fatalf("the daemon %s never logged a line with %q", d.pod.Name, parts)
	}
	return at
}

// klogTime is when a klog line was logged, by its header's time of day,
// this day.
func klogTime(line string) (time.Time, bool) {
	fields := strings.Fields(line)
	if len(fields) < 2 || len(fields[0]) != 5 {
		return time.Time{}, false
	}
	at, err := time.ParseInLocation("15:04:05.000000", fields[1], time.Local)
	if err != nil {
		return time.Time{}, false
	}
	now := time.Now()
	return time.Date(now.Year(), now.Month(), now.Day(), at.Hour(), at.Minute(), at.Second(), at.Nanosecond(), time.Local), true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// waitPublishedAfter waits until the daemon on port reports a sync of the
// node's slices that ended after at.
func waitPublishedAfter(t *testing.T, ctx context.Context, port int, at time.Time) {
	t.Helper()
	var last float64
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for line := range strings.Lines(scrapeMetrics(t, ctx, port)) {
			if v, ok := strings.CutPrefix(line, "fastpath_last_publish_timestamp_seconds "); ok {
				last, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
			}
		}
		return last > float64(at.UnixNano())/1e9, nil
	})
	if err != nil {
		t.Fatalf("the daemon reports no sync of the slices after %s (the last at %s)", at.Format(time.RFC3339Nano),
			time.Unix(0, int64(last*1e9)).Format(time.RFC3339Nano))
	}
}
