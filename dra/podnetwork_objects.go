package dra

import (
	"context"
	"fmt"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/netapi"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/nri"
)

// PodNetworks reads PodNetworks and PodNetworkAttachments from the API
// server, one GET each: a pod's networks are judged as they are when its
// sandbox is made.
type PodNetworks struct{ Client dynamic.Interface }

var _ nri.PodNetworkGetter = PodNetworks{}

// GetPodNetwork reads the PodNetwork name.
func (p PodNetworks) GetPodNetwork(ctx context.Context, name string) (*pnv1.PodNetwork, error) {
	u, err := p.Client.Resource(pnv1.PodNetworkResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var pn pnv1.PodNetwork
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pn); err != nil {
		return nil, fmt.Errorf("decode PodNetwork %s: %w", name, err)
	}
	return &pn, nil
}

// GetPodNetworkAttachment reads the PodNetworkAttachment namespace/name.
func (p PodNetworks) GetPodNetworkAttachment(ctx context.Context, namespace, name string) (*pnv1.PodNetworkAttachment, error) {
	u, err := p.Client.Resource(pnv1.PodNetworkAttachmentResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var pna pnv1.PodNetworkAttachment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pna); err != nil {
		return nil, fmt.Errorf("decode PodNetworkAttachment %s/%s: %w", namespace, name, err)
	}
	return &pna, nil
}

// PodNetworkSource lists, for the CRI Network API, the PodNetworks this
// node attaches (fastpath's provider, or none) with the configuration of
// the NetworkAttachmentDefinition of their parametersRefs. One LIST, and a
// GET per such object, per call: the API's ListPodNetwork is an operator's
// question, not a hot path.
type PodNetworkSource struct {
	Client dynamic.Interface
	NADs   nri.NADGetter
	// ConfDir is --npwg-conf-dir, for an object with no spec.config.
	ConfDir string
}

var _ netapi.Source = PodNetworkSource{}

// Networks lists the PodNetworks.
func (s PodNetworkSource) Networks(ctx context.Context) ([]netapi.SourceNetwork, error) {
	list, err := s.Client.Resource(pnv1.PodNetworkResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list PodNetworks: %w", err)
	}
	var out []netapi.SourceNetwork
	for _, u := range list.Items {
		var pn pnv1.PodNetwork
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pn); err != nil {
			continue
		}
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
		cfg, err := npwg.LoadConfig(nad, s.ConfDir)
		if err != nil {
			return nil, err.Error()
		}
		return cfg.List.Bytes, ""
	}
	return nil, "no NetworkAttachmentDefinition in parametersRefs (a network of that name set through this API would be its configuration)"
}

// NADSource lists, for the CRI Network API, the NetworkAttachmentDefinitions
// of the cluster (--npwg), named namespace/name, with their configuration.
type NADSource struct {
	Client  dynamic.Interface
	ConfDir string
}

var _ netapi.Source = NADSource{}

// Networks lists the NetworkAttachmentDefinitions.
func (s NADSource) Networks(ctx context.Context) ([]netapi.SourceNetwork, error) {
	list, err := s.Client.Resource(NADResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list NetworkAttachmentDefinitions: %w", err)
	}
	var out []netapi.SourceNetwork
	for _, u := range list.Items {
		var nad nadv1.NetworkAttachmentDefinition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &nad); err != nil {
			continue
		}
		name := nad.Namespace + "/" + nad.Name
		n := netapi.SourceNetwork{Name: name, From: "NetworkAttachmentDefinition " + name}
		if cfg, err := npwg.LoadConfig(&nad, s.ConfDir); err != nil {
			n.Problem = err.Error()
		} else {
			n.Conflist = cfg.List.Bytes
		}
		out = append(out, n)
	}
	return out, nil
}
