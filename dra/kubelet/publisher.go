package kubelet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane/fault"
)

// MaxDevicesPerSlice is how many devices one ResourceSlice holds at most
// (the API allows 128; smaller slices make a change rewrite less).
const MaxDevicesPerSlice = 64

// Publisher keeps one driver's ResourceSlices of this node as the driver
// wants them. It keeps no copy of them: a sync lists the node's slices a
// page at a time and remembers of each only its name, resourceVersion and
// what it holds (a digest of the devices it wrote, or found equal), and a
// watch of the same slices tells it when something else changed one. A
// node with 1024 devices thus holds them once (the driver's inventory),
// not three times (an informer's cache, the desired slices and their
// copy), which is what kept the daemon above its memory budget.
//
// The slices are named and versioned as the kubelet plugin helper's
// controller names and versions them, so that a daemon of an earlier
// version hands its slices over: each name begins with the slice's index
// in hex ("0-fastpath.dev-node-a-x7k2p"); a change to one slice is one
// update in place; anything more (slices added, removed or more than one
// changed) bumps the pool's generation, so the scheduler never mixes old
// and new slices of one pool. A pool found empty starts at a generation
// from the clock (see firstGeneration).
type Publisher struct {
	client kubernetes.Interface
	driver string
	node   string
	// result is told how each sync went: nil when the slices are as
	// wanted. Errors are retried with backoff until a sync succeeds.
	result func(ctx context.Context, err error)

	mu sync.Mutex
	// want gives what the slices are to hold. It is called at each sync,
	// and what it gives is let go after: the daemon does not keep the
	// slices' content between writes, only the inventory it is made of.
	want    func() resourceslice.DriverResources
	version uint64 // of want: one more at each publish
	wake    chan struct{}

	// The rest belongs to run's goroutine.
	nodeUID types.UID
	// written is what each slice of this node and driver holds, as far as
	// this daemon knows: by name.
	written map[string]writtenSlice
	synced  uint64 // the version of want the slices are as
	// retryFirst is the first backoff after a failed sync.
	retryFirst time.Duration
	// firstGeneration is the generation of a pool found without slices:
	// the clock's seconds, so that it is above any generation an earlier
	// daemon wrote before the slices were deleted (the kubelet deletes a
	// node's slices when it or the driver restarts). A consumer whose cache
	// still holds the deleted slices (the scheduler's lags) then takes the
	// new ones over them as soon as it sees them, rather than allocating
	// a device that is gone.
	firstGeneration func() int64
	// features are what the API server keeps of a slice: what it lacks
	// is taken out of what want gives (SliceFeatures.Strip).
	features SliceFeatures
}

// writtenSlice is a slice this daemon wrote, or found as it wanted it:
// its resourceVersion then, its pool as it says, and a hash of its devices.
type writtenSlice struct {
	resourceVersion   string
	uid               types.UID
	pool              string
	generation, count int64
	devices           uint64
}

// pageSize is how many slices one list call returns: a sync holds one page
// of them at a time.
const pageSize = 4

func NewPublisher(client kubernetes.Interface, driver, node string, result func(context.Context, error)) *Publisher {
	return &Publisher{client: client, driver: driver, node: node, result: result,
		wake: make(chan struct{}, 1), written: map[string]writtenSlice{}, retryFirst: publishRetryFirst,
		firstGeneration: func() int64 { return time.Now().Unix() }, features: AllSliceFeatures}
}

// SetFeatures says what the API server keeps of a slice (ProbeSliceFeatures),
// before Run.
func (p *Publisher) SetFeatures(f SliceFeatures) { p.features = f }

// publish makes what want gives what the node's slices hold; run writes
// it.
func (p *Publisher) Publish(want func() resourceslice.DriverResources) {
	p.mu.Lock()
	p.want = want
	p.version++
	p.mu.Unlock()
	p.poke()
}

func (p *Publisher) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Backoff between failed syncs.
const (
	publishRetryFirst = time.Second
	publishRetryMax   = time.Minute
)

