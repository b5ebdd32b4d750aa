package v1alpha1

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Reserved interface names a config may not take in a pod: the loopback
// and the primary network's interface.
var reservedInterfaceNames = []string{"lo", "eth0"}

// ValidInterfaceName says why name cannot be the name of an interface
// fastpath puts into a pod, or nil.
func ValidInterfaceName(name string) error {
	switch {
	case name == "":
		return errors.New("must not be empty")
	case len(name) > 15:
		return errors.New("must be at most 15 characters")
	case name == "." || name == "..":
		return errors.New(`must not be "." or ".."`)
	case slices.Contains(reservedInterfaceNames, name):
		return fmt.Errorf("%s is reserved (the loopback, or the pod's primary network)", name)
	}
	for _, r := range name {
		switch {
		case r <= ' ' || r > '~':
			return errors.New("must be printable ASCII, without spaces")
		case r == '/' || r == ':':
			return errors.New("must not contain '/' or ':'")
		}
	}
	return nil
}

// Validate checks what can be checked of a defaulted config without the
// device it is for. Package dra checks the rest against the device (MTU
// range, whether the mode is possible, channels, zero-copy).
func (c *InterfaceConfig) Validate() field.ErrorList {
	var errs field.ErrorList
	if c.APIVersion != GroupVersion || c.Kind != KindInterfaceConfig {
		errs = append(errs, field.Invalid(field.NewPath("apiVersion"), c.APIVersion+"/"+c.Kind, fmt.Sprintf("want apiVersion %s, kind %s", GroupVersion, KindInterfaceConfig)))
	}
	mode := field.NewPath("mode")
	if c.Mode != "" && !slices.Contains(Modes, c.Mode) {
		return append(errs, field.NotSupported(mode, c.Mode, Modes))
	}
	if c.XDP != nil && c.Mode != ModeAFXDP {
		errs = append(errs, field.Forbidden(field.NewPath("xdp"), "only for mode afxdp"))
	}
	if c.RDMA != nil && !slices.Contains(RDMAModes, c.Mode) {
		errs = append(errs, field.Forbidden(field.NewPath("rdma"), fmt.Sprintf("only for modes %s: mode %s gives the pod no netdev for an RDMA device to go with", strings.Join(RDMAModes, ", "), c.Mode)))
	}
	if c.Interface != nil && c.Mode == ModeVFIO {
		errs = append(errs, field.Forbidden(field.NewPath("interface"), "mode vfio hands over no kernel interface"))
	}
	if c.Mode == ModeDelegate {
		errs = append(errs, c.validateDelegate()...)
	}
	if c.PodNetwork != "" && c.PodNetworkAttachment != "" {
		errs = append(errs, field.Invalid(field.NewPath("podNetworkAttachment"), c.PodNetworkAttachment, "only one of podNetwork and podNetworkAttachment may be set"))
	}
	for _, n := range []struct{ path, value string }{{"podNetwork", c.PodNetwork}, {"podNetworkAttachment", c.PodNetworkAttachment}} {
		if n.value != "" {
			for _, msg := range validation.IsDNS1123Subdomain(n.value) {
				errs = append(errs, field.Invalid(field.NewPath(n.path), n.value, msg))
			}
		}
	}
	if c.ResourceName != "" {
		p := field.NewPath("resourceName")
		if c.Mode != ModeDelegate {
			errs = append(errs, field.Forbidden(p, "only for mode delegate"))
		} else if err := ValidResourceName(c.ResourceName); err != nil {
			errs = append(errs, field.Invalid(p, c.ResourceName, err.Error()))
		}
	}
	errs = append(errs, validatePinned(field.NewPath("pinned"), c.Pinned)...)
	errs = append(errs, validateSharedParent(field.NewPath("sharedParent"), c.SharedParent)...)
	if c.Interface != nil {
		errs = append(errs, c.Interface.Validate(field.NewPath("interface"))...)
	}
	if c.VF != nil {
		errs = append(errs, c.VF.Validate(field.NewPath("vf"))...)
	}
	if c.XDP != nil {
		errs = append(errs, c.XDP.Validate(field.NewPath("xdp"))...)
	}
	if c.Memif != nil {
		errs = append(errs, c.Memif.Validate(field.NewPath("memif"))...)
	}
	errs = append(errs, c.validateShared()...)
	errs = append(errs, c.validateMultiNICMode()...)
	if c.IPAM != nil {
		p := field.NewPath("ipam", "pool")
		switch {
		case c.Mode == ModeVFIO:
			errs = append(errs, field.Forbidden(field.NewPath("ipam"), "mode vfio hands over no kernel interface to address"))
		case c.Mode == ModeDelegate:
			errs = append(errs, field.Forbidden(field.NewPath("ipam"), "mode delegate leaves the addresses to the IPAM of the NetworkAttachmentDefinition's CNI configuration"))
		case c.IPAM.Pool == "":
			errs = append(errs, field.Required(p, "the name of one of the node's IP pools"))
		case len(validation.IsDNS1123Label(c.IPAM.Pool)) > 0:
			errs = append(errs, field.Invalid(p, c.IPAM.Pool, "must be a pool's name: lowercase letters, digits and '-'"))
		}
	}
	return errs
}

