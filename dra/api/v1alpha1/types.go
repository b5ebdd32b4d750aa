package v1alpha1

import (
	"encoding/json"
	"slices"
)

// API groups, versions and kinds.
const (
	// GroupVersion is the apiVersion of fastpath's own kinds.
	GroupVersion        = "fastpath.dev/v1alpha1"
	KindInterfaceConfig = "InterfaceConfig"
	KindMemifConfig     = "MemifConfig"
	KindIPPoolConfig    = "IPPoolConfig"

	// CNIGroupVersion is the apiVersion of the CNI DRA driver's parameters.
	CNIGroupVersion = "cni.networking.x-k8s.io/v1alpha1"
	// CNIDRAGroupVersion is the apiVersion of the upstream CNI DRA
	// driver's parameters (kubernetes-sigs/cni-dra-driver, apis/v1alpha1):
	// kind CNI with ifName and config, a whole CNI configuration.
	CNIDRAGroupVersion = "cni.dra.networking.x-k8s.io/v1alpha1"
	KindCNI            = "CNI"
)

// Modes a device can be handed to a pod in.
const (
	ModeNetdev = "netdev" // the kernel interface moves into the pod
	ModeVFIO   = "vfio"   // the PCI function is bound to vfio-pci for DPDK
	ModeAFXDP  = "afxdp"  // the interface moves with an XDP program and its XSKMAP
	// ModeDelegate prepares the device (its device-info, the PCIDEVICE_*
	// environment) and leaves its configuration to the CNI plugin of the
	// NetworkAttachmentDefinition that names its resource (fastpathd run
	// --npwg), as the SR-IOV device plugin does for sriov-cni.
	ModeDelegate = "delegate"

	// The shared modes: the device stays in the host and the pod gets a
	// sub-interface of it, made in the pod's namespace.
	ModeMacvlan = "macvlan"
	ModeIPVLAN  = "ipvlan"
	ModeVLAN    = "vlan"
)

// Modes lists the modes.
var Modes = []string{ModeNetdev, ModeVFIO, ModeAFXDP, ModeDelegate, ModeMacvlan, ModeIPVLAN, ModeVLAN}

// SharedModes are the modes of a device many claims share.
var SharedModes = []string{ModeMacvlan, ModeIPVLAN, ModeVLAN}

// Shared reports whether mode gives the pod a sub-interface of a shared
// device rather than the device.
func Shared(mode string) bool { return slices.Contains(SharedModes, mode) }

// macvlan and ipvlan modes.
const (
	MacvlanBridge   = "bridge"
	MacvlanPrivate  = "private"
	MacvlanVEPA     = "vepa"
	MacvlanPassthru = "passthru"
	IPVLANL2        = "l2"
	IPVLANL3        = "l3"
	IPVLANL3S       = "l3s"
)

// MacvlanModes and IPVLANModes list the modes of each kind.
var (
	MacvlanModes = []string{MacvlanBridge, MacvlanPrivate, MacvlanVEPA, MacvlanPassthru}
	IPVLANModes  = []string{IPVLANL2, IPVLANL3, IPVLANL3S}
)

// VLAN protocols.
const (
	VLANProto8021Q  = "802.1q"
	VLANProto8021AD = "802.1ad"
)

// XDP programs fastpath ships (package bpf builds them).
const (
	// XDPProgramXSKRedirect hands each packet to the AF_XDP socket of its
	// RX queue, or to the kernel when there is none.
	XDPProgramXSKRedirect = "xsk-redirect"
	// XDPProgramCount counts packets and bytes per queue and passes them.
	XDPProgramCount = "xdp-count"
)

// XDPPrograms lists the programs a config may name.
var XDPPrograms = []string{XDPProgramXSKRedirect, XDPProgramCount}

// XDP attach modes and AF_XDP zero-copy choices.
const (
	AttachNative     = "native"
	AttachGeneric    = "generic"
	ZeroCopyPrefer   = "preferred"
	ZeroCopyRequired = "required"
	ZeroCopyOff      = "off"
)

// memif roles (the role the pod takes) and modes.
const (
	MemifRoleMaster   = "master"
	MemifRoleSlave    = "slave"
	MemifModeEthernet = "ethernet"
	MemifModeIP       = "ip"
	MemifModePunt     = "punt"
)

