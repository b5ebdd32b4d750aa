package kubelet

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// sliceServer is a fake clientset that, like the API server, names
// objects created with generateName, stamps each write with a new
// resourceVersion and a taint with the time it was added, and counts
// writes of ResourceSlices.
type sliceServer struct {
	*fake.Clientset
	rv     atomic.Int64
	writes atomic.Int64
	refuse atomic.Bool // refuse slice writes (Forbidden)
}

func newSliceServer(t *testing.T) *sliceServer {
	t.Helper()
	s := &sliceServer{Clientset: fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-a-uid"}})}
	s.PrependReactor("*", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		switch a.GetVerb() {
		case "create", "update":
			s.writes.Add(1)
			if s.refuse.Load() {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceslices"}, "", fmt.Errorf("denied"))
			}
			obj := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice)
			if obj.Name == "" {
				obj.Name = obj.GenerateName + strconv.FormatInt(s.rv.Load(), 36)
			}
			s.stamp(obj)
		case "delete":
			s.writes.Add(1)
		}
		return false, nil, nil
	})
	return s
}

func (s *sliceServer) stamp(obj *resourceapi.ResourceSlice) {
	obj.ResourceVersion = strconv.FormatInt(s.rv.Add(1), 10)
	obj.UID = types.UID("uid-" + obj.Name)
	for i := range obj.Spec.Devices {
		for j := range obj.Spec.Devices[i].Taints {
			if obj.Spec.Devices[i].Taints[j].TimeAdded == nil {
				obj.Spec.Devices[i].Taints[j].TimeAdded = &metav1.Time{Time: time.Unix(1000, 0)}
			}
		}
	}
}

