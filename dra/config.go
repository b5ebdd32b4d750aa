package dra

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"

	"github.com/fastpath-dra/fastpath/bpf"
	"github.com/fastpath-dra/fastpath/devices"
)

// The config API: opaque parameters of DeviceClasses and claims for driver
// fastpath.dev.
const (
	ConfigAPIVersion = "fastpath.dev/v1alpha1"
	ConfigKind       = "InterfaceConfig"
)

// Modes a device can be handed to a pod in.
const (
	ModeNetdev = "netdev"
	ModeVFIO   = "vfio"
	ModeAFXDP  = "afxdp"
)

// InterfaceConfig configures one device of a claim. DeviceClass configs apply
// first, then the claim's; a field set later wins, lists are replaced whole.
type InterfaceConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Mode is netdev (default), vfio or afxdp. memif devices ignore it.
	Mode      string         `json:"mode,omitempty"`
	Interface *InterfaceSpec `json:"interface,omitempty"`
	VF        *VFConfig      `json:"vf,omitempty"`
	XDP       *XDPConfig     `json:"xdp,omitempty"`
	Memif     *MemifSpec     `json:"memif,omitempty"`
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

// InterfaceSpec is the kernel interface in the pod (netdev and afxdp modes).
type InterfaceSpec struct {
	// Name in the pod; default: the request name.
	Name      string   `json:"name,omitempty"`
	MTU       int      `json:"mtu,omitempty"`
	MAC       string   `json:"mac,omitempty"`
	Addresses []string `json:"addresses,omitempty"`
	Routes    []Route  `json:"routes,omitempty"`
}

// Route is a route through the interface.
type Route struct {
	Destination string `json:"destination"`
	Gateway     string `json:"gateway,omitempty"`
}

// VFConfig is applied to an SR-IOV VF through its PF, and restored on release.
type VFConfig struct {
	VLAN          *int   `json:"vlan,omitempty"`
	QoS           *int   `json:"qos,omitempty"`
	VLANProto     string `json:"vlanProto,omitempty"`
	SpoofChk      *bool  `json:"spoofChk,omitempty"`
	Trust         *bool  `json:"trust,omitempty"`
	MinTxRateMbps *int   `json:"minTxRateMbps,omitempty"`
	MaxTxRateMbps *int   `json:"maxTxRateMbps,omitempty"`
	LinkState     string `json:"linkState,omitempty"`
}

// XDPConfig configures afxdp mode.
type XDPConfig struct {
	// Program is one shipped in bpf/: xsk-redirect (default) or xdp-count.
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

// decodeConfig decodes one opaque config into cfg, over what is already
// there. Decoding is strict: unknown and duplicate fields are errors.
func decodeConfig(raw []byte, cfg *InterfaceConfig, path *field.Path) field.ErrorList {
	return decodeStrict(raw, cfg, path, ConfigAPIVersion, ConfigKind)
}

// decodeStrict decodes an opaque config of apiVersion and kind into v:
// unknown and duplicate fields are errors naming the field.
func decodeStrict(raw []byte, v any, path *field.Path, apiVersion, kind string) field.ErrorList {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &meta); err != nil {
		return field.ErrorList{invalid(path, fmt.Sprintf("not a JSON object: %v", err))}
	}
	if meta.APIVersion != apiVersion || meta.Kind != kind {
		return field.ErrorList{field.Invalid(path.Child("apiVersion"), meta.APIVersion+"/"+meta.Kind,
			fmt.Sprintf("want apiVersion %s, kind %s", apiVersion, kind))}
	}
	strict, err := sigsjson.UnmarshalStrict(raw, v, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return field.ErrorList{invalid(path, err.Error())}
	}
	var errs field.ErrorList
	for _, e := range strict {
		// sigs.k8s.io/json says: unknown field "interface.colour".
		msg := e.Error()
		kind, name, ok := strings.Cut(msg, ` field "`)
		if !ok {
			errs = append(errs, invalid(path, msg))
			continue
		}
		name = strings.TrimSuffix(name, `"`)
		parts := strings.Split(name, ".")
		errs = append(errs, field.Forbidden(path.Child(parts[0], parts[1:]...), kind+" field"))
	}
	return errs
}