// InterfaceConfig configures one device of a claim. DeviceClass configs
// apply first, then the claim's; a field set later wins, lists are
// replaced whole, but for the fields a DeviceClass pins (Merge).
//
//	apiVersion: fastpath.dev/v1alpha1
//	kind: InterfaceConfig
//	mode: netdev
//	interface: {name: net1, mtu: 9000, addresses: [10.10.1.2/24]}
//	vf: {vlan: 100, spoofChk: true}
//
// or, for a sub-interface of a device many pods share:
//
//	mode: macvlan
//	macvlan: {mode: bridge}
//	interface: {name: net1}
//	ipam: {pool: fast}
//
// apiVersion and kind may be left empty in Go: they are set when the
// config is marshalled.
type InterfaceConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Mode is netdev (default), vfio, afxdp or delegate for a device of its
	// own;
	// macvlan, ipvlan or vlan for a sub-interface of a shared device.
	// memif devices ignore it.
	Mode      string         `json:"mode,omitempty"`
	Interface *InterfaceSpec `json:"interface,omitempty"`
	VF        *VFConfig      `json:"vf,omitempty"`
	XDP       *XDPConfig     `json:"xdp,omitempty"`
	Memif     *MemifSpec     `json:"memif,omitempty"`
	// Macvlan, IPVLAN and VLAN configure the sub-interface of their mode.
	Macvlan *MacvlanConfig `json:"macvlan,omitempty"`
	IPVLAN  *IPVLANConfig  `json:"ipvlan,omitempty"`
	VLAN    *VLANConfig    `json:"vlan,omitempty"`
	// IPAM gives the interface an address from a pool of the node, besides
	// interface.addresses.
	IPAM *IPAMSpec `json:"ipam,omitempty"`
	// RDMA gives the pod the RDMA device on top of the device's netdev
	// (attribute rdmaDevice), in modes netdev, macvlan, ipvlan and vlan.
	RDMA *RDMAConfig `json:"rdma,omitempty"`
	// ResourceName (mode delegate) is the resource name the
	// NetworkAttachmentDefinitions that may take the device ask for, in
	// place of the device's own (attribute k8s.cni.cncf.io/resourceName):
	// a DeviceClass sets it to keep the names of existing
	// NetworkAttachmentDefinitions.
	ResourceName string `json:"resourceName,omitempty"`
	// PodNetwork names the PodNetwork (KEP-3698, network.fastpath.dev) the
	// device's interface is the pod's attachment to, or PodNetworkAttachment
	// one of the claim's namespace: it must exist, be Ready and enabled for
	// the claim to be prepared (fastpathd run --podnetworks), and the pod's
	// PodNetwork status lists the interface under its name.
	PodNetwork           string `json:"podNetwork,omitempty"`
	PodNetworkAttachment string `json:"podNetworkAttachment,omitempty"`
	// Pinned, only in a DeviceClass's config, lists fields (of
	// PinnableFields: mode, vf.vlan, ipam.pool, ...) that a claim's config
	// may not change: a claim that sets one to another value than the
	// class's (or unsets it) is refused. A pinned field the class leaves
	// unset may not be set by a claim.
	Pinned []string `json:"pinned,omitempty"`
	// SharedParent, only in a DeviceClass's config, says what a claim of
	// the class may do to a shared device that takes it from the other
	// claims sharing it; left out, none of it.
	SharedParent *SharedParent `json:"sharedParent,omitempty"`
}

// SharedParent is what claims of a DeviceClass may ask of a shared device
// (modes macvlan, ipvlan and vlan) that takes it from the others sharing
// it: a shared device is an L2 of many tenants, and each of these is the
// operator's to give. A field left out (or empty) allows its default.
type SharedParent struct {
	// MacvlanModes are the macvlan modes a claim may use; default bridge,
	// private and vepa. passthru only when listed: its sub-interface takes
	// the device whole (promiscuous, its MAC the pod's to change, no
	// other macvlan on it).
	MacvlanModes []string `json:"macvlanModes,omitempty"`
	// VLANIDs are the VLAN IDs a claim in mode vlan may use, each an ID
	// ("100") or a range ("100-199") within 1-4094; default none, so mode
	// vlan is refused: a VLAN of a shared device is a network of the
	// node's.
	VLANIDs []string `json:"vlanIDs,omitempty"`
	// VLANProtocols are the VLAN protocols a claim in mode vlan may use;
	// default 802.1q. 802.1ad only when listed: its sub-interface carries
	// every customer VLAN of its service VLAN.
	VLANProtocols []string `json:"vlanProtocols,omitempty"`
	// RDMAUMAD lets a claim ask for the management datagram devices of the
	// device's RDMA device (rdma.umad): on a shared device every claim on
	// it would hold them, and with them InfiniBand management of the port.
	RDMAUMAD bool `json:"rdmaUMAD,omitempty"`
}