// run syncs the slices at each publish and whenever the watch sees a
// change it did not make, until ctx ends.
func (p *Publisher) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("driver", p.driver)
	ctx = klog.NewContext(ctx, logger)
	var (
		events  <-chan watch.Event
		stop    = func() {}
		retry   *time.Timer
		retryIn = p.retryFirst
		dirty   = true // the slices may not be as written says: list them
	)
	defer func() { stop() }()
	for {
		var retryC <-chan time.Time
		if retry != nil {
			retryC = retry.C
		}
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-retryC:
			retry = nil
		case ev, ok := <-events:
			if !ok {
				// The watch ended (a timeout, the API server restarted):
				// list again and watch from there.
				stop()
				events, stop, dirty = nil, func() {}, true
				break
			}
			if !p.foreign(ev) {
				continue
			}
			logger.V(2).Info("A ResourceSlice of this node changed under the publisher", "event", ev.Type)
			dirty = true
		}
		p.mu.Lock()
		want, version := p.want, p.version
		p.mu.Unlock()
		if want == nil || (!dirty && version == p.synced) {
			continue
		}
		res := want()
		listRV, err := p.sync(ctx, &res, dirty)
		p.result(ctx, err)
		if err != nil {
			dirty = true
			if retry == nil {
				retry = time.NewTimer(retryIn)
				retryIn = min(2*retryIn, publishRetryMax)
			}
			continue
		}
		p.synced, retryIn = version, p.retryFirst
		if dirty {
			dirty = false
			stop()
			events, stop = nil, func() {}
			if w, err := p.client.ResourceV1().ResourceSlices().Watch(ctx, p.listOptions(listRV)); err != nil {
				// Without a watch a slice someone else deletes stays
				// deleted: list and watch again after a backoff.
				logger.Error(err, "Watching this node's ResourceSlices; listing them and watching again", "in", retryIn)
				dirty = true
				if retry == nil {
					retry = time.NewTimer(retryIn)
					retryIn = min(2*retryIn, publishRetryMax)
				}
			} else {
				events, stop = w.ResultChan(), w.Stop
			}
		}
	}
}

// foreign says whether a watch event is news: a change to one of the
// node's slices that this daemon did not make.
func (p *Publisher) foreign(ev watch.Event) bool {
	slice, ok := ev.Object.(*resourceapi.ResourceSlice)
	if !ok {
		return ev.Type == watch.Error
	}
	if ev.Type == watch.Bookmark || !p.ours(slice) {
		return false
	}
	w, known := p.written[slice.Name]
	if ev.Type == watch.Deleted {
		return known
	}
	return !known || w.resourceVersion != slice.ResourceVersion
}

func (p *Publisher) ours(s *resourceapi.ResourceSlice) bool {
	return s.Spec.Driver == p.driver && s.Spec.NodeName != nil && *s.Spec.NodeName == p.node
}

func (p *Publisher) listOptions(resourceVersion string) metav1.ListOptions {
	return metav1.ListOptions{
		FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector("spec.nodeName", p.node),
			fields.OneTermEqualSelector("spec.driver", p.driver)).String(),
		ResourceVersion:     resourceVersion,
		AllowWatchBookmarks: resourceVersion != "",
	}
}

// existingSlice is what a sync keeps of a slice it listed.
type existingSlice struct {
	name, resourceVersion string
	uid                   types.UID
	pool                  string
	generation, count     int64
	index                 int  // from its name; -1 if it has none
	equal                 bool // its devices are the wanted slice's of that index
}

