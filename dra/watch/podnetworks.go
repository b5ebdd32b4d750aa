package watch

import (
	"context"

	"k8s.io/client-go/dynamic"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
)

// PodNetworkCache reads PodNetworks and PodNetworkAttachments from a
// watch of them, and with a GET those it does not have yet (WatchCache): a
// pod's networks are judged as the watch last saw them when its sandbox is
// made, milliseconds behind the API server.
type PodNetworkCache struct {
	Networks    *WatchCache[pnv1.PodNetwork, *pnv1.PodNetwork]
	Attachments *WatchCache[pnv1.PodNetworkAttachment, *pnv1.PodNetworkAttachment]
}

// NewPodNetworkCache is a cache of client's PodNetworks and
// PodNetworkAttachments; it reads through to the API server until Run has
// listed them.
func NewPodNetworkCache(client dynamic.Interface) (PodNetworkCache, error) {
	networks, err := NewWatchCache[pnv1.PodNetwork](client, pnv1.PodNetworkResource)
	if err != nil {
		return PodNetworkCache{}, err
	}
	attachments, err := NewWatchCache[pnv1.PodNetworkAttachment](client, pnv1.PodNetworkAttachmentResource)
	return PodNetworkCache{Networks: networks, Attachments: attachments}, err
}

// Run watches until ctx ends.
func (c PodNetworkCache) Run(ctx context.Context) {
	go c.Attachments.Run(ctx)
	c.Networks.Run(ctx)
}

// OnChange has changed called after the watch of PodNetworks delivers
// one added, updated or deleted (WatchCache.OnChange).
func (c PodNetworkCache) OnChange(changed func()) error { return c.Networks.OnChange(changed) }

// GetPodNetwork reads the PodNetwork name.
func (c PodNetworkCache) GetPodNetwork(ctx context.Context, name string) (*pnv1.PodNetwork, error) {
	return c.Networks.Get(ctx, "", name)
}

// GetPodNetworkAttachment reads the PodNetworkAttachment namespace/name.
func (c PodNetworkCache) GetPodNetworkAttachment(ctx context.Context, namespace, name string) (*pnv1.PodNetworkAttachment, error) {
	return c.Attachments.Get(ctx, namespace, name)
}

// ListPodNetworks lists the PodNetworks.
func (c PodNetworkCache) ListPodNetworks(ctx context.Context) ([]*pnv1.PodNetwork, error) {
	return c.Networks.List(ctx)
}
