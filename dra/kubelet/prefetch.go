package kubelet

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	resourcev1 "k8s.io/client-go/kubernetes/typed/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Prefetch reads the ResourceClaims of the pods bound to the node as
// soon as the node's pod watch shows them, so that the kubelet plugin
// helper's read of a claim at NodePrepareResources (the kubelet sends only
// its name) is answered without a request of its own. The kubelet reads
// the claim itself and writes its checkpoint before it calls the plugin:
// the daemon's read runs beside that, and the helper's, which came after
// it, no longer adds its round trip to the pod's start.
//
// A claim read is kept only if one of the daemon's drivers has a device
// of its allocation, and is given once: to the first read of the helper
// within PrefetchTTL, or to none. A read of the helper that finds the
// prefetch under way waits for it. Anything else (no prefetch, one that
// failed, expired or was given already: a Prepare retried) reads the API
// server as before. The claim given is as the API server had it after the
// pod was bound: allocated and reserved for the pod, which it stays while
// the pod is on the node (an allocation is not changed, only removed once
// no pod holds the claim).
type Prefetch struct {
	client  kubernetes.Interface
	node    string
	drivers []string
	ttl     time.Duration
	now     func() time.Time
	metrics func(result string) // counts each helper read by its result

	mu      sync.Mutex
	claims  map[types.NamespacedName]*prefetched
	seen    map[types.UID][]string // by pod: its claims read already
	running chan struct{}          // bounds the reads in flight
}

type prefetched struct {
	done  chan struct{}
	claim *resourceapi.ResourceClaim // nil: none to give (failed, or not the drivers')
	at    time.Time                  // when the read ended
}

// PrefetchTTL is how long a claim read ahead is given to the helper: a
// pod's Prepare follows its binding by milliseconds, or by seconds in a
// burst of pods.
const PrefetchTTL = 30 * time.Second

// maxPrefetched bounds the claims kept at once (a flood of pods bound
// to the node), and maxPrefetching the reads in flight.
const (
	maxPrefetched  = 1024
	maxPrefetching = 8
)

// Prefetch results, the label of fastpath_claim_prefetch_total.
const (
	PrefetchHit    = "hit"    // the helper's read answered by a prefetch
	PrefetchWaited = "waited" // by a prefetch it waited for
	PrefetchMiss   = "miss"   // none: the helper read the API server
)

// NewPrefetch reads ahead the claims of node's pods, through client, for
// drivers; counted (nil: not) is called with each helper read's result.
func NewPrefetch(client kubernetes.Interface, node string, drivers []string, counted func(result string)) *Prefetch {
	return &Prefetch{client: client, node: node, drivers: drivers, ttl: PrefetchTTL, now: time.Now, metrics: counted,
		claims: map[types.NamespacedName]*prefetched{}, seen: map[types.UID][]string{}, running: make(chan struct{}, maxPrefetching)}
}

// Run watches the node's pods, by a field selector (spec.nodeName): none
// of another node's. It keeps of each pod only what names its claims.
// It returns when ctx ends.
func (p *Prefetch) Run(ctx context.Context) {
	selector := fields.OneTermEqualSelector("spec.nodeName", p.node).String()
	pods := p.client.CoreV1().Pods(metav1.NamespaceAll)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return pods.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return pods.Watch(ctx, opts)
		},
	}
	informer := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, p.client), &corev1.Pod{}, 0, cache.Indexers{})
	_ = informer.SetTransform(func(obj any) (any, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil
		}
		out := &corev1.Pod{}
		out.Namespace, out.Name, out.UID, out.ResourceVersion = pod.Namespace, pod.Name, pod.UID, pod.ResourceVersion
		out.DeletionTimestamp = pod.DeletionTimestamp
		out.Spec.NodeName, out.Spec.ResourceClaims = pod.Spec.NodeName, pod.Spec.ResourceClaims
		out.Status.Phase, out.Status.ResourceClaimStatuses = pod.Status.Phase, pod.Status.ResourceClaimStatuses
		return out, nil
	})
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.podSeen(ctx, obj) },
		UpdateFunc: func(_, obj any) { p.podSeen(ctx, obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				p.podGone(pod)
			}
		},
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Watching the node's pods to read their claims ahead; the kubelet plugin reads them at Prepare")
		return
	}
	informer.RunWithContext(ctx)
}

// podSeen reads the claims of a pending pod of the node not read yet. A
// pod past pending (its sandbox made, so its claims prepared: the pods
// of the node when the daemon starts, mostly) or going gets none.
func (p *Prefetch) podSeen(ctx context.Context, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName != p.node || pod.DeletionTimestamp != nil ||
		(pod.Status.Phase != corev1.PodPending && pod.Status.Phase != "") {
		return
	}
	for _, name := range podClaimNames(pod) {
		key := types.NamespacedName{Namespace: pod.Namespace, Name: name}
		p.mu.Lock()
		seen := slices.Contains(p.seen[pod.UID], name)
		_, held := p.claims[key]
		if len(p.claims) >= maxPrefetched {
			p.expire()
		}
		full := len(p.claims) >= maxPrefetched
		if !seen {
			p.seen[pod.UID] = append(p.seen[pod.UID], name)
		}
		if seen || held || full {
			p.mu.Unlock()
			continue
		}
		entry := &prefetched{done: make(chan struct{})}
		p.claims[key] = entry
		p.mu.Unlock()
		go p.read(ctx, key, entry)
	}
}

