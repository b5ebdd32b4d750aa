package dra

import (
	"context"
	"fmt"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/fastpath-dra/fastpath/dra/nri"
)

// NADResource is the NetworkAttachmentDefinition resource of the Network
// Plumbing WG.
var NADResource = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

// NADs reads NetworkAttachmentDefinitions from the API server, one GET
// per call. The daemon reads them through a NADCache, which uses NADs for
// what its watch has not delivered.
type NADs struct{ Client dynamic.Interface }

var _ nri.NADGetter = NADs{}

// GetNAD reads the object namespace/name.
func (n NADs) GetNAD(ctx context.Context, namespace, name string) (*nadv1.NetworkAttachmentDefinition, error) {
	u, err := n.Client.Resource(NADResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var nad nadv1.NetworkAttachmentDefinition
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &nad); err != nil {
		return nil, fmt.Errorf("decode NetworkAttachmentDefinition %s/%s: %w", namespace, name, err)
	}
	return &nad, nil
}

// NADCache reads NetworkAttachmentDefinitions from a watch of those of
// every namespace, so that a pod's RunPodSandbox costs no round trip to
// the API server (nor a token of the client's rate limit): a network is
// read as the watch last delivered it, milliseconds behind the API server.
// An object the watch does not have (created a moment ago, or before the
// first list completed) is read with a GET, and is an error only if the
// API server does not have it either.
type NADCache struct {
	live     NADs
	informer cache.SharedIndexInformer
}

var _ nri.NADGetter = (*NADCache)(nil)

// NewNADCache is a cache of client's NetworkAttachmentDefinitions; it
// reads through to the API server until Run has listed them.
func NewNADCache(client dynamic.Interface) (*NADCache, error) {
	informer := dynamicinformer.NewFilteredDynamicInformer(client, NADResource, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	// Kept decoded: a lookup is a map read and a copy.
	if err := informer.SetTransform(func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil // a tombstone
		}
		var nad nadv1.NetworkAttachmentDefinition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &nad); err != nil {
			return nil, fmt.Errorf("decode NetworkAttachmentDefinition %s/%s: %w", u.GetNamespace(), u.GetName(), err)
		}
		nad.ManagedFields = nil
		return &nad, nil
	}); err != nil {
		return nil, err
	}
	return &NADCache{live: NADs{Client: client}, informer: informer}, nil
}

// Run watches until ctx ends.
func (c *NADCache) Run(ctx context.Context) {
	c.informer.RunWithContext(ctx)
}

// HasSynced says whether the watch has listed the objects once.
func (c *NADCache) HasSynced() bool { return c.informer.HasSynced() }

// GetNAD reads the object namespace/name from the watch, else from the API
// server.
func (c *NADCache) GetNAD(ctx context.Context, namespace, name string) (*nadv1.NetworkAttachmentDefinition, error) {
	if obj, ok, err := c.informer.GetIndexer().GetByKey(namespace + "/" + name); err == nil && ok {
		if nad, ok := obj.(*nadv1.NetworkAttachmentDefinition); ok {
			return nad.DeepCopy(), nil
		}
	}
	return c.live.GetNAD(ctx, namespace, name)
}
