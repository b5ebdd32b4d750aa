package devices

import (
	"fmt"
	"regexp"
	"strings"
)

// Kind says what a device is and so how it can be handed to a pod.
type Kind string

const (
	// KindSRIOVVF is an SR-IOV virtual function.
	KindSRIOVVF Kind = "sriov-vf"
	// KindNIC is a PCI network function that is not a VF: a PF or a plain NIC.
	KindNIC Kind = "nic"
	// KindNetdev is a virtual netdev (veth, macvlan, ...). Published only
	// when the operator's filter admits it.
	KindNetdev Kind = "netdev"
	// KindMemif is a memif endpoint: a socket, not a kernel device.
	KindMemif Kind = "memif"
)

// Device is one device the node can hand out.
type Device struct {
	// Name is stable and a DNS label: pci-0000-3b-02-1, netdev-veth1, memif-fw0.
	Name string `json:"name"`
	Kind Kind   `json:"kind"`

	PCI    *PCI    `json:"pci,omitempty"`
	PF     *PF     `json:"pf,omitempty"`
	VF     *VF     `json:"vf,omitempty"`
	Netdev *Netdev `json:"netdev,omitempty"`
	Memif  *Memif  `json:"memif,omitempty"`
	// Health is what discovery saw wrong with the device.
	Health Health `json:"health,omitzero"`
	// Share is set on a device pods share through sub-interfaces: it is
	// published for many allocations and never moved whole.
	Share *Share `json:"share,omitempty"`
	// ResourceName is the name NetworkAttachmentDefinitions ask for the
	// device by (Options.ResourceNames); "" for a memif endpoint.
	ResourceName string `json:"resourceName,omitempty"`
}

// Share is how a shared device is shared.
type Share struct {
	// Interfaces is how many sub-interfaces it gives (capacity
	// "interfaces"; each claim takes one).
	Interfaces int `json:"interfaces"`
	// BandwidthMbps is the bandwidth claims may take shares of (capacity
	// "bandwidth"); 0: not published.
	BandwidthMbps int `json:"bandwidthMbps,omitempty"`
}

// PCI describes a PCI function.
type PCI struct {
	Address string `json:"address"` // 0000:3b:02.1
	// IDs as four lowercase hex digits, without 0x.
	Vendor          string `json:"vendor"`
	Device          string `json:"device"`
	SubsystemVendor string `json:"subsystemVendor,omitempty"`
	SubsystemDevice string `json:"subsystemDevice,omitempty"`
	VendorName      string `json:"vendorName,omitempty"`
	DeviceName      string `json:"deviceName,omitempty"`
	// Driver is the bound kernel driver, empty when none is bound.
	Driver string `json:"driver,omitempty"`
	// NUMANode is -1 when the platform does not say.
	NUMANode int `json:"numaNode"`
	// IOMMUGroup is nil without an IOMMU.
	IOMMUGroup *int `json:"iommuGroup,omitempty"`
	// PCIeRoot is the root complex the function hangs off, e.g. pci0000:3a.
	PCIeRoot string `json:"pcieRoot,omitempty"`
}

// VFIOCapable reports whether the function can be bound to vfio-pci: it has
// an IOMMU group.
func (p *PCI) VFIOCapable() bool { return p != nil && p.IOMMUGroup != nil }

// PF is the SR-IOV side of a physical function.
type PF struct {
	TotalVFs int `json:"totalVFs"`
	NumVFs   int `json:"numVFs"`
}

// VF is the SR-IOV side of a virtual function.
type VF struct {
	ID           int    `json:"id"`
	PFPCIAddress string `json:"pfPciAddress"`
	// PFName is the PF's netdev, empty when the PF has none.
	PFName string `json:"pfName,omitempty"`
}

