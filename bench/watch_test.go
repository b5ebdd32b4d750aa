package bench

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/watch"
)

// watchedKinds are what the daemon watches in every namespace, each as an
// object of a typical size: a NetworkAttachmentDefinition with a macvlan
// configuration and a resource name (--npwg), a PodNetwork with its
// parametersRefs and status, a PodNetworkAttachment (--podnetworks).
var watchedKinds = []struct {
	name     string
	resource schema.GroupVersionResource
	list     string
	cache    func(dynamic.Interface) (watched, error)
	object   func(i int) *unstructured.Unstructured
}{
	{"NetworkAttachmentDefinition", watch.NADResource, "NetworkAttachmentDefinitionList", cacheOf[nadv1.NetworkAttachmentDefinition](watch.NADResource), func(i int) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
			"metadata": map[string]any{"namespace": fmt.Sprintf("tenant-%d", i%50), "name": fmt.Sprintf("net-%04d", i), "uid": fmt.Sprintf("uid-%d", i),
				"annotations": map[string]any{"k8s.v1.cni.cncf.io/resourceName": "fastpath.dev/sriov_netdevice"}},
			"spec": map[string]any{"config": fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "net-%04d", "type": "macvlan", "master": "ens1f0", "mode": "bridge",
  "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.%d.%d.0/24", "gateway": "10.%d.%d.1"}]], "routes": [{"dst": "10.200.0.0/16"}]}}`, i, i/256%256, i%256, i/256%256, i%256)},
		}}
	}},
	{"PodNetwork", pnv1.PodNetworkResource, "PodNetworkList", cacheOf[pnv1.PodNetwork](pnv1.PodNetworkResource), func(i int) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": pnv1.SchemeGroupVersion.String(), "kind": pnv1.KindPodNetwork,
			"metadata": map[string]any{"name": fmt.Sprintf("dataplane-%04d", i), "uid": fmt.Sprintf("uid-%d", i), "finalizers": []any{pnv1.FinalizerInUse}},
			"spec": map[string]any{"enabled": true, "provider": pnv1.FastpathProvider, "parametersRefs": []any{map[string]any{
				"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition", "namespace": "net-ops", "name": fmt.Sprintf("net-%04d", i)}}},
			"status": map[string]any{"conditions": []any{
				map[string]any{"type": "Ready", "status": "True", "reason": "Ready", "message": "pods may attach to it", "lastTransitionTime": "2026-11-27T10:00:00Z"},
				map[string]any{"type": "ParamsReady", "status": "True", "reason": "ParamsReady", "message": "1 object ready", "lastTransitionTime": "2026-11-27T10:00:00Z"}}},
		}}
	}},
	{"PodNetworkAttachment", pnv1.PodNetworkAttachmentResource, "PodNetworkAttachmentList", cacheOf[pnv1.PodNetworkAttachment](pnv1.PodNetworkAttachmentResource), func(i int) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": pnv1.SchemeGroupVersion.String(), "kind": pnv1.KindPodNetworkAttachment,
			"metadata": map[string]any{"namespace": fmt.Sprintf("tenant-%d", i%50), "name": fmt.Sprintf("fast-%04d", i), "uid": fmt.Sprintf("uid-%d", i)},
			"spec":     map[string]any{"podNetworkName": fmt.Sprintf("dataplane-%04d", i)},
			"status": map[string]any{"conditions": []any{
				map[string]any{"type": "Ready", "status": "True", "reason": "Ready", "message": "pods may attach to PodNetwork dataplane through it", "lastTransitionTime": "2026-11-27T10:00:00Z"}}},
		}}
	}},
}

// watched is a watch cache of one kind, as the daemon keeps it.
type watched interface {
	Run(ctx context.Context)
	HasSynced() bool
	Len(ctx context.Context) (int, error)
}

type watchedCache[T any, P interface {
	*T
	metav1.Object
	DeepCopy() *T
}] struct {
	*watch.WatchCache[T, P]
}

func (c watchedCache[T, P]) Len(ctx context.Context) (int, error) {
	list, err := c.List(ctx)
	return len(list), err
}

// cacheOf makes the daemon's watch cache of resource, its objects decoded
// as T.
func cacheOf[T any, P interface {
	*T
	metav1.Object
	DeepCopy() *T
}](resource schema.GroupVersionResource) func(dynamic.Interface) (watched, error) {
	return func(client dynamic.Interface) (watched, error) {
		c, err := watch.NewWatchCache[T, P](client, resource)
		return watchedCache[T, P]{c}, err
	}
}

// heapInUse is the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkWatchMemory: the memory of the daemon's watches of the kinds it
// watches in every namespace, per 1,000 objects: the heap a watch cache
// (dra/watch) holds once it has listed 1,000 objects, beyond what the
// API's objects themselves take in the test's fake API server.
func BenchmarkWatchMemory(b *testing.B) {
	const n = 1000
	for _, kind := range watchedKinds {
		b.Run(kind.name, func(b *testing.B) {
			client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(kruntime.NewScheme(),
				map[schema.GroupVersionResource]string{kind.resource: kind.list})
			for i := range n {
				o := kind.object(i)
				if err := client.Tracker().Create(kind.resource, o, o.GetNamespace()); err != nil {
					b.Fatal(err)
				}
			}
			var held float64
			for b.Loop() {
				before := heapInUse()
				c, err := kind.cache(client)
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				go c.Run(ctx)
				if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
					return c.HasSynced(), nil
				}); err != nil {
					b.Fatal(err)
				}
				held = float64(heapInUse()) - float64(before)
				if got, err := c.Len(ctx); err != nil || got != n {
					b.Fatalf("the cache lists %d objects (%v), want %d", got, err, n)
				}
				cancel()
			}
			b.ReportMetric(held/1024, "KiB/1000-objects")
		})
	}
}