// sync makes the node's slices hold want, listing them first when dirty
// (else written is taken for what they hold). It returns the list's
// resourceVersion, to watch from.
func (p *Publisher) sync(ctx context.Context, want *resourceslice.DriverResources, dirty bool) (string, error) {
	if err := p.lookUpNode(ctx); err != nil {
		return "", err
	}
	p.features.Strip(want)
	digests := make(map[string][]uint64, len(want.Pools))
	for name, pool := range want.Pools {
		for _, s := range pool.Slices {
			d, err := sliceHash(s)
			if err != nil {
				return "", fmt.Errorf("pool %s: %w", name, err)
			}
			digests[name] = append(digests[name], d)
		}
	}
	var (
		existing []existingSlice
		listRV   string
	)
	if dirty {
		var err error
		if existing, listRV, err = p.list(ctx, want, digests); err != nil {
			return "", err
		}
	} else {
		existing = p.fromWritten(want, digests)
	}
	byPool := map[string][]existingSlice{}
	for _, e := range existing {
		byPool[e.pool] = append(byPool[e.pool], e)
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(want.Pools)) {
		errs = append(errs, p.syncPool(ctx, name, want.Pools[name], digests[name], byPool[name]))
		delete(byPool, name)
	}
	for _, gone := range byPool {
		errs = append(errs, p.delete(ctx, gone))
	}
	return listRV, errors.Join(errs...)
}

func (p *Publisher) lookUpNode(ctx context.Context) error {
	if p.nodeUID != "" {
		return nil
	}
	node, err := p.client.CoreV1().Nodes().Get(ctx, p.node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get node %s (the owner of its ResourceSlices): %w", p.node, err)
	}
	p.nodeUID = node.UID
	return nil
}

// list lists the node's slices of the driver a page at a time, keeping of
// each what existingSlice holds. A slice found as wanted is remembered as
// written, so that it is not written again.
func (p *Publisher) list(ctx context.Context, want *resourceslice.DriverResources, digests map[string][]uint64) ([]existingSlice, string, error) {
	var out []existingSlice
	seen := map[string]bool{}
	opts := p.listOptions("")
	opts.Limit = pageSize
	for {
		page, err := p.client.ResourceV1().ResourceSlices().List(ctx, opts)
		if err != nil {
			return nil, "", fmt.Errorf("list the ResourceSlices of node %s: %w", p.node, err)
		}
		for i := range page.Items {
			s := &page.Items[i]
			if !p.ours(s) {
				continue
			}
			seen[s.Name] = true
			e := existingSlice{name: s.Name, resourceVersion: s.ResourceVersion, uid: s.UID, pool: s.Spec.Pool.Name,
				generation: s.Spec.Pool.Generation, count: s.Spec.Pool.ResourceSliceCount, index: -1}
			pool, wanted := want.Pools[e.pool]
			if wanted {
				e.index = sliceIndex(s.Name, len(pool.Slices))
			}
			if e.index >= 0 && e.index < len(pool.Slices) {
				if w, ok := p.written[s.Name]; ok && w.resourceVersion == s.ResourceVersion {
					e.equal = w.devices == digests[e.pool][e.index]
				} else {
					e.equal = sameSlice(s, pool.Slices[e.index])
				}
			}
			if e.equal {
				p.written[s.Name] = writtenSlice{resourceVersion: s.ResourceVersion, uid: s.UID, pool: e.pool,
					generation: e.generation, count: e.count, devices: digests[e.pool][e.index]}
			} else {
				delete(p.written, s.Name)
			}
			out = append(out, e)
		}
		if page.Continue == "" {
			for name := range p.written {
				if !seen[name] {
					delete(p.written, name)
				}
			}
			return out, page.ResourceVersion, nil
		}
		opts.Continue = page.Continue
	}
}

// fromWritten is what list would find if nothing but this daemon changed
// the slices since it last listed them.
func (p *Publisher) fromWritten(want *resourceslice.DriverResources, digests map[string][]uint64) []existingSlice {
	var out []existingSlice
	for name, w := range p.written {
		e := existingSlice{name: name, resourceVersion: w.resourceVersion, uid: w.uid, pool: w.pool,
			generation: w.generation, count: w.count, index: -1}
		if pool, ok := want.Pools[w.pool]; ok {
			e.index = sliceIndex(name, len(pool.Slices))
			e.equal = e.index >= 0 && e.index < len(pool.Slices) && w.devices == digests[w.pool][e.index]
		}
		out = append(out, e)
	}
	return out
}

