package kubelet

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const prefetchNode = "node-a"

func prefetchClaim(name, driver string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "nic", Driver: driver, Pool: prefetchNode, Device: "vf-0"}},
		}}},
	}
}

// prefetchPod is a pod of node naming claim through its template's
// status, in phase.
func prefetchPod(name, node, claim string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("pod-" + name)},
		Spec:       corev1.PodSpec{NodeName: node, ResourceClaims: []corev1.PodResourceClaim{{Name: "nic", ResourceClaimTemplateName: new("tmpl")}}},
		Status:     corev1.PodStatus{Phase: phase, ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "nic", ResourceClaimName: new(claim)}}},
	}
}

// prefetchBed is a Prefetch watching a fake API server, which counts its
// reads of each claim and holds them while hold is set.
type prefetchBed struct {
	client  *fake.Clientset
	p       *Prefetch
	gets    sync.Map // claim name -> *atomic.Int32
	results chan string
	hold    chan struct{} // non-nil: a read waits for it to close
}

func newPrefetchBed(t *testing.T, hold chan struct{}, objs ...runtime.Object) *prefetchBed {
	t.Helper()
	b := &prefetchBed{client: fake.NewClientset(objs...), results: make(chan string, 16), hold: hold}
	b.client.PrependReactor("get", "resourceclaims", func(action k8stesting.Action) (bool, runtime.Object, error) {
		name := action.(k8stesting.GetAction).GetName()
		n, _ := b.gets.LoadOrStore(name, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		if b.hold != nil {
			<-b.hold
		}
		return false, nil, nil // the tracker answers
	})
	b.p = NewPrefetch(b.client, prefetchNode, []string{"fastpath.dev"}, func(r string) { b.results <- r })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go b.p.Run(ctx)
	return b
}

func (b *prefetchBed) reads(name string) int32 {
	n, ok := b.gets.Load(name)
	if !ok {
		return 0
	}
	return n.(*atomic.Int32).Load()
}

// waitReads polls until the API server has had n reads of the claim.
func (b *prefetchBed) waitReads(t *testing.T, name string, n int32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for b.reads(name) < n {
		if time.Now().After(deadline) {
			t.Fatalf("claim %s: %d reads of the API server, want %d", name, b.reads(name), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitSettled polls until the claim's read ahead has ended (kept or
// dropped).
func (b *prefetchBed) waitSettled(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	key := types.NamespacedName{Namespace: "ns", Name: name}
	for {
		b.p.mu.Lock()
		entry, ok := b.p.claims[key]
		b.p.mu.Unlock()
		if !ok {
			return
		}
		select {
		case <-entry.done:
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim %s: the read ahead did not end", name)
		}
		time.Sleep(time.Millisecond)
	}
}

// helperGet is the kubelet plugin helper's read, and how it was answered.
func (b *prefetchBed) helperGet(t *testing.T, name string) (*resourceapi.ResourceClaim, string) {
	t.Helper()
	claim, err := b.p.Client(b.client).ResourceV1().ResourceClaims("ns").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get claim %s: %v", name, err)
	}
	return claim, <-b.results
}

func TestPrefetchAnswersTheHelpersRead(t *testing.T) {
	b := newPrefetchBed(t, nil, prefetchClaim("c1", "fastpath.dev"), prefetchPod("p1", prefetchNode, "c1", corev1.PodPending))
	b.waitReads(t, "c1", 1)
	b.waitSettled(t, "c1")

	claim, result := b.helperGet(t, "c1")
	if result != PrefetchHit || claim.UID != "uid-c1" || claim.Status.Allocation == nil {
		t.Fatalf("first read: %s, claim %s, want a hit with the allocated claim", result, claim.UID)
	}
	if n := b.reads("c1"); n != 1 {
		t.Errorf("the API server had %d reads of the claim, want 1 (the read ahead)", n)
	}
	// Given once: a Prepare retried reads the API server.
	if _, result := b.helperGet(t, "c1"); result != PrefetchMiss {
		t.Errorf("second read: %s, want %s", result, PrefetchMiss)
	}
	if n := b.reads("c1"); n != 2 {
		t.Errorf("the API server had %d reads of the claim, want 2", n)
	}
}

func TestPrefetchKeepsOnlyItsDriversPendingPods(t *testing.T) {
	b := newPrefetchBed(t, nil,
		prefetchClaim("gpu", "gpu.example.com"), prefetchPod("p-gpu", prefetchNode, "gpu", corev1.PodPending),
		prefetchClaim("elsewhere", "fastpath.dev"), prefetchPod("p-else", "node-b", "elsewhere", corev1.PodPending),
		prefetchClaim("running", "fastpath.dev"), prefetchPod("p-run", prefetchNode, "running", corev1.PodRunning),
		// The last, so that the others have been seen once it is read.
		prefetchClaim("c1", "fastpath.dev"), prefetchPod("p1", prefetchNode, "c1", corev1.PodPending))
	b.waitReads(t, "c1", 1)
	b.waitReads(t, "gpu", 1)
	b.waitSettled(t, "gpu")
	for _, name := range []string{"elsewhere", "running"} {
		if n := b.reads(name); n != 0 {
			t.Errorf("claim %s read %d times ahead: its pod is not pending on the node", name, n)
		}
	}
	// Another driver's claim was read, and dropped.
	if _, result := b.helperGet(t, "gpu"); result != PrefetchMiss {
		t.Errorf("another driver's claim: %s, want %s", result, PrefetchMiss)
	}
	for _, name := range []string{"elsewhere", "running"} {
		if _, result := b.helperGet(t, name); result != PrefetchMiss {
			t.Errorf("claim %s: %s, want %s", name, result, PrefetchMiss)
		}
	}
}

func TestPrefetchReadUnderWayIsWaitedFor(t *testing.T) {
	hold := make(chan struct{})
	b := newPrefetchBed(t, hold, prefetchClaim("c1", "fastpath.dev"), prefetchPod("p1", prefetchNode, "c1", corev1.PodPending))
	b.waitReads(t, "c1", 1) // under way, held

	type answer struct {
		claim  *resourceapi.ResourceClaim
		result string
	}
	got := make(chan answer, 1)
	go func() {
		claim, result := b.helperGet(t, "c1")
		got <- answer{claim, result}
	}()
	select {
	case a := <-got:
		t.Fatalf("the helper's read returned (%s) before the read ahead ended", a.result)
	case <-time.After(50 * time.Millisecond): // it waits: no answer yet
	}
	close(hold)
	a := <-got
	if a.result != PrefetchWaited || a.claim == nil || a.claim.UID != "uid-c1" {
		t.Fatalf("read: %s, want %s with the claim", a.result, PrefetchWaited)
	}
	if n := b.reads("c1"); n != 1 {
		t.Errorf("the API server had %d reads of the claim, want 1", n)
	}
}

func TestPrefetchExpiresAndForgetsGonePods(t *testing.T) {
	b := newPrefetchBed(t, nil,
		prefetchClaim("old", "fastpath.dev"), prefetchPod("p-old", prefetchNode, "old", corev1.PodPending),
		prefetchClaim("gone", "fastpath.dev"), prefetchPod("p-gone", prefetchNode, "gone", corev1.PodPending))
	b.waitReads(t, "old", 1)
	b.waitReads(t, "gone", 1)
	b.waitSettled(t, "old")
	b.waitSettled(t, "gone")

	err := b.client.CoreV1().Pods("ns").Delete(context.Background(), "p-gone", metav1.DeleteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.p.mu.Lock()
		_, held := b.p.claims[types.NamespacedName{Namespace: "ns", Name: "gone"}]
		b.p.mu.Unlock()
		if !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the claim of a deleted pod is still kept")
		}
		time.Sleep(time.Millisecond)
	}
	b.p.mu.Lock()
	b.p.now = func() time.Time { return time.Now().Add(PrefetchTTL + time.Second) }
	b.p.mu.Unlock()
	if _, result := b.helperGet(t, "old"); result != PrefetchMiss {
		t.Errorf("a claim read ahead longer than %v ago: %s, want %s", PrefetchTTL, result, PrefetchMiss)
	}
	if n := b.reads("old"); n != 2 {
		t.Errorf("the API server had %d reads of the expired claim, want 2", n)
	}
}

func TestPrefetchNilIsTheClient(t *testing.T) {
	client := fake.NewClientset()
	var p *Prefetch
	if got := p.Client(client); got != client {
		t.Fatalf("a nil Prefetch's client is %T, want the client itself", got)
	}
}
