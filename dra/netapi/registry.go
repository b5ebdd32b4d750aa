package netapi

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
)

// Options configure a Registry.
type Options struct {
	// StateFile keeps the networks set through the API across restarts;
	// empty: they are not kept.
	StateFile string
	// CNIConfDir holds the node's CNI configuration, whose first file is
	// "_fallback"; empty: no "_fallback".
	CNIConfDir string
	// BinDirs are the directories of CNI plugin executables.
	BinDirs []string
	// Status runs CNI STATUS; nil: libcni with BinDirs, within CNILimit.
	Status StatusRunner
	// CNILimit bounds the plugins STATUS runs at once with the others of
	// the node; nil: no bound.
	CNILimit *dataplane.CNILimit
	// Sources are the node's networks from elsewhere (PodNetworks,
	// NetworkAttachmentDefinitions): listed with their status, after
	// those set through the API; not set or removed through it.
	Sources []Source
}

// Source is networks the node has from elsewhere than the API.
type Source interface {
	// Networks are the source's networks now.
	Networks(ctx context.Context) ([]SourceNetwork, error)
}

// SourceNetwork is one network of a Source.
type SourceNetwork struct {
	// Name is the network's name on the node (a PodNetwork's name, a
	// NetworkAttachmentDefinition's namespace/name).
	Name string
	// From says where it is from, e.g. "PodNetwork dataplane".
	From string
	// Conflist is its CNI configuration list; nil with Problem when it has
	// none this node can read.
	Conflist []byte
	Problem  string
	// Unusable says why no pod may attach the network now, whatever its
	// configuration (a PodNetwork not enabled or not Ready); a network of
	// its name set through the API does not change it.
	Unusable string
}

// Registry is the node's registry of named networks: those set through
// the API and "_fallback". Safe for concurrent use.
type Registry struct {
	opts    Options
	checker checker

	mu       sync.Mutex
	networks map[string]*NetworkConfig
	fallback fallback
}

// NewRegistry reads the networks kept in opts.StateFile and the CNI
// configuration directory's "_fallback". Run keeps the latter current.
func NewRegistry(ctx context.Context, opts Options) (*Registry, error) {
	runner := opts.Status
	if runner == nil {
		runner = dataplane.NewCNI(opts.BinDirs, "", opts.CNILimit)
	}
	r := &Registry{opts: opts, checker: checker{binDirs: opts.BinDirs, runner: runner}, networks: map[string]*NetworkConfig{}}
	if opts.StateFile != "" {
		networks, err := loadNetworks(opts.StateFile)
		if err != nil {
			return nil, err
		}
		for _, n := range networks {
			r.networks[n.GetMetadata().GetName()] = n
		}
	}
	if opts.CNIConfDir != "" {
		r.reloadFallback(ctx)
	}
	return r, nil
}

// Set validates cfg and sets the network of its name, replacing one of
// that name, and keeps it; it returns the network's status.
func (r *Registry) Set(ctx context.Context, cfg *NetworkConfig) (*NetworkStatus, error) {
	if err := ValidateConfig(cfg); err != nil {
		return nil, err
	}
	cfg = proto.CloneOf(cfg)
	name := cfg.GetMetadata().GetName()
	r.mu.Lock()
	old, had := r.networks[name]
	if had {
		cfg.Metadata.Generation = old.GetMetadata().GetGeneration() + 1
	} else {
		cfg.Metadata.Generation = 1
	}
	r.networks[name] = cfg
	if err := r.persistLocked(); err != nil {
		if had {
			r.networks[name] = old
		} else {
			delete(r.networks, name)
		}
		r.mu.Unlock()
		return nil, fmt.Errorf("keep network %s: %w", name, err)
	}
	r.mu.Unlock()
	klog.FromContext(ctx).Info("Network set", "network", name, "generation", cfg.Metadata.Generation)
	return r.statusOf(ctx, cfg), nil
}