// MacvlanConfig is a macvlan sub-interface (mode macvlan).
type MacvlanConfig struct {
	// Mode is bridge (default: the pods of one parent reach each other),
	// private, vepa or passthru (one sub-interface takes the parent).
	Mode string `json:"mode,omitempty"`
}

// IPVLANConfig is an ipvlan sub-interface (mode ipvlan): the parent's MAC,
// its own addresses.
type IPVLANConfig struct {
	// Mode is l2 (default), l3 or l3s.
	Mode string `json:"mode,omitempty"`
}

// VLANConfig is an 802.1Q (or 802.1ad) sub-interface (mode vlan).
type VLANConfig struct {
	// ID is the VLAN ID, 1-4094.
	ID int `json:"id"`
	// Protocol is 802.1q (default) or 802.1ad.
	Protocol string `json:"protocol,omitempty"`
}

// RDMAConfig gives a pod the RDMA device on top of its device's netdev:
// its character devices (/dev/infiniband/uverbsN, and rdma_cm where the
// node has it) through CDI, and, in mode netdev with the node's RDMA
// subsystem in exclusive network namespace mode, the RDMA device itself
// in the pod's namespace with its netdev. `rdma: {}` asks for it.
type RDMAConfig struct {
	// UMAD adds the device's management datagram files
	// (/dev/infiniband/umadN, one per port), which InfiniBand subnet
	// tools need; a device without them is refused.
	UMAD bool `json:"umad,omitempty"`
}

// RDMAModes are the modes a config with rdma may have: the device's
// netdev goes into the pod, or a sub-interface of it does.
var RDMAModes = []string{ModeNetdev, ModeMacvlan, ModeIPVLAN, ModeVLAN}

// IPAMSpec asks for an address from a pool of the node's IPPoolConfig.
type IPAMSpec struct {
	// Pool names the pool.
	Pool string `json:"pool"`
}

// IPPoolConfig is the operator's file of the node's address pools
// (--ip-pools), from which claims with ipam get their addresses. An
// address is held by one claim from Prepare to Unprepare.
//
//	apiVersion: fastpath.dev/v1alpha1
//	kind: IPPoolConfig
//	pools:
//	- name: fast
//	  subnet: 10.56.0.0/24
//	  rangeStart: 10.56.0.10     # default: the subnet's first host
//	  rangeEnd: 10.56.0.250      # default: its last (before broadcast)
//	  gateway: 10.56.0.1         # never given out
//	  exclude: [10.56.0.100/30]  # never given out
//	  routes: [{destination: 10.57.0.0/16}]  # through gateway when it has none
type IPPoolConfig struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Pools      []IPPool `json:"pools"`
}

// IPPool is one pool of addresses.
type IPPool struct {
	Name       string   `json:"name"`
	Subnet     string   `json:"subnet"`
	RangeStart string   `json:"rangeStart,omitempty"`
	RangeEnd   string   `json:"rangeEnd,omitempty"`
	Gateway    string   `json:"gateway,omitempty"`
	Exclude    []string `json:"exclude,omitempty"`
	Routes     []Route  `json:"routes,omitempty"`
}

