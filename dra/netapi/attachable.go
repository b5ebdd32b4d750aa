package netapi

import (
	"context"
	"fmt"
)

// NamedConfigs are networks by name: the CRI Network API's (Registry).
type NamedConfigs interface {
	// Conflist is the configuration list of the network name; false for
	// none.
	Conflist(name string) ([]byte, bool)
}

var _ NamedConfigs = (*Registry)(nil)

// PodNetworkJudge says which of the PodNetworks this node attaches it can
// attach now, as the daemon would configure them: with the CRI Network
// API's network of the PodNetwork's name when there is one, else with the
// configuration its source gives (the NetworkAttachmentDefinition of its
// parametersRefs, judged by the node's rules: PodNetworkSource). One its
// source says is unusable (not enabled, not Ready) it cannot attach,
// whatever its configuration.
type PodNetworkJudge struct {
	// Source lists the PodNetworks this node attaches (PodNetworkSource).
	Source Source
	// API are the networks set through the CRI Network API; nil: the API
	// is off.
	API NamedConfigs
	// BinDirs are the directories of CNI plugin executables.
	BinDirs []string
}

// Attachable is every PodNetwork of the source by name, with "" for one
// this node can attach now, else why it cannot. It runs no plugin: the
// judgement is ListPodNetwork's sandbox_management (the configuration
// parses, its plugins are installed, the host interfaces it names exist),
// not CNI STATUS.
func (j PodNetworkJudge) Attachable(ctx context.Context) (map[string]string, error) {
	nets, err := j.Source.Networks(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the node's PodNetworks: %w", err)
	}
	c := checker{binDirs: j.BinDirs}
	out := make(map[string]string, len(nets))
	for _, n := range nets {
		from, conflist, problem := n.From, n.Conflist, n.Problem
		if n.Unusable != "" {
			out[n.Name] = from + ": " + n.Unusable
			continue
		}
		if j.API != nil {
			if data, ok := j.API.Conflist(n.Name); ok {
				from, conflist, problem = "the CRI Network API's network "+n.Name, data, ""
			}
		}
		if problem == "" && conflist == nil {
			problem = "no configuration"
		}
		if problem == "" {
			problem = c.sandboxProblem(conflist)
		}
		if problem != "" {
			problem = from + ": " + problem
		}
		out[n.Name] = problem
	}
	return out, nil
}