func (s *sliceServer) slices(t *testing.T) []resourceapi.ResourceSlice {
	t.Helper()
	list, err := s.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := list.Items
	slices.SortFunc(out, func(a, b resourceapi.ResourceSlice) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// pool is n devices of one pool in slices of MaxDevicesPerSlice, the
// device named by tainted (if any) with a taint.
func pool(n int, attr string, tainted string) resourceslice.DriverResources {
	p := resourceslice.Pool{}
	for start := 0; start < n; start += MaxDevicesPerSlice {
		var s resourceslice.Slice
		for i := start; i < min(n, start+MaxDevicesPerSlice); i++ {
			d := resourceapi.Device{Name: fmt.Sprintf("dev-%d", i), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"fastpath.dev/attr": {StringValue: new(attr)}}}
			if d.Name == tainted {
				d.Taints = []resourceapi.DeviceTaint{{Key: "fastpath.dev/unhealthy", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
			}
			s.Devices = append(s.Devices, d)
		}
		p.Slices = append(p.Slices, s)
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{"node-a": p}}
}

// newTestPublisher is NewPublisher with a pool found empty starting at
// generation 1, as the kubelet plugin helper's controller starts it.
func newTestPublisher(client kubernetes.Interface, driver, node string, result func(context.Context, error)) *Publisher {
	p := NewPublisher(client, driver, node, result)
	p.firstGeneration = func() int64 { return 1 }
	return p
}

// A pool found empty (the kubelet deleted the node's slices when it or
// the daemon restarted) starts at a generation above any an earlier
// daemon wrote, so that a consumer still holding the deleted slices in a
// lagging cache takes the new ones; a pool found is bumped by one.
func TestPublisherFirstGeneration(t *testing.T) {
	srv := newSliceServer(t)
	before := time.Now().Unix()
	syncOnce(t, NewPublisher(srv, "fastpath.dev", "node-a", nil), pool(3, "a", ""), true)
	got := srv.slices(t)
	if len(got) != 1 || got[0].Spec.Pool.Generation < before || got[0].Spec.Pool.Generation > time.Now().Unix() {
		t.Fatalf("a pool found empty was written as %+v, want one slice of a generation the clock's seconds (%d or after)", got, before)
	}
	first := got[0].Spec.Pool.Generation
	syncOnce(t, NewPublisher(srv, "fastpath.dev", "node-a", nil), pool(200, "a", ""), true)
	got = srv.slices(t)
	if len(got) != 4 || got[0].Spec.Pool.Generation != first+1 {
		t.Errorf("a pool found at generation %d, grown, was written as %d slices of generation %d, want 4 of %d", first, len(got), got[0].Spec.Pool.Generation, first+1)
	}
}

// syncOnce runs one sync of want as run would and fails the test on an
// error.
func syncOnce(t *testing.T, p *Publisher, want resourceslice.DriverResources, dirty bool) {
	t.Helper()
	if _, err := p.sync(klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig())), &want, dirty); err != nil {
		t.Fatal(err)
	}
}

func checkPool(t *testing.T, got []resourceapi.ResourceSlice, slices int, generation int64) {
	t.Helper()
	if len(got) != slices {
		t.Fatalf("%d slices, want %d", len(got), slices)
	}
	for i, s := range got {
		if want := fmt.Sprintf("%05x-fastpath.dev-node-a-", i); !strings.HasPrefix(s.Name, want) {
			t.Errorf("slice %d is named %s, want it to begin with %s", i, s.Name, want)
		}
		if s.Spec.Pool.Generation != generation || s.Spec.Pool.ResourceSliceCount != int64(slices) || *s.Spec.NodeName != "node-a" {
			t.Errorf("slice %s: pool %+v on node %s, want generation %d of %d slices on node-a", s.Name, s.Spec.Pool, *s.Spec.NodeName, generation, slices)
		}
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != "node-a-uid" {
			t.Errorf("slice %s is owned by %+v, want the node", s.Name, s.OwnerReferences)
		}
	}
}

// The publisher writes what changed and nothing else, names and versions
// the slices as the kubelet plugin helper does, and takes over slices it
// finds as it wants them (a restarted daemon writes nothing).
func TestPublisherWritesOnlyChanges(t *testing.T) {
	srv := newSliceServer(t)
	p := newTestPublisher(srv, "fastpath.dev", "node-a", nil)

	syncOnce(t, p, pool(130, "a", ""), true)
	checkPool(t, srv.slices(t), 3, 1)
	if n := srv.writes.Swap(0); n != 3 {
		t.Errorf("first publication: %d writes, want 3 creates", n)
	}

	syncOnce(t, p, pool(130, "a", ""), false)
	syncOnce(t, p, pool(130, "a", ""), true)
	if n := srv.writes.Swap(0); n != 0 {
		t.Errorf("the same devices again: %d writes, want none", n)
	}

	// One device tainted: one slice updated in place, the generation kept.
	syncOnce(t, p, pool(130, "a", "dev-70"), false)
	got := srv.slices(t)
	checkPool(t, got, 3, 1)
	if n := srv.writes.Swap(0); n != 1 {
		t.Errorf("one device tainted: %d writes, want 1", n)
	}
	if taints := got[1].Spec.Devices[6].Taints; len(taints) != 1 {
		t.Errorf("dev-70 has taints %+v, want one", taints)
	}

	// A new daemon finds the slices as it wants them (the taint stamped
	// with a time by the API server included) and writes nothing.
	p2 := newTestPublisher(srv, "fastpath.dev", "node-a", nil)
	syncOnce(t, p2, pool(130, "a", "dev-70"), true)
	if n := srv.writes.Swap(0); n != 0 {
		t.Errorf("a restarted daemon wrote %d times, want none", n)
	}

	// Every slice changed: the generation is bumped and all rewritten.
	syncOnce(t, p2, pool(130, "b", ""), false)
	checkPool(t, srv.slices(t), 3, 2)
	if n := srv.writes.Swap(0); n != 3 {
		t.Errorf("all changed: %d writes, want 3", n)
	}

	// Fewer devices: the slices no longer wanted are deleted.
	syncOnce(t, p2, pool(10, "b", ""), false)
	got = srv.slices(t)
	checkPool(t, got, 1, 2)
	if len(got[0].Spec.Devices) != 10 {
		t.Errorf("%d devices published, want 10", len(got[0].Spec.Devices))
	}

	// More again: new slices are created, under a new generation.
	syncOnce(t, p2, pool(200, "b", ""), false)
	checkPool(t, srv.slices(t), 4, 3)
}

// Slices of the driver and node that are not the publisher's (a bad name,
// an old generation, a pool the driver no longer has) are deleted; other
// drivers' and nodes' slices are left alone.
func TestPublisherDeletesStrays(t *testing.T) {
	srv := newSliceServer(t)
	mk := func(name, driver, node, pool string, gen int64) {
		s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceSliceSpec{
			Driver: driver, NodeName: new(node), Pool: resourceapi.ResourcePool{Name: pool, Generation: gen, ResourceSliceCount: 1}}}
		if _, err := srv.ResourceV1().ResourceSlices().Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("stray-name", "fastpath.dev", "node-a", "node-a", 5)
	mk("00000-fastpath.dev-node-a-old", "fastpath.dev", "node-a", "node-a", 4)
	mk("00000-fastpath.dev-node-a-gone-pool", "fastpath.dev", "node-a", "elsewhere", 9)
	mk("00000-other.dev-node-a-x", "other.dev", "node-a", "node-a", 1)
	mk("00000-fastpath.dev-node-b-x", "fastpath.dev", "node-b", "node-b", 1)

	p := newTestPublisher(srv, "fastpath.dev", "node-a", nil)
	syncOnce(t, p, pool(3, "a", ""), true)
	var names []string
	for _, s := range srv.slices(t) {
		names = append(names, s.Name)
		if s.Spec.Driver == "fastpath.dev" && *s.Spec.NodeName == "node-a" && s.Spec.Pool.Generation != 6 {
			t.Errorf("slice %s has generation %d, want 6 (one above the highest found)", s.Name, s.Spec.Pool.Generation)
		}
	}
	if len(names) != 3 || !strings.HasPrefix(names[0], "00000-fastpath.dev-node-a-") || names[1] != "00000-fastpath.dev-node-b-x" || names[2] != "00000-other.dev-node-a-x" {
		t.Errorf("slices left: %v; want this node's one new slice and the other driver's and node's", names)
	}
}

// run publishes in the background, retries a refused write until it is
// allowed, and puts back a slice someone else deleted or changed.
func TestPublisherRunRepairs(t *testing.T) {
	srv := newSliceServer(t)
	var mu sync.Mutex
	var results []error
	p := newTestPublisher(srv, "fastpath.dev", "node-a", func(_ context.Context, err error) {
		mu.Lock()
		defer mu.Unlock()
		results = append(results, err)
	})
	p.retryFirst = 10 * time.Millisecond
	// The fake API server's watch does not replay what happened before
	// it began: a slice is changed only once the publisher watches.
	var watches atomic.Int32
	srv.PrependWatchReactor("resourceslices", func(k8stesting.Action) (bool, watch.Interface, error) {
		watches.Add(1)
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig())))
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })

	srv.refuse.Store(true)
	p.Publish(func() resourceslice.DriverResources { return pool(130, "a", "") })
	go func() { defer close(done); p.Run(ctx) }()
	lastResult := func() (int, error) {
		mu.Lock()
		defer mu.Unlock()
		if len(results) == 0 {
			return 0, nil
		}
		return len(results), results[len(results)-1]
	}
	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return cond(), nil
		}); err != nil {
			t.Fatalf("%s: not within 10s", what)
		}
	}
	poll("a refused write is told", func() bool { n, err := lastResult(); return n >= 2 && apierrors.IsForbidden(err) })
	srv.refuse.Store(false)
	poll("the slices are written once allowed", func() bool { _, err := lastResult(); return err == nil && len(srv.slices(t)) == 3 })
	checkPool(t, srv.slices(t), 3, 1)
	poll("the publisher watches the slices", func() bool { return watches.Load() == 1 })

	victim := srv.slices(t)[1]
	if err := srv.ResourceV1().ResourceSlices().Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll("a deleted slice is put back", func() bool {
		s := srv.slices(t)
		return len(s) == 3 && s[0].Spec.Pool.Generation == 2 && s[2].Spec.Pool.Generation == 2
	})
	checkPool(t, srv.slices(t), 3, 2)
	poll("the publisher watches the slices again", func() bool { return watches.Load() == 2 })

	changed := srv.slices(t)[2]
	changed.Spec.Devices = changed.Spec.Devices[:1]
	if _, err := srv.ResourceV1().ResourceSlices().Update(ctx, &changed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll("a changed slice is put back", func() bool { s := srv.slices(t); return len(s) == 3 && len(s[2].Spec.Devices) == 2 })
	checkPool(t, srv.slices(t), 3, 2)
}