// invalid is an Invalid error whose value is not repeated in the message.
func invalid(path *field.Path, detail string) *field.Error {
	return &field.Error{Type: field.ErrorTypeInvalid, Field: path.String(), BadValue: field.OmitValueType{}, Detail: detail}
}

// setDefaults fills in what the config leaves unset.
func (c *InterfaceConfig) setDefaults(request string, dev devices.Device) {
	c.APIVersion, c.Kind = ConfigAPIVersion, ConfigKind
	if c.Mode == "" {
		c.Mode = ModeNetdev
	}
	if dev.Kind == devices.KindMemif {
		c.Mode = ""
		return
	}
	if c.Mode == ModeVFIO {
		return
	}
	if c.Interface == nil {
		c.Interface = &InterfaceSpec{}
	}
	if c.Interface.Name == "" {
		c.Interface.Name = request
	}
	if c.Mode == ModeAFXDP {
		if c.XDP == nil {
			c.XDP = &XDPConfig{}
		}
		if c.XDP.Program == "" {
			c.XDP.Program = bpf.XSKRedirect
		}
		if c.XDP.AttachMode == "" {
			c.XDP.AttachMode = "native"
		}
		if c.XDP.Queues == 0 {
			c.XDP.Queues = 1
		}
		if c.XDP.ZeroCopy == "" {
			c.XDP.ZeroCopy = "preferred"
		}
	}
}

// validate checks the defaulted config against the device it is for.
func (c *InterfaceConfig) validate(dev devices.Device) field.ErrorList {
	var errs field.ErrorList
	if dev.Kind == devices.KindMemif {
		if c.Interface != nil || c.VF != nil || c.XDP != nil {
			errs = append(errs, field.Forbidden(field.NewPath("interface"), "a memif device has no kernel interface, VF or XDP settings"))
		}
		if m := c.Memif; m != nil {
			for _, id := range []struct {
				name string
				v    *int64
			}{{"uid", m.UID}, {"gid", m.GID}} {
				if id.v != nil && (*id.v < 0 || *id.v >= 1<<32-1) {
					errs = append(errs, field.Invalid(field.NewPath("memif", id.name), *id.v, "must be between 0 and 4294967294"))
				}
			}
		}
		return errs
	}
	if c.Memif != nil {
		errs = append(errs, field.Forbidden(field.NewPath("memif"), fmt.Sprintf("device %s is not a memif endpoint", dev.Name)))
	}
	mode := field.NewPath("mode")
	switch c.Mode {
	case ModeNetdev:
		if dev.Netdev == nil {
			errs = append(errs, field.Invalid(mode, c.Mode, fmt.Sprintf("device %s has no kernel netdev (driver %s); use mode vfio", dev.Name, pciDriver(dev))))
		}
	case ModeVFIO:
		if dev.PCI == nil || !dev.PCI.VFIOCapable() {
			errs = append(errs, field.Invalid(mode, c.Mode, fmt.Sprintf("device %s has no IOMMU group: it cannot be bound to vfio-pci", dev.Name)))
		}
		if dev.PF != nil && dev.PF.NumVFs > 0 {
			errs = append(errs, field.Invalid(mode, c.Mode, fmt.Sprintf("device %s is a PF with %d VFs: binding it to vfio-pci would take them away", dev.Name, dev.PF.NumVFs)))
		}
		if c.Interface != nil {
			errs = append(errs, field.Forbidden(field.NewPath("interface"), "mode vfio hands over no kernel interface"))
		}
	case ModeAFXDP:
		if dev.Netdev == nil || dev.Netdev.XDP.Supported == nil || !*dev.Netdev.XDP.Supported {
			errs = append(errs, field.Invalid(mode, c.Mode, fmt.Sprintf("device %s does not support XDP redirect (attribute xdp)", dev.Name)))
		}
	default:
		return append(errs, field.NotSupported(mode, c.Mode, []string{ModeNetdev, ModeVFIO, ModeAFXDP}))
	}
	if c.XDP != nil && c.Mode != ModeAFXDP {
		errs = append(errs, field.Forbidden(field.NewPath("xdp"), "only for mode afxdp"))
	}
	if c.Interface != nil {
		errs = append(errs, c.Interface.validate(field.NewPath("interface"), dev)...)
	}
	if c.VF != nil {
		if dev.VF == nil {
			errs = append(errs, field.Forbidden(field.NewPath("vf"), fmt.Sprintf("device %s is not an SR-IOV VF", dev.Name)))
		} else {
			errs = append(errs, c.VF.validate(field.NewPath("vf"))...)
		}
	}
	if c.XDP != nil && c.Mode == ModeAFXDP {
		errs = append(errs, c.XDP.validate(field.NewPath("xdp"), dev)...)
	}
	return errs
}