// Remove removes the network of that name; a network that is not there
// is no error.
func (r *Registry) Remove(ctx context.Context, name string) error {
	if name == "" {
		return &FieldError{"name", "required"}
	}
	if name[0] == '_' {
		return fmt.Errorf("network %q: %w: it is the node's (%s is its CNI configuration directory's first file: remove that file instead)", name, ErrReserved, FallbackName)
	}
	if err := validName(name); err != nil {
		// No network can have it: another shape of request read as a
		// name, most likely.
		return &FieldError{"name", fmt.Sprintf("%q: %v", name, err)}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old, had := r.networks[name]
	if !had {
		return nil
	}
	delete(r.networks, name)
	if err := r.persistLocked(); err != nil {
		r.networks[name] = old
		return fmt.Errorf("remove network %s: %w", name, err)
	}
	klog.FromContext(ctx).Info("Network removed", "network", name)
	return nil
}

// Get is the network of that name ("_fallback" included) and its
// configuration list, or an error wrapping ErrNotFound.
func (r *Registry) Get(name string) (*NetworkConfig, []byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name == FallbackName && r.fallback.config != nil {
		return proto.CloneOf(r.fallback.config), r.fallback.conflist, nil
	}
	cfg, ok := r.networks[name]
	if !ok {
		return nil, nil, fmt.Errorf("network %q: %w", name, ErrNotFound)
	}
	data, err := Conflist(cfg)
	return proto.CloneOf(cfg), data, err
}

// IPRanges are the subnets of the network set through the API, nil for
// none (and for a network the node has not).
func (r *Registry) IPRanges(name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rg := range r.networks[name].GetIpRanges() {
		out = append(out, rg.GetCidr())
	}
	return out
}

// List is every network with its status, in name order: "_fallback"
// first (when there is a CNI configuration directory), then those set
// through the API.
func (r *Registry) List(ctx context.Context) []*PodNetworkResponse {
	r.mu.Lock()
	configs := make([]*NetworkConfig, 0, len(r.networks))
	for _, cfg := range r.networks {
		configs = append(configs, cfg)
	}
	fb := r.fallback
	r.mu.Unlock()
	sort.Slice(configs, func(i, j int) bool { return configs[i].GetMetadata().GetName() < configs[j].GetMetadata().GetName() })
	var out []*PodNetworkResponse
	// "_fallback" is there once a configuration is detected in the
	// directory (the proposal's "Defaulting and initialization"): none
	// there, or none readable, the log says why.
	if r.opts.CNIConfDir != "" && fb.config != nil {
		out = append(out, fb.podNetwork(ctx, r.checker))
	}
	for _, cfg := range configs {
		out = append(out, &PodNetworkResponse{Config: proto.CloneOf(cfg), Status: r.statusOf(ctx, cfg)})
	}
	for _, src := range r.opts.Sources {
		nets, err := src.Networks(ctx)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Listing the node's networks of a source")
			continue
		}
		for _, n := range nets {
			out = append(out, sourceNetwork(ctx, r.checker, n))
		}
	}
	return out
}

// sourceNetwork is a Source's network as the API lists it: its
// configuration as NetworkConfig, and its status, saying where it is from.
func sourceNetwork(ctx context.Context, c checker, n SourceNetwork) *PodNetworkResponse {
	pn := &PodNetworkResponse{Config: &NetworkConfig{Metadata: &NetworkMetadata{Name: n.Name}}}
	switch {
	case n.Unusable != "":
		pn.Status = &NetworkStatus{Message: n.From + ": " + n.Unusable}
		return pn
	case n.Problem != "" || n.Conflist == nil:
		pn.Status = &NetworkStatus{Message: n.From + ": " + n.Problem}
		return pn
	}
	cfg, err := FromConflist(n.Conflist)
	if err != nil {
		pn.Status = &NetworkStatus{Message: n.From + ": " + err.Error()}
		return pn
	}
	pn.Config.Cniv1Config = cfg
	pn.Status = c.status(ctx, n.Conflist)
	if pn.Status.Message == "" {
		pn.Status.Message = n.From
	} else {
		pn.Status.Message = n.From + ": " + pn.Status.Message
	}
	return pn
}

func (r *Registry) statusOf(ctx context.Context, cfg *NetworkConfig) *NetworkStatus {
	data, err := Conflist(cfg)
	if err != nil {
		return &NetworkStatus{Message: err.Error()}
	}
	return r.checker.status(ctx, data)
}

func (r *Registry) persistLocked() error {
	if r.opts.StateFile == "" {
		return nil
	}
	networks := make([]*NetworkConfig, 0, len(r.networks))
	for _, cfg := range r.networks {
		networks = append(networks, cfg)
	}
	return saveNetworks(r.opts.StateFile, networks)
}

// Conflist is the CNI configuration list of the network set through the
// API under that name; false for none. "_fallback" is not a network pods
// attach to by name: the runtime's own network is.
func (r *Registry) Conflist(name string) ([]byte, bool) {
	if name == FallbackName {
		return nil, false
	}
	_, data, err := r.Get(name)
	return data, err == nil
}