// syncPool writes one pool as the helper's controller would (see
// publisher): obsolete slices deleted first, then the changed ones
// updated, then the missing ones created.
func (p *Publisher) syncPool(ctx context.Context, name string, pool resourceslice.Pool, digests []uint64, existing []existingSlice) error {
	slices.SortFunc(existing, func(a, b existingSlice) int { return strings.Compare(a.name, b.name) })
	var generation int64
	for _, e := range existing {
		generation = max(generation, e.generation)
	}
	if len(existing) == 0 {
		generation = max(generation, p.firstGeneration()-1)
	}
	matched := make(map[int]existingSlice, len(pool.Slices))
	var obsolete []existingSlice
	for _, e := range existing {
		_, taken := matched[e.index]
		if e.generation < generation || e.index < 0 || e.index >= len(pool.Slices) || taken {
			obsolete = append(obsolete, e)
			continue
		}
		matched[e.index] = e
	}
	count := int64(len(pool.Slices))
	changed := 0
	for _, e := range matched {
		if !e.equal || e.count != count {
			changed++
		}
	}
	bump := false
	switch {
	case pool.Generation > generation:
		generation, bump = pool.Generation, true
	case len(matched) == len(pool.Slices) && changed <= 1:
	default:
		generation, bump = generation+1, true
	}
	if len(obsolete) == 0 && !bump && changed == 0 {
		return nil
	}
	logger := klog.FromContext(ctx)
	logger.V(2).Info("Writing ResourceSlices", "pool", name, "generation", generation, "slices", len(pool.Slices),
		"obsolete", len(obsolete), "changed", changed, "new", len(pool.Slices)-len(matched))
	if err := p.delete(ctx, obsolete); err != nil {
		return err
	}
	for i, s := range pool.Slices {
		e, ok := matched[i]
		if ok && !bump && e.equal && e.count == count {
			continue
		}
		slice := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: p.node, UID: p.nodeUID, Controller: new(true)}}},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:         p.driver,
				Pool:           resourceapi.ResourcePool{Name: name, Generation: generation, ResourceSliceCount: count},
				NodeName:       new(p.node),
				Devices:        s.Devices,
				SharedCounters: s.SharedCounters,
			},
		}
		var (
			stored *resourceapi.ResourceSlice
			err    error
		)
		fault.Point("slice.before")
		if ok {
			slice.Name, slice.ResourceVersion = e.name, e.resourceVersion
			stored, err = p.client.ResourceV1().ResourceSlices().Update(ctx, slice, metav1.UpdateOptions{})
		} else {
			slice.GenerateName = generateName(p.driver, p.node, i, len(pool.Slices))
			stored, err = p.client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{})
		}
		if err != nil {
			delete(p.written, slice.Name)
			return fmt.Errorf("write ResourceSlice %d of %d of pool %s: %w", i+1, count, name, err)
		}
		fault.Point("slice.written")
		p.written[stored.Name] = writtenSlice{resourceVersion: stored.ResourceVersion, uid: stored.UID, pool: name,
			generation: generation, count: count, devices: digests[i]}
		if !sameSlice(stored, s) {
			// The API server dropped what it does not know (a feature gate
			// off): publishing again would not help. Said once per write.
			return fmt.Errorf("the API server dropped fields of ResourceSlice %s (a DRA feature, such as DRAConsumableCapacity, DRADeviceTaints or DRAPartitionableDevices, off in the cluster?): devices published without them",
				stored.Name)
		}
	}
	return nil
}

// delete deletes slices, each only if it is still the one listed.
func (p *Publisher) delete(ctx context.Context, gone []existingSlice) error {
	for _, e := range gone {
		delete(p.written, e.name)
		opts := metav1.DeleteOptions{}
		if e.uid != "" {
			opts.Preconditions = &metav1.Preconditions{UID: &e.uid}
		}
		err := p.client.ResourceV1().ResourceSlices().Delete(ctx, e.name, opts)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete obsolete ResourceSlice %s: %w", e.name, err)
		}
	}
	return nil
}

