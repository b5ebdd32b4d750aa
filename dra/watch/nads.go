package watch

import (
	"context"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// NADResource is the NetworkAttachmentDefinition resource of the Network
// Plumbing WG.
var NADResource = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

// NADCache reads NetworkAttachmentDefinitions from a watch of them, and
// with a GET those it does not have yet (WatchCache).
type NADCache struct {
	*WatchCache[nadv1.NetworkAttachmentDefinition, *nadv1.NetworkAttachmentDefinition]
}

// NewNADCache is a cache of client's NetworkAttachmentDefinitions; it
// reads through to the API server until Run has listed them.
func NewNADCache(client dynamic.Interface) (NADCache, error) {
	c, err := NewWatchCache[nadv1.NetworkAttachmentDefinition](client, NADResource)
	return NADCache{c}, err
}

// GetNAD reads the object namespace/name.
func (c NADCache) GetNAD(ctx context.Context, namespace, name string) (*nadv1.NetworkAttachmentDefinition, error) {
	return c.Get(ctx, namespace, name)
}

// ListNADs lists the NetworkAttachmentDefinitions.
func (c NADCache) ListNADs(ctx context.Context) ([]*nadv1.NetworkAttachmentDefinition, error) {
	return c.List(ctx)
}