// ValidResourceName says why name cannot be a resource name, or nil: as
// a device plugin's, a qualified name with a domain (vendor.com/name).
func ValidResourceName(name string) error {
	domain, rest, ok := strings.Cut(name, "/")
	if !ok || domain == "" || rest == "" {
		return errors.New("must be DOMAIN/NAME, e.g. intel.com/sriov_netdevice")
	}
	if errs := validation.IsQualifiedName(name); len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// validateDelegate checks a config of mode delegate: the CNI plugin of
// the NetworkAttachmentDefinition configures the device, so the config
// may set nothing of it.
func (c *InterfaceConfig) validateDelegate() field.ErrorList {
	var errs field.ErrorList
	why := "mode delegate leaves the device's configuration to the CNI plugin of the NetworkAttachmentDefinition that takes it"
	if c.Interface != nil {
		errs = append(errs, field.Forbidden(field.NewPath("interface"), why))
	}
	if c.VF != nil {
		errs = append(errs, field.Forbidden(field.NewPath("vf"), why+" (sriov-cni sets a VF's vlan, spoofchk, trust and rates)"))
	}
	return errs
}

// validateShared checks the sections of the shared modes: each only with
// its mode, and nothing that would change the device every claim shares.
func (c *InterfaceConfig) validateShared() field.ErrorList {
	var errs field.ErrorList
	for _, s := range []struct {
		name string
		set  bool
	}{{ModeMacvlan, c.Macvlan != nil}, {ModeIPVLAN, c.IPVLAN != nil}, {ModeVLAN, c.VLAN != nil}} {
		if s.set && c.Mode != s.name {
			errs = append(errs, field.Forbidden(field.NewPath(s.name), "only for mode "+s.name))
		}
	}
	if !Shared(c.Mode) {
		return errs
	}
	if c.VF != nil {
		errs = append(errs, field.Forbidden(field.NewPath("vf"), fmt.Sprintf("mode %s shares the device with other claims: its VF settings are the operator's, not a claim's", c.Mode)))
	}
	var mac string
	if c.Interface != nil {
		mac = c.Interface.MAC
	}
	switch c.Mode {
	case ModeMacvlan:
		if c.Macvlan != nil && !slices.Contains(MacvlanModes, c.Macvlan.Mode) {
			errs = append(errs, field.NotSupported(field.NewPath("macvlan", "mode"), c.Macvlan.Mode, MacvlanModes))
		}
		if c.Macvlan != nil && c.Macvlan.Mode == MacvlanPassthru && mac != "" {
			errs = append(errs, field.Forbidden(field.NewPath("interface", "mac"), "a passthru macvlan has its parent's MAC: setting it would change the parent"))
		}
	case ModeIPVLAN:
		if c.IPVLAN != nil && !slices.Contains(IPVLANModes, c.IPVLAN.Mode) {
			errs = append(errs, field.NotSupported(field.NewPath("ipvlan", "mode"), c.IPVLAN.Mode, IPVLANModes))
		}
		if mac != "" {
			errs = append(errs, field.Forbidden(field.NewPath("interface", "mac"), "an ipvlan interface has its parent's MAC"))
		}
	case ModeVLAN:
		p := field.NewPath("vlan")
		switch {
		case c.VLAN == nil:
			errs = append(errs, field.Required(p.Child("id"), "mode vlan needs a VLAN ID"))
		case c.VLAN.ID < 1 || c.VLAN.ID > 4094:
			errs = append(errs, field.Invalid(p.Child("id"), c.VLAN.ID, "must be between 1 and 4094"))
		}
		if c.VLAN != nil && c.VLAN.Protocol != VLANProto8021Q && c.VLAN.Protocol != VLANProto8021AD {
			errs = append(errs, field.NotSupported(p.Child("protocol"), c.VLAN.Protocol, []string{VLANProto8021Q, VLANProto8021AD}))
		}
	}
	return errs
}

// MTU bounds of any Ethernet interface; a device may allow less.
const (
	MinMTU = 68
	MaxMTU = 65535
)

// Validate checks the interface spec.
func (s *InterfaceSpec) Validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if err := ValidInterfaceName(s.Name); err != nil {
		errs = append(errs, field.Invalid(path.Child("name"), s.Name, err.Error()))
	}
	if s.MTU != 0 && (s.MTU < MinMTU || s.MTU > MaxMTU) {
		errs = append(errs, field.Invalid(path.Child("mtu"), s.MTU, fmt.Sprintf("must be between %d and %d", MinMTU, MaxMTU)))
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
	errs = append(errs, s.validateMultiNIC(path)...)
	return append(errs, s.ownGateway(path)...)
}

// ownGateway refuses an address of the interface that is also the gateway
// of one of its routes: a route through the interface's own address goes
// nowhere.
func (s *InterfaceSpec) ownGateway(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, a := range s.Addresses {
		prefix, err := netip.ParsePrefix(a)
		if err != nil {
			continue
		}
		for j, r := range s.Routes {
			if gw, err := netip.ParseAddr(r.Gateway); err == nil && gw == prefix.Addr() {
				errs = append(errs, field.Invalid(path.Child("addresses").Index(i), a, fmt.Sprintf(
					"%s is also the gateway of %s: a route through the interface's own address goes nowhere; "+
						"write the router's address as the gateway, or give the interface another address", gw, path.Child("routes").Index(j))))
				break
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

// Validate checks the VF settings.
func (v *VFConfig) Validate(path *field.Path) field.ErrorList {
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
	for _, r := range []struct {
		name string
		v    *int
	}{{"minTxRateMbps", v.MinTxRateMbps}, {"maxTxRateMbps", v.MaxTxRateMbps}} {
		if r.v != nil && (*r.v < 0 || *r.v > math.MaxUint32) {
			errs = append(errs, field.Invalid(path.Child(r.name), *r.v, fmt.Sprintf("must be between 0 and %d", uint32(math.MaxUint32))))
		}
	}
	if v.MinTxRateMbps != nil && v.MaxTxRateMbps != nil && *v.MaxTxRateMbps > 0 && *v.MinTxRateMbps > *v.MaxTxRateMbps {
		errs = append(errs, field.Invalid(path.Child("minTxRateMbps"), *v.MinTxRateMbps, "must not exceed maxTxRateMbps"))
	}
	if v.VLAN == nil && v.QoS != nil && *v.QoS != 0 {
		errs = append(errs, field.Invalid(path.Child("qos"), *v.QoS, "needs a vlan"))
	}
	return errs
}

// Validate checks the XDP settings.
func (x *XDPConfig) Validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !slices.Contains(XDPPrograms, x.Program) {
		errs = append(errs, field.NotSupported(path.Child("program"), x.Program, XDPPrograms))
	}
	if x.AttachMode != AttachNative && x.AttachMode != AttachGeneric {
		errs = append(errs, field.NotSupported(path.Child("attachMode"), x.AttachMode, []string{AttachNative, AttachGeneric}))
	}
	if x.Queues < 1 {
		errs = append(errs, field.Invalid(path.Child("queues"), x.Queues, "must be at least 1"))
	}
	if x.ZeroCopy != ZeroCopyPrefer && x.ZeroCopy != ZeroCopyRequired && x.ZeroCopy != ZeroCopyOff {
		errs = append(errs, field.NotSupported(path.Child("zeroCopy"), x.ZeroCopy, []string{ZeroCopyPrefer, ZeroCopyRequired, ZeroCopyOff}))
	}
	return errs
}

// Validate checks the memif directory's owner.
func (m *MemifSpec) Validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, id := range []struct {
		name string
		v    *int64
	}{{"uid", m.UID}, {"gid", m.GID}} {
		if id.v != nil && (*id.v < 0 || *id.v >= math.MaxUint32) {
			errs = append(errs, field.Invalid(path.Child(id.name), *id.v, "must be between 0 and 4294967294"))
		}
	}
	return errs
}

// MemifDeviceName is the device name of the memif endpoint name.
func MemifDeviceName(name string) string { return "memif-" + name }

// Validate checks a defaulted memif config: names that make DNS-label
// device names, each once; known roles and modes; absolute socket paths,
// required where the pod connects.
func (c *MemifConfig) Validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c.APIVersion != GroupVersion || c.Kind != KindMemifConfig {
		errs = append(errs, field.Invalid(path.Child("apiVersion"), c.APIVersion+"/"+c.Kind, fmt.Sprintf("want apiVersion %s, kind %s", GroupVersion, KindMemifConfig)))
	}
	seen := map[string]bool{}
	for i, e := range c.Endpoints {
		p := path.Child("endpoints").Index(i)
		switch {
		case e.Name == "":
			errs = append(errs, field.Required(p.Child("name"), ""))
		case len(validation.IsDNS1123Label(MemifDeviceName(e.Name))) > 0:
			errs = append(errs, field.Invalid(p.Child("name"), e.Name, "must be lowercase letters, digits and '-', at most 57 characters"))
		case seen[e.Name]:
			errs = append(errs, field.Duplicate(p.Child("name"), e.Name))
		}
		seen[e.Name] = true
		if e.Role != MemifRoleMaster && e.Role != MemifRoleSlave {
			errs = append(errs, field.NotSupported(p.Child("role"), e.Role, []string{MemifRoleMaster, MemifRoleSlave}))
		}
		if e.Mode != MemifModeEthernet && e.Mode != MemifModeIP && e.Mode != MemifModePunt {
			errs = append(errs, field.NotSupported(p.Child("mode"), e.Mode, []string{MemifModeEthernet, MemifModeIP, MemifModePunt}))
		}
		switch {
		case e.SocketPath == "" && e.Role == MemifRoleSlave:
			errs = append(errs, field.Required(p.Child("socketPath"), "required for role slave"))
		case e.SocketPath != "" && !filepath.IsAbs(e.SocketPath):
			errs = append(errs, field.Invalid(p.Child("socketPath"), e.SocketPath, "must be an absolute path"))
		}
	}
	return errs
}