// Netdev is the kernel network interface of a device, as seen in the host
// network namespace.
type Netdev struct {
	Name      string `json:"name"`
	MAC       string `json:"mac,omitempty"`
	MTU       int    `json:"mtu"`
	MinMTU    int    `json:"minMTU,omitempty"`
	MaxMTU    int    `json:"maxMTU,omitempty"`
	OperState string `json:"operState,omitempty"`
	Alias     string `json:"alias,omitempty"`
	// LinkType is the netlink kind of a virtual netdev (veth, macvlan, ...).
	LinkType  string `json:"linkType,omitempty"`
	SpeedMbps int    `json:"speedMbps,omitempty"`
	// From ethtool, on a live host.
	Driver              string `json:"driver,omitempty"`
	Firmware            string `json:"firmware,omitempty"`
	CombinedChannels    int    `json:"combinedChannels,omitempty"`
	MaxCombinedChannels int    `json:"maxCombinedChannels,omitempty"`
	XDP                 XDP    `json:"xdp"`
	// RDMADevice is the RDMA device on top of the netdev (mlx5_0, rxe0).
	RDMADevice string `json:"rdmaDevice,omitempty"`
	// RDMANetnsMode is the node's RDMA network namespace mode (shared or
	// exclusive) for a netdev with an RDMA device; "" when unknown.
	RDMANetnsMode string `json:"rdmaNetnsMode,omitempty"`
}

// XDP is what the kernel says a netdev supports. A nil field is unknown: the
// kernel (or a fixture tree) did not say, and fastpath does not guess.
type XDP struct {
	// Supported: native XDP with redirect, which AF_XDP needs.
	Supported *bool `json:"supported,omitempty"`
	// ZeroCopy: AF_XDP zero-copy (NETDEV_XDP_ACT_XSK_ZEROCOPY).
	ZeroCopy *bool `json:"zeroCopy,omitempty"`
}

// Memif roles (master: the pod serves the socket; slave: it connects) and
// modes, the values of the config API's (v1alpha1.MemifEndpoint).
const (
	MemifRoleMaster   = "master"
	MemifRoleSlave    = "slave"
	MemifModeEthernet = "ethernet"
	MemifModeIP       = "ip"
	MemifModePunt     = "punt"
)

// Memif is a memif endpoint.
type Memif struct {
	Role       string `json:"role"`
	Mode       string `json:"mode"`
	SocketPath string `json:"socketPath"`
	// Source says where the endpoint was found: "dir" or "config".
	Source string `json:"source"`
	// Healthy: the endpoint answered a memif HELLO when last probed (a
	// master endpoint, which the pod serves, is always healthy); Problem
	// says why not.
	Healthy bool   `json:"healthy"`
	Problem string `json:"problem,omitempty"`
}

// PCIDeviceName is the device name of a PCI function: 0000:3b:02.1 ->
// pci-0000-3b-02-1.
func PCIDeviceName(address string) string {
	return "pci-" + strings.NewReplacer(":", "-", ".", "-").Replace(strings.ToLower(address))
}

// NetdevDeviceName is the device name of a virtual netdev.
func NetdevDeviceName(ifName string) string { return "netdev-" + dnsLabelPart(ifName) }

// MemifDeviceName is the device name of a memif endpoint.
func MemifDeviceName(name string) string { return "memif-" + dnsLabelPart(name) }

var nonLabel = regexp.MustCompile(`[^a-z0-9-]+`)

// dnsLabelPart lowercases s and replaces what a DNS label cannot hold with
// '-'. Interface names are at most 15 bytes, so the result always fits.
func dnsLabelPart(s string) string {
	s = nonLabel.ReplaceAllString(strings.ToLower(s), "-")
	s = strings.Trim(s, "-")
	if s == "" {
		s = "x"
	}
	if len(s) > 50 {
		s = strings.TrimRight(s[:50], "-")
	}
	return s
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// validName reports whether name is a DNS label (RFC 1123), as DRA requires.
func validName(name string) error {
	if len(name) > 63 || !dnsLabel.MatchString(name) {
		return fmt.Errorf("device name %q is not a DNS label", name)
	}
	return nil
}
