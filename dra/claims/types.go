package claims

import (
	"encoding/json"
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// The drivers whose claims the store holds.
const (
	DriverFastpath = "fastpath.dev"
	DriverCNI      = v1alpha1.CNIDriver
	// DriverNPWG is not a DRA driver: its records are the networks a pod
	// selects with the NPWG annotation (fastpathd run --npwg), one record
	// per pod, keyed by the pod's UID, named after the pod. No
	// ResourceClaim stands behind them.
	DriverNPWG = "k8s.cni.cncf.io"
	// DriverIPAMClaim is not a DRA driver either: its records are the
	// IPAMClaims (k8s.cni.cncf.io/v1alpha1) whose addresses pods of the
	// node took, one record per IPAMClaim, keyed by its UID, named after
	// it. Pod is the pod holding the IPAMClaim, or the last one that did;
	// Prepared says that it holds it now. A device with IPAM is an
	// address of a node pool the IPAMClaim keeps (Request the network,
	// Device the address): held from its allocation until the IPAMClaim
	// is deleted, whatever pods come and go.
	DriverIPAMClaim = "ipamclaims.k8s.cni.cncf.io"
)

// Key identifies a claim's record: one claim may have devices of both
// drivers, and each driver prepares its own part.
type Key struct {
	Driver string
	UID    types.UID
}

func (k Key) String() string { return k.Driver + "/" + string(k.UID) }

// Claim is what a driver prepared for one claim. These types are the
// checkpoint's format: they change only with Version.
type Claim struct {
	Driver    string    `json:"driver"`
	UID       types.UID `json:"uid"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	// Pod is the one pod the claim is reserved for, in the claim's namespace.
	Pod Pod `json:"pod"`
	// Devices of a fastpath.dev claim.
	Devices []Device `json:"devices,omitempty"`
	// Networks of a CNI claim.
	Networks []Network `json:"networks,omitempty"`
	// CDISpec is the claim's CDI spec file; Dir its state directory
	// (device-info files, memif directories).
	CDISpec string `json:"cdiSpec,omitempty"`
	Dir     string `json:"dir,omitempty"`
	// Steps are Prepare's side effects, each recorded as started before it
	// is done and as done after. A claim is prepared only when every step
	// is done; then the list is dropped.
	Steps []Step `json:"steps,omitempty"`
	// Prepared: every step is done.
	Prepared bool `json:"prepared"`
	// BootID is the node's boot the steps were done in: after a reboot
	// their effects are gone and are done again.
	BootID string `json:"bootID,omitempty"`

	// unknown is the record as read, when it holds fields this build does
	// not know (a newer build wrote it): they are written back with it.
	unknown json.RawMessage
	// encoded is the record's encoding (encode), when it is the store's:
	// the store never changes a record it holds, and writes the checkpoint
	// from its records' encodings.
	encoded []byte
}

// Key is the claim's key.
func (c *Claim) Key() Key { return Key{Driver: c.Driver, UID: c.UID} }

// String names the claim for people: namespace/name.
func (c *Claim) String() string { return c.Namespace + "/" + c.Name }

// Pod names a pod.
type Pod struct {
	UID  types.UID `json:"uid"`
	Name string    `json:"name"`
}

// StepState is how far a step of Prepare got.
type StepState string

// Step states. A step without a record has not started.
const (
	StepStarted StepState = "started"
	StepDone    StepState = "done"
)

// Step is the record of one step of Prepare.
type Step struct {
	Name  string    `json:"name"`
	State StepState `json:"state"`
}

// StepState says how far the named step got: "" when it has not started.
// Every step of a prepared claim is done.
func (c *Claim) StepState(name string) StepState {
	if c.Prepared {
		return StepDone
	}
	for _, s := range c.Steps {
		if s.Name == name {
			return s.State
		}
	}
	return ""
}

// SetStep records the state of the named step.
func (c *Claim) SetStep(name string, state StepState) {
	for i := range c.Steps {
		if c.Steps[i].Name == name {
			c.Steps[i].State = state
			return
		}
	}
	c.Steps = append(c.Steps, Step{Name: name, State: state})
}

// SlotName is the device's slot: Slot, else its request's name.
func (d Device) SlotName() string {
	if d.Slot != "" {
		return d.Slot
	}
	return d.Request
}

// DropStep forgets the record of the named step.
func (c *Claim) DropStep(name string) {
	c.Steps = slices.DeleteFunc(c.Steps, func(s Step) bool { return s.Name == name })
}

// Device is one device of a fastpath.dev claim and what was done to it.
type Device struct {
	Request string `json:"request"`
	// Slot names the device in the pod's files, environment and CDI
	// device name (claimspec.Slot): request.index for a device of a
	// request of several; "" (the request's name) for the only device of
	// its request, and in the records of earlier builds.
	Slot   string `json:"slot,omitempty"`
	Pool   string `json:"pool"`
	Device string `json:"device"`
	Kind   string `json:"kind"`
	// Mode is netdev, vfio, afxdp, delegate or a shared mode; "" for memif
	// endpoints.
	Mode         string `json:"mode,omitempty"`
	PCIAddress   string `json:"pciAddress,omitempty"`
	PFPCIAddress string `json:"pfPciAddress,omitempty"`
	// Driver is the PCI function's driver when it was prepared, for its
	// health (a netdev's function unbound behind fastpath's back).
	Driver string `json:"driver,omitempty"`
	// Host is the device's netdev as the host had it, restored on release.
	Host *HostNetdev `json:"host,omitempty"`
	// Published is the device as the node published it when the claim
	// was planned: the node publishes it so for as long as the record is
	// held, whatever the host sees of it meanwhile (its netdev in the
	// pod, its function on vfio-pci). Nil for a memif endpoint or a
	// shared device, which stay as they are, and in the records of
	// earlier builds.
	Published *PublishedDevice `json:"published,omitempty"`
	// Pod is the interface in the pod (netdev and afxdp modes).
	Pod   *PodInterface `json:"pod,omitempty"`
	VF    *VF           `json:"vf,omitempty"`
	VFIO  *VFIO         `json:"vfio,omitempty"`
	XDP   *XDP          `json:"xdp,omitempty"`
	Memif *Memif        `json:"memif,omitempty"`
	RDMA  *RDMA         `json:"rdma,omitempty"`
	// CDIDevice is the fully qualified CDI device the containers get.
	CDIDevice string `json:"cdiDevice"`
	// DeviceInfoFile is the NPWG device-info file on the node.
	DeviceInfoFile string `json:"deviceInfoFile,omitempty"`
	// ResourceName is the device's resource name: in mode delegate the
	// one by which a NetworkAttachmentDefinition takes the device for
	// its CNI plugin; in every mode, for a device with a PCI address, the
	// containers' PCIDEVICE_<RESOURCE>.
	ResourceName string `json:"resourceName,omitempty"`
	// PodNetwork is the PodNetwork (KEP-3698) the device's interface is the
	// pod's attachment to; PodNetworkAttachment the object of the claim's
	// namespace it was named through, if any.
	PodNetwork           string `json:"podNetwork,omitempty"`
	PodNetworkAttachment string `json:"podNetworkAttachment,omitempty"`
	// Offloads are set on the device's netdev in the host at Prepare;
	// nil for none.
	Offloads *Offloads `json:"offloads,omitempty"`
	// Attached is where the runtime's hook put the device's netdev (or
	// made its sub-interface); recorded before the move, dropped once the
	// netdev is back (the sub-interface deleted).
	Attached *Attachment `json:"attached,omitempty"`
	// Shared is the sub-interface the pod gets of a device it shares with
	// other claims (modes macvlan, ipvlan, vlan). Host is then nil: the
	// device stays in the host as it is.
	Shared *SharedInterface `json:"shared,omitempty"`
	// IPAM is the address the claim holds from a pool of the node, from
	// its admission to its release; it is in Pod.Addresses too.
	IPAM *IPAMLease `json:"ipam,omitempty"`
}

// SharedInterface is a sub-interface made in the pod on a shared device.
type SharedInterface struct {
	// Parent is the device's netdev in the host.
	Parent string `json:"parent"`
	// Kind is macvlan, ipvlan or vlan; Mode the macvlan or ipvlan mode.
	Kind      string `json:"kind"`
	Mode      string `json:"mode,omitempty"`
	VLANID    int    `json:"vlanID,omitempty"`
	VLANProto string `json:"vlanProto,omitempty"`
	// ShareID is the allocation's share of the device.
	ShareID string `json:"shareID,omitempty"`
	// MaxTxRate is the bandwidth share the allocation took, in bits per
	// second: the sub-interface's transmit rate limit; 0 for none.
	MaxTxRate int64 `json:"maxTxRate,omitempty"`
}

// IPAMLease is an address of a node pool held by a claim.
type IPAMLease struct {
	Pool string `json:"pool"`
	// Address in CIDR form (the pool's prefix length).
	Address string `json:"address"`
}

// Attachment is a pod sandbox a netdev was moved into.
type Attachment struct {
	SandboxID string `json:"sandboxID"`
	NetNS     string `json:"netns"`
	// HostUp is the netdev's admin state in the host before the move,
	// given back with it.
	HostUp bool `json:"hostUp,omitempty"`
}

// PublishedDevice is a device's entry in the node's ResourceSlice.
type PublishedDevice struct {
	// Attributes by qualified name (fastpath.dev's own unqualified).
	Attributes map[string]Attribute `json:"attributes"`
}

// Attribute is one attribute of a published device: one value is set.
type Attribute struct {
	String  *string `json:"string,omitempty"`
	Int     *int64  `json:"int,omitempty"`
	Bool    *bool   `json:"bool,omitempty"`
	Version *string `json:"version,omitempty"`
}

// HostNetdev is a netdev as the host had it before Prepare.
type HostNetdev struct {
	Name  string `json:"name"`
	MTU   int    `json:"mtu,omitempty"`
	MAC   string `json:"mac,omitempty"`
	Alias string `json:"alias,omitempty"`
}

// PodInterface is the kernel interface a pod gets.
type PodInterface struct {
	Name      string   `json:"name"`
	MTU       int      `json:"mtu,omitempty"`
	MAC       string   `json:"mac,omitempty"`
	Addresses []string `json:"addresses,omitempty"`
	Routes    []Route  `json:"routes,omitempty"`
	// Rules, the VRF, neighbours and sysctls are made in the pod's
	// namespace with the interface, and the rules and the VRF removed from
	// it when the interface leaves (the rest leaves with the interface).
	Rules     []Rule            `json:"rules,omitempty"`
	VRF       *VRF              `json:"vrf,omitempty"`
	Neighbors []Neighbor        `json:"neighbors,omitempty"`
	Sysctls   map[string]string `json:"sysctls,omitempty"`
}

// Route is a route through a pod's interface.
type Route struct {
	Destination string `json:"destination"`
	Gateway     string `json:"gateway,omitempty"`
	Table       int64  `json:"table,omitempty"`
	Source      string `json:"source,omitempty"`
	Scope       string `json:"scope,omitempty"`
	Metric      int64  `json:"metric,omitempty"`
}

// Rule is a policy-routing rule in the pod's namespace.
type Rule struct {
	Priority int     `json:"priority,omitempty"`
	From     string  `json:"from,omitempty"`
	To       string  `json:"to,omitempty"`
	IIF      string  `json:"iif,omitempty"`
	OIF      string  `json:"oif,omitempty"`
	FWMark   *uint32 `json:"fwmark,omitempty"`
	FWMask   *uint32 `json:"fwmask,omitempty"`
	Table    int64   `json:"table"`
}

// VRF is a VRF device the pod's interface is enslaved to.
type VRF struct {
	Name  string `json:"name"`
	Table int64  `json:"table"`
}

// Neighbor is a static neighbour entry on the pod's interface.
type Neighbor struct {
	Address string `json:"address"`
	MAC     string `json:"mac"`
}

// Offloads are ethtool features, private flags and GSO/GRO maximum sizes
// Prepare sets on the device in the host (step "offloads"): they stay
// with it in the pod. Before is what the device had of each, read before
// (observe), restored by Unprepare.
type Offloads struct {
	Set    OffloadSettings  `json:"set"`
	Before *OffloadSettings `json:"before,omitempty"`
}

// OffloadSettings are a device's ethtool features and private flags (by
// name) and GSO/GRO maximum sizes (0: not set).
type OffloadSettings struct {
	Features       map[string]bool `json:"features,omitempty"`
	PrivateFlags   map[string]bool `json:"privateFlags,omitempty"`
	GSOMaxSize     int             `json:"gsoMaxSize,omitempty"`
	GROMaxSize     int             `json:"groMaxSize,omitempty"`
	GSOIPv4MaxSize int             `json:"gsoIPv4MaxSize,omitempty"`
	GROIPv4MaxSize int             `json:"groIPv4MaxSize,omitempty"`
}

// VF is an SR-IOV VF's settings made through its PF, and its state before.
type VF struct {
	PFName string     `json:"pfName"`
	ID     int        `json:"id"`
	Set    VFSettings `json:"set"`
	// Before is read from the PF once, before the first setting.
	Before *VFState `json:"before,omitempty"`
}

// VFSettings are the settings made; nil and "" are left alone.
type VFSettings struct {
	VLAN      *int   `json:"vlan,omitempty"`
	QoS       *int   `json:"qos,omitempty"`
	VLANProto string `json:"vlanProto,omitempty"`
	MAC       string `json:"mac,omitempty"`
	SpoofChk  *bool  `json:"spoofChk,omitempty"`
	Trust     *bool  `json:"trust,omitempty"`
	MinTxRate *int   `json:"minTxRateMbps,omitempty"`
	MaxTxRate *int   `json:"maxTxRateMbps,omitempty"`
	LinkState string `json:"linkState,omitempty"`
}

// VFState is what the PF reported of a VF.
type VFState struct {
	VLAN      int    `json:"vlan"`
	QoS       int    `json:"qos"`
	VLANProto string `json:"vlanProto"`
	MAC       string `json:"mac"`
	SpoofChk  bool   `json:"spoofChk"`
	Trust     bool   `json:"trust"`
	MinTxRate int    `json:"minTxRateMbps"`
	MaxTxRate int    `json:"maxTxRateMbps"`
	LinkState string `json:"linkState"`
}

// VFIO is a PCI function handed over on vfio-pci.
type VFIO struct {
	IOMMUGroup int `json:"iommuGroup"`
	// DriverBefore is the driver the function had, given back on release.
	DriverBefore string       `json:"driverBefore"`
	DeviceNodes  []DeviceNode `json:"deviceNodes"`
}

// RDMA is the RDMA device on top of a device's netdev, given to the pod.
type RDMA struct {
	// Device is its name (mlx5_0, rxe0).
	Device string `json:"device"`
	// Link is the link type of a software RDMA device (rxe, siw), which
	// the kernel removes when its netdev changes network namespace:
	// fastpath makes it again on the netdev in the pod, and on the host's
	// at release. "" for a hardware one.
	Link string `json:"link,omitempty"`
	// Exclusive: the node's RDMA subsystem was in exclusive network
	// namespace mode at Prepare, so the device goes into the pod's
	// namespace with its netdev (mode netdev).
	Exclusive bool `json:"exclusive,omitempty"`
	// UMAD: the config asked for the management datagram files.
	UMAD bool `json:"umad,omitempty"`
	// DeviceNodes are its character devices, as the containers get them.
	DeviceNodes []DeviceNode `json:"deviceNodes"`
}

// DeviceNode is a device node given to the containers.
type DeviceNode struct {
	Path     string `json:"path"`     // in the container
	HostPath string `json:"hostPath"` // on the node
}

// XDP is an afxdp device's program, pinned at Prepare and attached in the
// pod, and the channels set for it.
type XDP struct {
	Program    string `json:"program"`
	AttachMode string `json:"attachMode"`
	Fallback   bool   `json:"fallbackToGeneric,omitempty"`
	Queues     int    `json:"queues"`
	ZeroCopy   string `json:"zeroCopy"`
	// PinDir holds the program, its maps and its attachment, on a bpffs.
	PinDir string `json:"pinDir"`
	// ChannelsBefore is the combined channel count before Prepare set it
	// to Queues; 0 when unchanged.
	ChannelsBefore int `json:"channelsBefore,omitempty"`
}

// Memif is a memif endpoint handed to the pod.
type Memif struct {
	Role string `json:"role"`
	Mode string `json:"mode"`
	// Socket is the endpoint's socket on the node (the pod connects), or
	// where the vswitch finds the pod's socket (the pod serves); "" for
	// none.
	Socket string `json:"socket,omitempty"`
	// Dir is the claim's directory for the device, mounted into the pod;
	// Link the link Prepare made to the pod's socket.
	Dir  string `json:"dir"`
	Link string `json:"link,omitempty"`
	UID  int64  `json:"uid,omitempty"`
	GID  int64  `json:"gid,omitempty"`
}

// Network is one network of a CNI claim, or one attachment of a pod's
// NPWG record (Request is then the network, namespace/name, and Device
// the interface name).
type Network struct {
	Request  string          `json:"request"`
	Pool     string          `json:"pool"`
	Device   string          `json:"device"`
	IfName   string          `json:"ifName"`
	Conflist json.RawMessage `json:"conflist"`
	// Redact are the values the config read from ConfigMaps: never shown
	// in the claim's status or in errors.
	Redact []string `json:"redact,omitempty"`
	// Added: ADD may have run and DEL has not succeeded since; recorded
	// before ADD runs. SandboxID and NetNS are what DEL needs.
	Added     bool   `json:"added,omitempty"`
	SandboxID string `json:"sandboxID,omitempty"`
	NetNS     string `json:"netns,omitempty"`
	// ShareID is the allocation's share of a device allocated many times
	// (a node's one shared CNI device).
	ShareID string `json:"shareID,omitempty"`
	// CapabilityArgs are the runtimeConfig values libcni gives the
	// plugins that declare their capability (NPWG attachments).
	CapabilityArgs map[string]any `json:"capabilityArgs,omitempty"`
	// DefaultRoute: the NPWG element asked for the pod's default route
	// ("default-route"), through Gateways when it names them.
	DefaultRoute bool     `json:"defaultRoute,omitempty"`
	Gateways     []string `json:"gateways,omitempty"`
	// IPAMClaim is the IPAMClaim, in the pod's namespace, that keeps the
	// attachment's addresses (the NPWG element's "ipam-claim-reference").
	IPAMClaim string `json:"ipamClaim,omitempty"`
	// Delegated is the device of the pod's claim (mode delegate) the
	// plugins were given, for a NetworkAttachmentDefinition with a
	// resource name.
	Delegated *Delegated `json:"delegated,omitempty"`
	// PodNetwork is the PodNetwork (KEP-3698) the attachment is to, for
	// the networks a pod names with network.fastpath.dev/networks.
	PodNetwork string `json:"podNetwork,omitempty"`
}

// Delegated is a device of a fastpath.dev claim in mode delegate, as an
// NPWG attachment's plugins were given it.
type Delegated struct {
	Claim        types.UID `json:"claim"`
	Request      string    `json:"request"`
	Device       string    `json:"device"`
	ResourceName string    `json:"resourceName"`
	PCIAddress   string    `json:"pciAddress,omitempty"`
	PFPCIAddress string    `json:"pfPciAddress,omitempty"`
	Netdev       string    `json:"netdev,omitempty"`
}

// InterfaceNames are the interface names the claim gives its pod.
func (c *Claim) InterfaceNames() []string {
	var out []string
	for _, d := range c.Devices {
		if d.Pod != nil {
			out = append(out, d.Pod.Name)
		}
	}
	for _, n := range c.Networks {
		out = append(out, n.IfName)
	}
	return out
}

// HeldAddresses are the addresses the claims hold (AddressHolders).
func HeldAddresses(cls []*Claim) map[netip.Addr]bool {
	held := map[netip.Addr]bool{}
	for a := range AddressHolders(cls) {
		held[a] = true
	}
	return held
}

// AddressHolders are the addresses the claims hold, each with the claim
// (or IPAMClaim) holding it: those leased from node pools, and every
// address a device gives its pod's interface, the static ones too. An
// address is given to one holder at a time: no pool leases a held
// address, and Prepare refuses a static address of a pool's subnet that
// another claim holds. The records are the leases: an address is free
// again when its record is forgotten.
func AddressHolders(cls []*Claim) map[netip.Addr]*Claim {
	held := map[netip.Addr]*Claim{}
	hold := func(c *Claim, addr string) {
		if p, err := netip.ParsePrefix(addr); err == nil {
			if _, ok := held[p.Addr()]; !ok {
				held[p.Addr()] = c
			}
		}
	}
	for _, c := range cls {
		for _, d := range c.Devices {
			if d.IPAM != nil {
				hold(c, d.IPAM.Address)
			}
			if d.Pod != nil {
				for _, a := range d.Pod.Addresses {
					hold(c, a)
				}
			}
		}
	}
	return held
}
