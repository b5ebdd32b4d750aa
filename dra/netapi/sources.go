package netapi

import (
	"context"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/attach"
	"github.com/fastpath-dra/fastpath/dra/npwg"
)

// NADs reads NetworkAttachmentDefinitions (a watch cache of them).
type NADs interface {
	GetNAD(ctx context.Context, namespace, name string) (*nadv1.NetworkAttachmentDefinition, error)
	ListNADs(ctx context.Context) ([]*nadv1.NetworkAttachmentDefinition, error)
}

// PodNetworks lists PodNetworks (a watch cache of them).
type PodNetworks interface {
	ListPodNetworks(ctx context.Context) ([]*pnv1.PodNetwork, error)
}

// PodNetworkSource lists, for the CRI Network API and the node's labels,
// the PodNetworks this node attaches (fastpath's provider, or none) with
// the configuration of the NetworkAttachmentDefinition of their
// parametersRefs, from the daemon's watches of them, judged as the
// runtime's hook judges them when a pod names one: a PodNetwork not
// enabled and Ready, or whose configuration the node's rules refuse (a
// plugin off the allowlist, an object of the host the operator does not
// allow, an on-disk configuration its namespace may not use), has the
// refusal as its problem.
type PodNetworkSource struct {
	Objects PodNetworks
	NADs    NADs
	// Rules are what the node holds a NetworkAttachmentDefinition's
	// configuration to (fastpathd run --npwg's).
	Rules npwg.ConfigRules
}

// Networks lists the PodNetworks.
func (s PodNetworkSource) Networks(ctx context.Context) ([]SourceNetwork, error) {
	list, err := s.Objects.ListPodNetworks(ctx)
	if err != nil {
		return nil, err
	}
	var out []SourceNetwork
	for _, pn := range list {
		if pn.Name == pnv1.DefaultPodNetworkName || (pn.Spec.Provider != "" && pn.Spec.Provider != pnv1.FastpathProvider) {
			continue
		}
		n := SourceNetwork{Name: pn.Name, From: "PodNetwork " + pn.Name}
		n.Conflist, n.Problem = s.conflist(ctx, pn.Spec.ParametersRefs)
		if err := attach.Usable(pn); err != nil {
			n.Unusable = err.Error()
		}
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
		cfg, err := s.Rules.Config(nad)
		if err != nil {
			return nil, err.Error()
		}
		return cfg.List.Bytes, ""
	}
	return nil, "no NetworkAttachmentDefinition in parametersRefs (a network of that name set through this API would be its configuration)"
}

// NADSource lists, for the CRI Network API, the NetworkAttachmentDefinitions
// of the cluster (--npwg), named namespace/name, with their configuration,
// from the daemon's watch of them, judged by the node's rules as
// PodNetworkSource's.
type NADSource struct {
	NADs NADs
	// Rules are what the node holds a configuration to.
	Rules npwg.ConfigRules
}

// Networks lists the NetworkAttachmentDefinitions.
func (s NADSource) Networks(ctx context.Context) ([]SourceNetwork, error) {
	list, err := s.NADs.ListNADs(ctx)
	if err != nil {
		return nil, err
	}
	var out []SourceNetwork
	for _, nad := range list {
		name := nad.Namespace + "/" + nad.Name
		n := SourceNetwork{Name: name, From: "NetworkAttachmentDefinition " + name}
		if cfg, err := s.Rules.Config(nad); err != nil {
			n.Problem = err.Error()
		} else {
			n.Conflist = cfg.List.Bytes
		}
		out = append(out, n)
	}
	return out, nil
}
