package claimspec

import (
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// ResolveConfig merges the opaque configs for fastpath.dev that apply to
// request: the DeviceClass's first, then the claim's, later fields
// winning, but for those the class pins (v1alpha1.Merge). At most
// bounds.Problems problems are kept, the rest counted (bounds.Keep).
func ResolveConfig(claim *resourceapi.ResourceClaim, request string) (v1alpha1.InterfaceConfig, field.ErrorList) {
	merge := v1alpha1.Merge{ClassName: DeviceClassOf(claim, request)}
	var errs field.ErrorList
	all := claim.Status.Allocation.Devices.Config
	order := make([]int, 0, len(all))
	for i := range all {
		order = append(order, i)
	}
	// Class configs first; the claim's win.
	slices.SortStableFunc(order, func(a, b int) int {
		return sourceRank(all[a].Source) - sourceRank(all[b].Source)
	})
	for _, i := range order {
		c := all[i]
		if c.Opaque == nil || c.Opaque.Driver != devices.DriverName || !AppliesTo(c.Requests, request) {
			continue
		}
		path := field.NewPath("config").Index(i).Key(string(c.Source)).Child("parameters")
		if c.Source == resourceapi.AllocationConfigSourceClass {
			errs = append(errs, bounds.Keep(merge.AddClass(c.Opaque.Parameters.Raw, path))...)
		} else {
			errs = append(errs, bounds.Keep(merge.AddClaim(c.Opaque.Parameters.Raw, path))...)
		}
	}
	cfg, pinErrs := merge.Config()
	return cfg, bounds.Keep(append(errs, pinErrs...))
}

// DeviceClassOf is the DeviceClass a request (or subrequest, req/sub) of
// the claim's spec asks for.
func DeviceClassOf(claim *resourceapi.ResourceClaim, request string) string {
	base, sub, hasSub := strings.Cut(request, "/")
	for _, r := range claim.Spec.Devices.Requests {
		switch {
		case r.Name != base:
		case !hasSub && r.Exactly != nil:
			return r.Exactly.DeviceClassName
		case hasSub:
			for _, s := range r.FirstAvailable {
				if s.Name == sub {
					return s.DeviceClassName
				}
			}
		}
	}
	return ""
}

func sourceRank(s resourceapi.AllocationConfigSource) int {
	if s == resourceapi.AllocationConfigSourceClass {
		return 0
	}
	return 1
}

// AppliesTo reports whether a config listing requests covers request (or
// its parent request). No list means every request.
func AppliesTo(requests []string, request string) bool {
	if len(requests) == 0 {
		return true
	}
	return slices.Contains(requests, request) || slices.Contains(requests, RequestBase(request))
}

// ConfigFor defaults and checks a request's config for the device it got:
// the static checks of the API, then what the device allows. ifName is the
// interface's name where the config gives none: the request's
// (RequestBase), as a rule.
func ConfigFor(cfg v1alpha1.InterfaceConfig, ifName string, dev devices.Device) (v1alpha1.InterfaceConfig, field.ErrorList) {
	if dev.Kind == devices.KindMemif {
		cfg.APIVersion, cfg.Kind, cfg.Mode = v1alpha1.GroupVersion, v1alpha1.KindInterfaceConfig, ""
		if cfg.Interface != nil || cfg.VF != nil || cfg.XDP != nil {
			return cfg, field.ErrorList{field.Forbidden(field.NewPath("interface"), "a memif device has no kernel interface, VF or XDP settings")}
		}
		if cfg.RDMA != nil {
			return cfg, field.ErrorList{field.Forbidden(field.NewPath("rdma"), fmt.Sprintf("device %s is a memif endpoint: it has no RDMA device", dev.Name))}
		}
		return cfg, cfg.Validate()
	}
	cfg.Default(ifName)
	errs := cfg.Validate()
	if len(errs) > 0 {
		return cfg, errs
	}
	return cfg, ForDevice(cfg, dev)
}

// ForDevice checks what a valid config asks of the device.
func ForDevice(c v1alpha1.InterfaceConfig, dev devices.Device) field.ErrorList {
	var errs field.ErrorList
	if c.Memif != nil {
		errs = append(errs, field.Forbidden(field.NewPath("memif"), fmt.Sprintf("device %s is not a memif endpoint", dev.Name)))
	}
	if c.RDMA != nil && (dev.Netdev == nil || dev.Netdev.RDMADevice == "") {
		errs = append(errs, field.Forbidden(field.NewPath("rdma"), fmt.Sprintf("device %s has no RDMA device (attribute rdmaDevice)", dev.Name)))
	}
	if shareErrs := ForSharing(c, dev); len(shareErrs) > 0 || v1alpha1.Shared(c.Mode) {
		return append(errs, shareErrs...)
	}
	mode := field.NewPath("mode")
	switch c.Mode {
	case v1alpha1.ModeNetdev:
		if dev.Netdev == nil {
			errs = append(errs, field.Invalid(mode, c.Mode, fmt.Sprintf("device %s has no kernel netdev (driver %s); use mode vfio", dev.Name, PCIDriver(dev))))
		}
	case v1alpha1.ModeVFIO:
		if dev.PCI == nil || !dev.PCI.VFIOCapable() {
			errs = append(errs, field.Invalid(mode, c.Mode, fmt.Sprintf("device %s has no IOMMU group: it cannot be bound to vfio-pci", dev.Name)))
		}
		if dev.PF != nil && dev.PF.NumVFs > 0 {
			errs = append(errs, field.Invalid(mode, c.Mode, fmt.Sprintf("device %s is a PF with %d VFs (sriov_numvfs): binding it to vfio-pci would take them away; claim one of its VFs", dev.Name, dev.PF.NumVFs)))
		}
	case v1alpha1.ModeDelegate:
		if dev.Netdev == nil && dev.PCI == nil {
			errs = append(errs, field.Invalid(mode, c.Mode, fmt.Sprintf("device %s has neither a PCI function nor a netdev for a CNI plugin to take", dev.Name)))
		}
	case v1alpha1.ModeAFXDP:
		if dev.Netdev == nil || dev.Netdev.XDP.Supported == nil || !*dev.Netdev.XDP.Supported {
			errs = append(errs, field.Invalid(mode, c.Mode, fmt.Sprintf("device %s does not support XDP redirect (attribute xdp)", dev.Name)))
		}
	}
	if s := c.Interface; s != nil && s.MTU != 0 && dev.Netdev != nil {
		lo, hi := v1alpha1.MinMTU, v1alpha1.MaxMTU
		if dev.Netdev.MinMTU > 0 {
			lo = dev.Netdev.MinMTU
		}
		if dev.Netdev.MaxMTU > 0 {
			hi = dev.Netdev.MaxMTU
		}
		if s.MTU < lo || s.MTU > hi {
			errs = append(errs, field.Invalid(field.NewPath("interface", "mtu"), s.MTU, fmt.Sprintf("must be between %d and %d for device %s", lo, hi, dev.Name)))
		}
	}
	if c.VF != nil && dev.VF == nil {
		errs = append(errs, field.Forbidden(field.NewPath("vf"), fmt.Sprintf("device %s is not an SR-IOV VF", dev.Name)))
	}
	if x := c.XDP; x != nil && dev.Netdev != nil {
		if most := dev.Netdev.MaxCombinedChannels; most > 0 && x.Queues > most {
			errs = append(errs, field.Invalid(field.NewPath("xdp", "queues"), x.Queues, fmt.Sprintf("device %s has at most %d combined channels", dev.Name, most)))
		}
		if x.ZeroCopy == v1alpha1.ZeroCopyRequired && (dev.Netdev.XDP.ZeroCopy == nil || !*dev.Netdev.XDP.ZeroCopy) {
			errs = append(errs, field.Invalid(field.NewPath("xdp", "zeroCopy"), x.ZeroCopy, fmt.Sprintf("device %s does not support AF_XDP zero-copy (attribute xdpZeroCopy)", dev.Name)))
		}
	}
	return errs
}

func PCIDriver(dev devices.Device) string {
	if dev.PCI != nil && dev.PCI.Driver != "" {
		return dev.PCI.Driver
	}
	return "none"
}

// ForSharing checks a valid config's mode against whether the device is
// shared: a shared device only gives sub-interfaces and is never moved
// whole; a device of its own gives none. A sub-interface's MTU is at most
// its parent's.
func ForSharing(c v1alpha1.InterfaceConfig, dev devices.Device) field.ErrorList {
	mode := field.NewPath("mode")
	shared := v1alpha1.Shared(c.Mode)
	switch {
	case shared && (dev.Share == nil || dev.Netdev == nil):
		return field.ErrorList{field.Invalid(mode, c.Mode, fmt.Sprintf("device %s is not shared: the operator shares devices with --share (attribute shareable)", dev.Name))}
	case !shared && dev.Share != nil:
		return field.ErrorList{field.Invalid(mode, c.Mode, fmt.Sprintf("device %s is shared with other claims and never handed over whole: use mode macvlan, ipvlan or vlan", dev.Name))}
	case !shared:
		return nil
	}
	if s := c.Interface; s != nil && s.MTU != 0 && dev.Netdev.MTU > 0 && s.MTU > dev.Netdev.MTU {
		return field.ErrorList{field.Invalid(field.NewPath("interface", "mtu"), s.MTU, fmt.Sprintf("must not exceed the MTU %d of device %s, the parent", dev.Netdev.MTU, dev.Name))}
	}
	return nil
}