// InterfaceSpec is the kernel interface in the pod (netdev and afxdp modes).
type InterfaceSpec struct {
	// Name in the pod; default: the request's name.
	Name string `json:"name,omitempty"`
	// MTU within the device's own range; 0 keeps the device's.
	MTU int `json:"mtu,omitempty"`
	// MAC is a unicast Ethernet address; "" keeps the device's.
	MAC string `json:"mac,omitempty"`
	// Addresses in canonical CIDR form.
	Addresses []string `json:"addresses,omitempty"`
	Routes    []Route  `json:"routes,omitempty"`
	// Rules are policy-routing rules made in the pod's namespace with
	// the interface (modes netdev and afxdp).
	Rules []Rule `json:"rules,omitempty"`
	// VRF is a VRF device made in the pod, the interface enslaved to it
	// (modes netdev and afxdp).
	VRF *VRF `json:"vrf,omitempty"`
	// Neighbors are static neighbour entries on the interface (modes
	// netdev and afxdp).
	Neighbors []Neighbor `json:"neighbors,omitempty"`
	// Sysctls are the interface's own settings, by their name below
	// net.ipv4.conf.<interface> or net.ipv6.conf.<interface>:
	// "ipv4.arp_ignore": "1". The node allows those of DefaultSysctls and
	// the operator's --interface-sysctls (modes netdev and afxdp).
	Sysctls map[string]string `json:"sysctls,omitempty"`
	// Ethtool sets the device's features and private flags, restored on
	// release (modes netdev and afxdp).
	Ethtool *EthtoolConfig `json:"ethtool,omitempty"`
	// GSOMaxSize and GROMaxSize (IPv6 and any family above 64 KiB) and
	// GSOIPv4MaxSize and GROIPv4MaxSize set the device's largest
	// segmentation and receive aggregates in bytes, BIG TCP above 65536,
	// restored on release; 0 keeps the device's (modes netdev and afxdp).
	GSOMaxSize     int `json:"gsoMaxSize,omitempty"`
	GROMaxSize     int `json:"groMaxSize,omitempty"`
	GSOIPv4MaxSize int `json:"gsoIPv4MaxSize,omitempty"`
	GROIPv4MaxSize int `json:"groIPv4MaxSize,omitempty"`
}

// Route is a route through the interface.
type Route struct {
	Destination string `json:"destination"`
	Gateway     string `json:"gateway,omitempty"`
	// Table is the routing table, 1 to 2^32-1 but for 253-255 (the
	// kernel's default, main and local); 0: main.
	Table int64 `json:"table,omitempty"`
	// Source is the preferred source address, one of the interface's.
	Source string `json:"source,omitempty"`
	// Scope is universe (default), link or host.
	Scope string `json:"scope,omitempty"`
	// Metric is the route's priority, lower first.
	Metric int64 `json:"metric,omitempty"`
}

// Route scopes.
const (
	ScopeUniverse = "universe"
	ScopeLink     = "link"
	ScopeHost     = "host"
)

// RouteScopes are the scopes a route may have.
var RouteScopes = []string{ScopeUniverse, ScopeLink, ScopeHost}

// Rule is a policy-routing rule: traffic it matches is looked up in
// Table. At least one of From, To, IIF, OIF and FWMark.
type Rule struct {
	// Priority orders rules, lower first: 1 to 32765 (0 and 32766-32767
	// are the kernel's own); 0 lets the kernel choose.
	Priority int `json:"priority,omitempty"`
	// From and To match source and destination prefixes (CIDR).
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// IIF and OIF match the input and output interface by its name in
	// the pod.
	IIF string `json:"iif,omitempty"`
	OIF string `json:"oif,omitempty"`
	// FWMark matches the packet mark, under FWMask when set.
	FWMark *uint32 `json:"fwmark,omitempty"`
	FWMask *uint32 `json:"fwmask,omitempty"`
	// Table is looked up for matching traffic, as Route.Table.
	Table int64 `json:"table"`
}

// VRF is a VRF device in the pod: its name there, and its routing table.
type VRF struct {
	Name  string `json:"name"`
	Table int64  `json:"table"`
}

// Neighbor is a static neighbour entry: an address on the interface's
// link and its MAC.
type Neighbor struct {
	Address string `json:"address"`
	MAC     string `json:"mac"`
}

// EthtoolConfig sets ethtool features (by the kernel's names, as
// `ethtool -k` prints them: rx-gro, tx-checksum-ip-generic, ..., or the
// legacy long names such as generic-receive-offload) and private flags
// (the driver's, as `ethtool --show-priv-flags` prints them).
type EthtoolConfig struct {
	Features     map[string]bool `json:"features,omitempty"`
	PrivateFlags map[string]bool `json:"privateFlags,omitempty"`
}