// A watch the API server refuses is tried again after a backoff, without
// a new publish: a slice deleted by someone else after it is put back.
func TestPublisherRetriesWatch(t *testing.T) {
	srv := newSliceServer(t)
	var watches atomic.Int32
	srv.PrependWatchReactor("resourceslices", func(k8stesting.Action) (bool, watch.Interface, error) {
		if watches.Add(1) == 1 {
			return true, nil, apierrors.NewServiceUnavailable("the API server is restarting")
		}
		return false, nil, nil
	})
	p := newTestPublisher(srv, "fastpath.dev", "node-a", func(context.Context, error) {})
	p.retryFirst = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig())))
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	p.Publish(func() resourceslice.DriverResources { return pool(10, "a", "") })
	go func() { defer close(done); p.Run(ctx) }()
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return watches.Load() >= 2, nil
	}); err != nil {
		t.Fatalf("the refused watch was not tried again: %d watches", watches.Load())
	}
	victim := srv.slices(t)[0]
	if err := srv.ResourceV1().ResourceSlices().Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(srv.slices(t)) == 1, nil
	}); err != nil {
		t.Fatal("a slice deleted after the refused watch was not put back")
	}
}

// A pool with a slice of counter sets: the publisher writes the sets, finds
// them again as it wants them (nothing written: a restarted daemon), and
// rewrites the sets' slice alone when a set's counters change.
func TestPublisherCounters(t *testing.T) {
	srv := newSliceServer(t)
	p := newTestPublisher(srv, "fastpath.dev", "node-a", nil)
	withCounters := func(vfs int64) resourceslice.DriverResources {
		res := pool(10, "a", "")
		pl := res.Pools["node-a"]
		pl.Slices = append(pl.Slices, resourceslice.Slice{SharedCounters: []resourceapi.CounterSet{{Name: "pf-vfs",
			Counters: map[string]resourceapi.Counter{"vfs": {Value: *resource.NewQuantity(vfs, resource.DecimalSI)}}}}})
		res.Pools["node-a"] = pl
		return res
	}
	syncOnce(t, p, withCounters(4), true)
	got := srv.slices(t)
	checkPool(t, got, 2, 1)
	if cs := got[1].Spec.SharedCounters; len(cs) != 1 || cs[0].Name != "pf-vfs" || len(got[1].Spec.Devices) != 0 {
		t.Fatalf("the second slice holds %d devices and counter sets %+v, want the set pf-vfs alone", len(got[1].Spec.Devices), cs)
	}
	srv.writes.Swap(0)
	syncOnce(t, newTestPublisher(srv, "fastpath.dev", "node-a", nil), withCounters(4), true)
	if n := srv.writes.Swap(0); n != 0 {
		t.Errorf("the same counters again, by a new daemon: %d writes, want none", n)
	}
	syncOnce(t, p, withCounters(8), true)
	got = srv.slices(t)
	if n := srv.writes.Swap(0); n != 1 {
		t.Errorf("a set's counters changed: %d writes, want 1", n)
	}
	if q := got[1].Spec.SharedCounters[0].Counters["vfs"].Value; q.Value() != 8 {
		t.Errorf("the set holds %s vfs, want 8", q.String())
	}
}