func pciDriver(dev devices.Device) string {
	if dev.PCI != nil && dev.PCI.Driver != "" {
		return dev.PCI.Driver
	}
	return "none"
}

// ValidInterfaceName reports why name cannot be a Linux interface name.
func ValidInterfaceName(name string) error {
	switch {
	case name == "":
		return errors.New("must not be empty")
	case len(name) > 15:
		return errors.New("must be at most 15 characters")
	case name == "." || name == "..":
		return errors.New(`must not be "." or ".."`)
	case strings.ContainsAny(name, "/: \t\n\r\v\f"):
		return errors.New("must not contain '/', ':' or whitespace")
	}
	return nil
}

func (s *InterfaceSpec) validate(path *field.Path, dev devices.Device) field.ErrorList {
	var errs field.ErrorList
	if err := ValidInterfaceName(s.Name); err != nil {
		errs = append(errs, field.Invalid(path.Child("name"), s.Name, err.Error()))
	}
	if s.MTU != 0 {
		lo, hi := 68, 65535
		if dev.Netdev != nil && dev.Netdev.MinMTU > 0 {
			lo = dev.Netdev.MinMTU
		}
		if dev.Netdev != nil && dev.Netdev.MaxMTU > 0 {
			hi = dev.Netdev.MaxMTU
		}
		if s.MTU < lo || s.MTU > hi {
			errs = append(errs, field.Invalid(path.Child("mtu"), s.MTU, fmt.Sprintf("must be between %d and %d for device %s", lo, hi, dev.Name)))
		}
	}
	if s.MAC != "" {
		if msg := validUnicastMAC(s.MAC); msg != "" {
			errs = append(errs, field.Invalid(path.Child("mac"), s.MAC, msg))
		}
	}
	seen := map[string]bool{}
	for i, a := range s.Addresses {
		p := path.Child("addresses").Index(i)
		prefix, err := netip.ParsePrefix(a)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(p, a, "must be an address in CIDR form, like 10.10.1.2/24"))
		case prefix.String() != a:
			errs = append(errs, field.Invalid(p, a, fmt.Sprintf("must be canonical: %s", prefix)))
		case prefix.Addr().Is4In6():
			errs = append(errs, field.Invalid(p, a, "must not be an IPv4-mapped IPv6 address"))
		case seen[a]:
			errs = append(errs, field.Duplicate(p, a))
		}
		seen[a] = true
	}
	for i, r := range s.Routes {
		p := path.Child("routes").Index(i)
		dst, err := netip.ParsePrefix(r.Destination)
		if err != nil {
			errs = append(errs, field.Invalid(p.Child("destination"), r.Destination, "must be a CIDR, like 10.20.0.0/16"))
			continue
		}
		if r.Gateway != "" {
			gw, err := netip.ParseAddr(r.Gateway)
			switch {
			case err != nil:
				errs = append(errs, field.Invalid(p.Child("gateway"), r.Gateway, "must be an IP address"))
			case gw.Is4() != dst.Addr().Is4():
				errs = append(errs, field.Invalid(p.Child("gateway"), r.Gateway, "must be of the destination's address family"))
			}
		}
	}
	return errs
}

