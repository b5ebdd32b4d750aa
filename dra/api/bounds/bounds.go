package bounds

import resourceapi "k8s.io/api/resource/v1"

// The sizes a tenant's input may have. Each is enforced by the one decoder
// its input goes through, before the input is decoded or judged further;
// an input over one is refused with one error naming the field, the bound
// and the size.
const (
	// ConfigBytes bounds one opaque config of a claim or DeviceClass (an
	// InterfaceConfig, the parameters of a CNI request): the API server's
	// own bound for opaque parameters.
	ConfigBytes = resourceapi.OpaqueParametersMaxLength
	// NetworkConfigBytes bounds a CNI configuration that is not a claim's
	// opaque config: a NetworkAttachmentDefinition's spec.config, an
	// approved CNIConfig's spec, a PodNetwork's parameters.
	NetworkConfigBytes = 64 << 10
	// AnnotationBytes bounds a pod annotation fastpath reads (the network
	// selection k8s.v1.cni.cncf.io/networks, network.fastpath.dev/networks).
	AnnotationBytes = 64 << 10
	// Depth bounds the nesting of objects and lists in any of these.
	Depth = 32

	// Items bounds a list that no smaller bound below names (a CNI
	// plugin's own lists, cni-args, ...).
	Items = 256
	// Addresses bounds interface.addresses.
	Addresses = 32
	// Routes bounds interface.routes.
	Routes = 128
	// Rules bounds interface.rules; Neighbors interface.neighbors;
	// Sysctls interface.sysctls; EthtoolSettings each of
	// interface.ethtool.features and privateFlags.
	Rules           = 32
	Neighbors       = 64
	Sysctls         = 32
	EthtoolSettings = 64
	// Plugins bounds the plugins of one CNI configuration: the CNIConfig
	// CRD's maxItems.
	Plugins = 16
	// Arguments bounds the arguments of one CNI plugin: the CNIConfig
	// CRD's maxItems.
	Arguments = 32
)

// How much fastpath says about an input: the problems reported about one
// object, and the length of what is built from them.
const (
	// Problems bounds the problems reported about one object; the rest
	// are counted ("and N more").
	Problems = 16
	// ProblemBytes bounds the text of one problem (its value and detail
	// are cut to fit).
	ProblemBytes = 1 << 10
	// MessageBytes bounds every message built from problems: an answer to
	// the kubelet or the runtime, a log line's error, a condition's
	// message (the API server's own bound for one).
	MessageBytes = 32 << 10
)