// VFConfig is applied to an SR-IOV VF through its PF, and restored on
// release. A field left out is left as the VF has it.
type VFConfig struct {
	VLAN          *int   `json:"vlan,omitempty"`
	QoS           *int   `json:"qos,omitempty"`
	VLANProto     string `json:"vlanProto,omitempty"` // 802.1q | 802.1ad
	SpoofChk      *bool  `json:"spoofChk,omitempty"`
	Trust         *bool  `json:"trust,omitempty"`
	MinTxRateMbps *int   `json:"minTxRateMbps,omitempty"`
	MaxTxRateMbps *int   `json:"maxTxRateMbps,omitempty"`
	LinkState     string `json:"linkState,omitempty"` // auto | enable | disable
}

// XDPConfig configures afxdp mode.
type XDPConfig struct {
	// Program is one of XDPPrograms; default xsk-redirect.
	Program string `json:"program,omitempty"`
	// AttachMode is native (default) or generic.
	AttachMode string `json:"attachMode,omitempty"`
	// FallbackToGeneric allows generic mode when the driver has no native
	// XDP; without it, native mode or nothing.
	FallbackToGeneric bool `json:"fallbackToGeneric,omitempty"`
	// Queues is how many RX queues (from 0) the pod's sockets serve; the
	// device's combined channels are set to it where it has them.
	Queues int `json:"queues,omitempty"`
	// ZeroCopy is preferred (default), required or off.
	ZeroCopy string `json:"zeroCopy,omitempty"`
}

// MemifSpec configures the per-claim directory of a memif device, which
// holds the socket and is mounted into the containers.
type MemifSpec struct {
	// UID and GID own the directory (mode 0750), so that a container
	// running as that user can use (or, as master, create) the socket.
	// Default: 0 (root).
	UID *int64 `json:"uid,omitempty"`
	GID *int64 `json:"gid,omitempty"`
}

// MemifConfig is the operator's file of static memif endpoints
// (--memif-config), for endpoints whose socket is not (yet) in --memif-dir.
//
//	apiVersion: fastpath.dev/v1alpha1
//	kind: MemifConfig
//	endpoints:
//	- name: fw0              # device memif-fw0
//	  role: slave            # the role the pod takes: slave connects, master serves
//	  mode: ethernet         # ethernet | ip | punt
//	  socketPath: /run/vswitch/fw0.sock  # in --memif-dir
//
// A slave endpoint's socketPath is the vswitch's socket the pod connects
// to. A master endpoint's socketPath is optional: the pod creates its
// socket in its own directory, and fastpath links socketPath to it so that
// the vswitch finds it there.
type MemifConfig struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Endpoints  []MemifEndpoint `json:"endpoints"`
}

// MemifEndpoint is one statically defined memif endpoint.
type MemifEndpoint struct {
	Name       string `json:"name"`
	Role       string `json:"role"`
	Mode       string `json:"mode,omitempty"`
	SocketPath string `json:"socketPath,omitempty"`
}

// The kinds marshal with their apiVersion and kind filled in, so that Go
// code building a config need not set them.

// MarshalJSON implements json.Marshaler.
func (c InterfaceConfig) MarshalJSON() ([]byte, error) {
	type plain InterfaceConfig
	c.APIVersion, c.Kind = orDefault(c.APIVersion, GroupVersion), orDefault(c.Kind, KindInterfaceConfig)
	return json.Marshal(plain(c))
}

// MarshalJSON implements json.Marshaler.
func (c MemifConfig) MarshalJSON() ([]byte, error) {
	type plain MemifConfig
	c.APIVersion, c.Kind = orDefault(c.APIVersion, GroupVersion), orDefault(c.Kind, KindMemifConfig)
	return json.Marshal(plain(c))
}

// MarshalJSON implements json.Marshaler.
func (c IPPoolConfig) MarshalJSON() ([]byte, error) {
	type plain IPPoolConfig
	c.APIVersion, c.Kind = orDefault(c.APIVersion, GroupVersion), orDefault(c.Kind, KindIPPoolConfig)
	return json.Marshal(plain(c))
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