func validUnicastMAC(s string) string {
	hw, err := net.ParseMAC(s)
	switch {
	case err != nil:
		return "must be a MAC address, like 02:00:00:00:00:01"
	case len(hw) != 6:
		return "must be a 6-byte Ethernet MAC address"
	case hw[0]&1 != 0:
		return "must be a unicast address (the lowest bit of the first byte clear)"
	case hw.String() == "00:00:00:00:00:00":
		return "must not be all zeros"
	}
	return ""
}

func (v *VFConfig) validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if v.VLAN != nil && (*v.VLAN < 0 || *v.VLAN > 4094) {
		errs = append(errs, field.Invalid(path.Child("vlan"), *v.VLAN, "must be between 0 and 4094"))
	}
	if v.QoS != nil && (*v.QoS < 0 || *v.QoS > 7) {
		errs = append(errs, field.Invalid(path.Child("qos"), *v.QoS, "must be between 0 and 7"))
	}
	if v.VLANProto != "" && v.VLANProto != "802.1q" && v.VLANProto != "802.1ad" {
		errs = append(errs, field.NotSupported(path.Child("vlanProto"), v.VLANProto, []string{"802.1q", "802.1ad"}))
	}
	if v.LinkState != "" && v.LinkState != "auto" && v.LinkState != "enable" && v.LinkState != "disable" {
		errs = append(errs, field.NotSupported(path.Child("linkState"), v.LinkState, []string{"auto", "enable", "disable"}))
	}
	if v.MinTxRateMbps != nil && *v.MinTxRateMbps < 0 {
		errs = append(errs, field.Invalid(path.Child("minTxRateMbps"), *v.MinTxRateMbps, "must not be negative"))
	}
	if v.MaxTxRateMbps != nil && *v.MaxTxRateMbps < 0 {
		errs = append(errs, field.Invalid(path.Child("maxTxRateMbps"), *v.MaxTxRateMbps, "must not be negative"))
	}
	if v.MinTxRateMbps != nil && v.MaxTxRateMbps != nil && *v.MaxTxRateMbps > 0 && *v.MinTxRateMbps > *v.MaxTxRateMbps {
		errs = append(errs, field.Invalid(path.Child("minTxRateMbps"), *v.MinTxRateMbps, "must not exceed maxTxRateMbps"))
	}
	if v.VLAN == nil && v.QoS != nil && *v.QoS != 0 {
		errs = append(errs, field.Invalid(path.Child("qos"), *v.QoS, "needs a vlan"))
	}
	return errs
}

func (x *XDPConfig) validate(path *field.Path, dev devices.Device) field.ErrorList {
	var errs field.ErrorList
	if !bpf.Known(x.Program) {
		errs = append(errs, field.NotSupported(path.Child("program"), x.Program, bpf.Programs))
	}
	if x.AttachMode != "native" && x.AttachMode != "generic" {
		errs = append(errs, field.NotSupported(path.Child("attachMode"), x.AttachMode, []string{"native", "generic"}))
	}
	if x.Queues < 1 {
		errs = append(errs, field.Invalid(path.Child("queues"), x.Queues, "must be at least 1"))
	} else if dev.Netdev != nil && dev.Netdev.MaxCombinedChannels > 0 && x.Queues > dev.Netdev.MaxCombinedChannels {
		errs = append(errs, field.Invalid(path.Child("queues"), x.Queues, fmt.Sprintf("device %s has at most %d combined channels", dev.Name, dev.Netdev.MaxCombinedChannels)))
	}
	switch x.ZeroCopy {
	case "preferred", "off":
	case "required":
		if dev.Netdev == nil || dev.Netdev.XDP.ZeroCopy == nil || !*dev.Netdev.XDP.ZeroCopy {
			errs = append(errs, field.Invalid(path.Child("zeroCopy"), x.ZeroCopy, fmt.Sprintf("device %s does not support AF_XDP zero-copy (attribute xdpZeroCopy)", dev.Name)))
		}
	default:
		errs = append(errs, field.NotSupported(path.Child("zeroCopy"), x.ZeroCopy, []string{"preferred", "required", "off"}))
	}
	return errs
}