// podClaimNames are the names of a pod's claims: its own, and those made
// from its templates once the controller has named them.
func podClaimNames(pod *corev1.Pod) []string {
	var names []string
	for _, rc := range pod.Spec.ResourceClaims {
		if rc.ResourceClaimName != nil && *rc.ResourceClaimName != "" {
			names = append(names, *rc.ResourceClaimName)
		}
	}
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.ResourceClaimName != nil && *st.ResourceClaimName != "" {
			names = append(names, *st.ResourceClaimName)
		}
	}
	return names
}

// read reads a claim ahead, and keeps it if it is allocated with a device
// of the drivers.
func (p *Prefetch) read(ctx context.Context, key types.NamespacedName, entry *prefetched) {
	defer close(entry.done)
	select {
	case p.running <- struct{}{}:
	case <-ctx.Done():
		p.drop(key, entry)
		return
	}
	claim, err := p.client.ResourceV1().ResourceClaims(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	<-p.running
	if err != nil || !p.ours(claim) {
		if err != nil {
			klog.FromContext(ctx).V(4).Info("Claim not read ahead", "claim", key, "err", err.Error())
		}
		p.drop(key, entry)
		return
	}
	p.mu.Lock()
	entry.claim, entry.at = claim, p.now()
	p.mu.Unlock()
}

// ours says whether one of the drivers has a device of the claim's
// allocation.
func (p *Prefetch) ours(claim *resourceapi.ResourceClaim) bool {
	if claim.Status.Allocation == nil {
		return false
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if slices.Contains(p.drivers, r.Driver) {
			return true
		}
	}
	return false
}

// expire forgets the claims read ahead longer than the TTL ago. The
// caller holds mu.
func (p *Prefetch) expire() {
	for key, entry := range p.claims {
		if !entry.at.IsZero() && p.now().Sub(entry.at) > p.ttl {
			delete(p.claims, key)
		}
	}
}

func (p *Prefetch) drop(key types.NamespacedName, entry *prefetched) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.claims[key] == entry {
		delete(p.claims, key)
	}
}

// podGone forgets a pod, and the claims read ahead for it that no Prepare
// took.
func (p *Prefetch) podGone(pod *corev1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, name := range p.seen[pod.UID] {
		delete(p.claims, types.NamespacedName{Namespace: pod.Namespace, Name: name})
	}
	delete(p.seen, pod.UID)
}

// take gives the claim read ahead for key, once, waiting for a read under
// way; nil if there is none to give.
func (p *Prefetch) take(ctx context.Context, key types.NamespacedName) (*resourceapi.ResourceClaim, string) {
	p.mu.Lock()
	entry, ok := p.claims[key]
	if ok {
		delete(p.claims, key) // given once
	}
	p.mu.Unlock()
	if !ok {
		return nil, PrefetchMiss
	}
	result := PrefetchHit
	select {
	case <-entry.done:
	default:
		result = PrefetchWaited
		select {
		case <-entry.done:
		case <-ctx.Done():
			return nil, PrefetchMiss
		}
	}
	p.mu.Lock()
	claim, at := entry.claim, entry.at
	p.mu.Unlock()
	if claim == nil || p.now().Sub(at) > p.ttl {
		return nil, PrefetchMiss
	}
	return claim, result
}

// get is the helper's read of a claim: the one read ahead if there is
// one, else the API server's.
func (p *Prefetch) get(ctx context.Context, live resourcev1.ResourceClaimInterface, namespace, name string, opts metav1.GetOptions) (*resourceapi.ResourceClaim, error) {
	if opts.ResourceVersion == "" {
		claim, result := p.take(ctx, types.NamespacedName{Namespace: namespace, Name: name})
		if p.metrics != nil {
			p.metrics(result)
		}
		if claim != nil {
			return claim, nil
		}
	}
	return live.Get(ctx, name, opts)
}

// Client is client with its reads of ResourceClaims answered by the
// claims read ahead, for the kubelet plugin helper. A nil *Prefetch gives
// client.
func (p *Prefetch) Client(client kubernetes.Interface) kubernetes.Interface {
	if p == nil || client == nil {
		return client
	}
	return prefetchClient{Interface: client, p: p}
}

type prefetchClient struct {
	kubernetes.Interface
	p *Prefetch
}

func (c prefetchClient) ResourceV1() resourcev1.ResourceV1Interface {
	return prefetchResourceV1{ResourceV1Interface: c.Interface.ResourceV1(), p: c.p}
}

type prefetchResourceV1 struct {
	resourcev1.ResourceV1Interface
	p *Prefetch
}

func (r prefetchResourceV1) ResourceClaims(namespace string) resourcev1.ResourceClaimInterface {
	return prefetchClaims{ResourceClaimInterface: r.ResourceV1Interface.ResourceClaims(namespace), namespace: namespace, p: r.p}
}

type prefetchClaims struct {
	resourcev1.ResourceClaimInterface
	namespace string
	p         *Prefetch
}

func (c prefetchClaims) Get(ctx context.Context, name string, opts metav1.GetOptions) (*resourceapi.ResourceClaim, error) {
	return c.p.get(ctx, c.ResourceClaimInterface, c.namespace, name, opts)
}
