package watch

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// object is the pointer type of an API object of type T.
type object[T any] interface {
	*T
	metav1.Object
	DeepCopy() *T
}

// WatchCache reads the objects of one resource from a watch of them (every
// namespace), so that a pod's hook costs no round trip to the API server,
// nor a token of the client's rate limit: an object is read as the watch
// last delivered it, milliseconds behind the API server. One the watch
// does not have (created a moment ago, or before the first list completed)
// is read with a GET, and is an error only if the API server does not
// have it either.
type WatchCache[T any, P object[T]] struct {
	resource schema.GroupVersionResource
	live     dynamic.NamespaceableResourceInterface
	informer cache.SharedIndexInformer
}

// NewWatchCache is a cache of client's objects of resource; it reads
// through to the API server until Run has listed them.
func NewWatchCache[T any, P object[T]](client dynamic.Interface, resource schema.GroupVersionResource) (*WatchCache[T, P], error) {
	informer := dynamicinformer.NewFilteredDynamicInformer(client, resource, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	// Kept decoded: a lookup is a map read and a copy.
	if err := informer.SetTransform(func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil // a tombstone
		}
		o, err := decode[T, P](resource, u)
		if err != nil {
			return nil, err
		}
		P(o).SetManagedFields(nil)
		return o, nil
	}); err != nil {
		return nil, err
	}
	return &WatchCache[T, P]{resource: resource, live: client.Resource(resource), informer: informer}, nil
}

func decode[T any, P object[T]](resource schema.GroupVersionResource, u *unstructured.Unstructured) (*T, error) {
	o := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, o); err != nil {
		return nil, fmt.Errorf("decode %s %s: %w", resource.GroupResource(), cache.NewObjectName(u.GetNamespace(), u.GetName()), err)
	}
	return o, nil
}

// Run watches until ctx ends.
func (c *WatchCache[T, P]) Run(ctx context.Context) { c.informer.RunWithContext(ctx) }

// OnChange has changed called after the watch delivers an object added,
// updated or deleted (those of its first list included), in the watch's
// goroutine: changed must not block.
func (c *WatchCache[T, P]) OnChange(changed func()) error {
	_, err := c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	})
	if err != nil {
		return fmt.Errorf("watch %s: %w", c.resource.GroupResource(), err)
	}
	return nil
}

// HasSynced says whether the watch has listed the objects once.
func (c *WatchCache[T, P]) HasSynced() bool { return c.informer.HasSynced() }

// Get reads the object namespace/name ("" for a cluster-scoped one) from
// the watch, else from the API server. The object is the caller's.
func (c *WatchCache[T, P]) Get(ctx context.Context, namespace, name string) (*T, error) {
	if obj, ok, err := c.informer.GetIndexer().GetByKey(cache.NewObjectName(namespace, name).String()); err == nil && ok {
		if o, ok := obj.(*T); ok {
			return P(o).DeepCopy(), nil
		}
	}
	var u *unstructured.Unstructured
	var err error
	if namespace == "" {
		u, err = c.live.Get(ctx, name, metav1.GetOptions{})
	} else {
		u, err = c.live.Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, err
	}
	return decode[T, P](c.resource, u)
}

// List lists the objects from the watch once it has listed them, else
// from the API server. The objects are the caller's.
func (c *WatchCache[T, P]) List(ctx context.Context) ([]*T, error) {
	if c.HasSynced() {
		var out []*T
		for _, obj := range c.informer.GetStore().List() {
			if o, ok := obj.(*T); ok {
				out = append(out, P(o).DeepCopy())
			}
		}
		return out, nil
	}
	list, err := c.live.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", c.resource.GroupResource(), err)
	}
	out := make([]*T, 0, len(list.Items))
	for i := range list.Items {
		// One that does not decode is left out, as the watch leaves it.
		if o, err := decode[T, P](c.resource, &list.Items[i]); err == nil {
			out = append(out, o)
		}
	}
	return out, nil
}