// sliceHash hashes a slice's devices and counter sets in their protobuf
// encoding, which is deterministic (maps in key order).
func sliceHash(s resourceslice.Slice) (uint64, error) {
	spec := resourceapi.ResourceSliceSpec{Devices: s.Devices, SharedCounters: s.SharedCounters}
	data, err := spec.Marshal()
	if err != nil {
		return 0, fmt.Errorf("encode devices: %w", err)
	}
	h := fnv.New64a()
	_, _ = h.Write(data)
	return h.Sum64(), nil
}

// sameSlice says whether a stored slice holds the wanted one's devices and
// counter sets and nothing else of a slice's optional content. The API
// server stamps each taint with the time it was added; a taint wanted
// without one matches it at any time.
func sameSlice(s *resourceapi.ResourceSlice, wanted resourceslice.Slice) bool {
	devs := wanted.Devices
	if s.Spec.NodeSelector != nil || s.Spec.AllNodes != nil || !apiequality.Semantic.DeepEqual(s.Spec.SharedCounters, wanted.SharedCounters) ||
		s.Spec.PerDeviceNodeSelection != nil || len(s.Spec.Devices) != len(devs) {
		return false
	}
	for i := range devs {
		want, got := &devs[i], &s.Spec.Devices[i]
		if len(want.Taints) != len(got.Taints) {
			return false
		}
		if len(want.Taints) > 0 {
			want = want.DeepCopy()
			for j := range want.Taints {
				if want.Taints[j].TimeAdded == nil {
					want.Taints[j].TimeAdded = got.Taints[j].TimeAdded
				}
			}
		}
		if !apiequality.Semantic.DeepEqual(want, got) {
			return false
		}
	}
	return true
}

// minIndexLength is the fewest hex digits of a slice's index in its name,
// as the helper's controller writes it.
const minIndexLength = 5

// indexLength is how many hex digits a slice's index takes in its name:
// all of a pool's alike, so that they sort by index.
func indexLength(slices int) int {
	return max(minIndexLength, len(strconv.FormatInt(int64(max(slices, 1)-1), 16)))
}

// generateName begins the name of slice i of a pool of n slices.
func generateName(driver, node string, i, n int) string {
	return fmt.Sprintf("%0*x-%s-%s-", indexLength(n), i, driver, node)
}

// sliceIndex is the index a slice's name begins with, or -1 if it has
// none of the length a pool of that many slices gives.
func sliceIndex(name string, slices int) int {
	n := indexLength(slices)
	if len(name) <= n || name[n] != '-' || bytes.ContainsAny([]byte(name[:n]), "+-") {
		return -1
	}
	i, err := strconv.ParseUint(name[:n], 16, 32)
	if err != nil {
		return -1
	}
	return int(i)
}

// ResourceSlices renders a driver's resources as the ResourceSlice objects the
// publisher creates (but for their generation), for `fastpathd inventory -o slices`.
func ResourceSlices(driver, nodeName string, res resourceslice.DriverResources) []resourceapi.ResourceSlice {
	var out []resourceapi.ResourceSlice
	for poolName, pool := range res.Pools {
		for i, s := range pool.Slices {
			rs := resourceapi.ResourceSlice{}
			rs.APIVersion, rs.Kind = "resource.k8s.io/v1", "ResourceSlice"
			rs.GenerateName = generateName(driver, nodeName, i, len(pool.Slices))
			rs.Spec = resourceapi.ResourceSliceSpec{
				Driver:         driver,
				Pool:           resourceapi.ResourcePool{Name: poolName, Generation: pool.Generation, ResourceSliceCount: int64(len(pool.Slices))},
				NodeName:       new(nodeName),
				Devices:        s.Devices,
				SharedCounters: s.SharedCounters,
			}
			out = append(out, rs)
		}
	}
	return out
}
