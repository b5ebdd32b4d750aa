package dra

import (
	"context"

	"k8s.io/client-go/dynamic"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/netapi"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/nri"
)

// PodNetworkCache reads PodNetworks and PodNetworkAttachments from a
// watch of them, and with a GET those it does not have yet (WatchCache): a
// pod's networks are judged as the watch last saw them when its sandbox is
// made, milliseconds behind the API server.
type PodNetworkCache struct {
	Networks    *WatchCache[pnv1.PodNetwork, *pnv1.PodNetwork]
	Attachments *WatchCache[pnv1.PodNetworkAttachment, *pnv1.PodNetworkAttachment]
}

var _ nri.PodNetworkGetter = PodNetworkCache{}

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

// GetPodNetwork reads the PodNetwork name.
func (c PodNetworkCache) GetPodNetwork(ctx context.Context, name string) (*pnv1.PodNetwork, error) {
	return c.Networks.Get(ctx, "", name)
}

// GetPodNetworkAttachment reads the PodNetworkAttachment namespace/name.
func (c PodNetworkCache) GetPodNetworkAttachment(ctx context.Context, namespace, name string) (*pnv1.PodNetworkAttachment, error) {
	return c.Attachments.Get(ctx, namespace, name)
}

// PodNetworkSource lists, for the CRI Network API, the PodNetworks this
// node attaches (fastpath's provider, or none) with the configuration of
// the NetworkAttachmentDefinition of their parametersRefs, from the
// daemon's watches of them.
type PodNetworkSource struct {
	Objects PodNetworkCache
	NADs    nri.NADGetter
	// ConfDir is --npwg-conf-dir and --npwg-conf-namespaces, for an
	// object with no spec.config.
	ConfDir npwg.ConfDir
}

var _ netapi.Source = PodNetworkSource{}

// Networks lists the PodNetworks.
func (s PodNetworkSource) Networks(ctx context.Context) ([]netapi.SourceNetwork, error) {
	list, err := s.Objects.Networks.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []netapi.SourceNetwork
	for _, pn := range list {
		if pn.Name == pnv1.DefaultPodNetworkName || (pn.Spec.Provider != "" && pn.Spec.Provider != nri.Provider) {
			continue
		}
		n := netapi.SourceNetwork{Name: pn.Name, From: "PodNetwork " + pn.Name}
		n.Conflist, n.Problem = s.conflist(ctx, pn.Spec.ParametersRefs)
		out = append(out, n)
	}
	return out, nil
}

// conflist is the configuration of the first NetworkAttachmentDefinition
// of refs, or why there is none.
func (s PodNetworkSource) conflist(ctx context.Context, refs []pnv1.ParametersRef) ([]byte, string) {
	for _, ref := range refs {
		if !ref.NamesNAD() {
			continue
		}
		nad, err := s.NADs.GetNAD(ctx, ref.Namespace, ref.Name)
		if err != nil {
			return nil, err.Error()
		}
		cfg, err := s.ConfDir.Load(nad)
		if err != nil {
			return nil, err.Error()
		}
		return cfg.List.Bytes, ""
	}
	return nil, "no NetworkAttachmentDefinition in parametersRefs (a network of that name set through this API would be its configuration)"
}

// NADSource lists, for the CRI Network API, the NetworkAttachmentDefinitions
// of the cluster (--npwg), named namespace/name, with their configuration,
// from the daemon's watch of them.
type NADSource struct {
	NADs NADCache
	// ConfDir is --npwg-conf-dir and --npwg-conf-namespaces, for an
	// object with no spec.config.
	ConfDir npwg.ConfDir
}

var _ netapi.Source = NADSource{}

// Networks lists the NetworkAttachmentDefinitions.
func (s NADSource) Networks(ctx context.Context) ([]netapi.SourceNetwork, error) {
	list, err := s.NADs.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []netapi.SourceNetwork
	for _, nad := range list {
		name := nad.Namespace + "/" + nad.Name
		n := netapi.SourceNetwork{Name: name, From: "NetworkAttachmentDefinition " + name}
		if cfg, err := s.ConfDir.Load(nad); err != nil {
			n.Problem = err.Error()
		} else {
			n.Conflist = cfg.List.Bytes
		}
		out = append(out, n)
	}
	return out, nil
}
