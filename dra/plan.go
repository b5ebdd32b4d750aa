package dra

import (
	"cmp"
	"fmt"
	"path/filepath"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// ClaimError is a claim fastpath cannot prepare as asked. It names the
// claim, and the request, device and fields where they are known.
type ClaimError struct {
	Claim   string // namespace/name
	Request string
	Device  string
	Errs    field.ErrorList
	Reason  string
}

func (e *ClaimError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "claim %s", e.Claim)
	if e.Request != "" {
		fmt.Fprintf(&b, ", request %q", e.Request)
	}
	if e.Device != "" {
		fmt.Fprintf(&b, ", device %s", e.Device)
	}
	b.WriteString(": ")
	if e.Reason != "" {
		b.WriteString(e.Reason)
	}
	if len(e.Errs) > 0 {
		if e.Reason != "" {
			b.WriteString(": ")
		}
		b.WriteString(e.Errs.ToAggregate().Error())
	}
	return b.String()
}

// failFunc makes the error of a claim that cannot be prepared.
type failFunc func(request, device, reason string, errs field.ErrorList) error

// planPaths are where a claim's files go; pools the node's IP pools that
// configs name.
type planPaths struct {
	claimDir, cdiSpec, bpfDir string
	pools                     IPPools
	// deviceInfoDir is Options.DeviceInfoDir.
	deviceInfoDir string
}

// consumer is the one pod a claim serves: fastpath configures a device for
// exactly one pod.
func consumer(claim *resourceapi.ResourceClaim, fail failFunc) (claims.Pod, error) {
	if claim.Status.Allocation == nil {
		return claims.Pod{}, fail("", "", "not allocated", nil)
	}
	var pods []resourceapi.ResourceClaimConsumerReference
	for _, r := range claim.Status.ReservedFor {
		if r.Resource == "pods" && r.APIGroup == "" {
			pods = append(pods, r)
		}
	}
	if len(pods) != 1 || len(claim.Status.ReservedFor) != 1 {
		return claims.Pod{}, fail("", "", fmt.Sprintf("reserved for %d consumers (%d pods); a device serves exactly one pod: use a ResourceClaimTemplate, or one claim per pod",
			len(claim.Status.ReservedFor), len(pods)), nil)
	}
	return claims.Pod{UID: pods[0].UID, Name: pods[0].Name}, nil
}

// plan computes, without side effects, what preparing claim means: per
// device, the resolved config and what to do with it. It checks everything
// the design asks of one claim: one pod, exactly one device per request,
// strict and valid configs, interface names unique within the claim. (The
// claim store checks names against the pod's other claims.)
func plan(claim *resourceapi.ResourceClaim, inventory map[string]devices.Device, nodeName string, paths planPaths) (*claims.Claim, error) {
	name := klog.KObj(claim).String()
	fail := func(request, device, reason string, errs field.ErrorList) error {
		return &ClaimError{Claim: name, Request: request, Device: device, Reason: reason, Errs: errs}
	}
	pod, err := consumer(claim, fail)
	if err != nil {
		return nil, err
	}
	c := &claims.Claim{Driver: claims.DriverFastpath, UID: claim.UID, Namespace: claim.Namespace, Name: claim.Name, Pod: pod,
		CDISpec: paths.cdiSpec, Dir: paths.claimDir}
	taken := map[string]string{}
	for _, res := range claim.Status.Allocation.Devices.Results {
		if res.Driver != devices.DriverName {
			continue
		}
		if err := checkResult(claim, res, nodeName, fail); err != nil {
			return nil, err
		}
		dev, ok := inventory[res.Device]
		if !ok {
			return nil, fail(res.Request, res.Device, "the device is not (or no longer) on this node", nil)
		}
		cfg, errs := resolveConfig(claim, res.Request)
		if len(errs) == 0 {
			cfg, errs = configFor(cfg, res.Request, dev)
		}
		if len(errs) == 0 {
			errs = append(paths.pools.checkPool(cfg), paths.pools.checkAddresses(cfg)...)
		}
		if cfg.Interface != nil && len(errs) == 0 {
			if where, dup := taken[cfg.Interface.Name]; dup {
				errs = append(errs, field.Duplicate(field.NewPath("interface", "name"), fmt.Sprintf("%s (already used by %s)", cfg.Interface.Name, where)))
			}
			taken[cfg.Interface.Name] = fmt.Sprintf("request %q", res.Request)
		}
		if len(errs) > 0 {
			return nil, fail(res.Request, dev.Name, "", errs)
		}
		d, err := planDevice(claim, res, dev, cfg, paths)
		if err != nil {
			return nil, err
		}
		d.PodNetwork, d.PodNetworkAttachment = cfg.PodNetwork, cfg.PodNetworkAttachment
		c.Devices = append(c.Devices, d)
	}
	if len(c.Devices) == 0 {
		return nil, fail("", "", "no device of driver "+devices.DriverName+" is allocated", nil)
	}
	return c, nil
}

// planDevice is the record of one device: what identifies it, how the host
// has it, and what to do with it.
func planDevice(claim *resourceapi.ResourceClaim, res resourceapi.DeviceRequestAllocationResult, dev devices.Device, cfg v1alpha1.InterfaceConfig, paths planPaths) (claims.Device, error) {
	req := status.RequestFileName(res.Request)
	if cfg.Mode == v1alpha1.ModeDelegate {
		return planDelegate(claim, res, dev, cfg, paths)
	}
	if v1alpha1.Shared(cfg.Mode) {
		d := planShared(res, dev, cfg, cdiKind+"="+cdiDeviceName(claim.UID, res.Request))
		if cfg.IPAM != nil {
			// The address is given at admission (IPPools.assign).
			d.IPAM = &claims.IPAMLease{Pool: cfg.IPAM.Pool}
		}
		return d, nil
	}
	d := claims.Device{Request: res.Request, Pool: res.Pool, Device: res.Device, Kind: string(dev.Kind), Mode: cfg.Mode,
		CDIDevice: cdiKind + "=" + cdiDeviceName(claim.UID, res.Request)}
	if dev.PCI != nil {
		d.PCIAddress, d.Driver = dev.PCI.Address, dev.PCI.Driver
	}
	if dev.VF != nil {
		d.PFPCIAddress = dev.VF.PFPCIAddress
		if set := vfSettings(cfg); set != nil {
			if dev.VF.PFName == "" {
				return d, &ClaimError{Claim: klog.KObj(claim).String(), Request: res.Request, Device: dev.Name, Errs: field.ErrorList{field.Forbidden(field.NewPath("vf"),
					fmt.Sprintf("the PF %s of this VF has no netdev to set it through", dev.VF.PFPCIAddress))}}
			}
			d.VF = &claims.VF{PFName: dev.VF.PFName, ID: dev.VF.ID, Set: *set}
		}
	}
	if dev.Netdev != nil {
		d.Host = &claims.HostNetdev{Name: dev.Netdev.Name, MTU: dev.Netdev.MTU, MAC: dev.Netdev.MAC, Alias: dev.Netdev.Alias}
	}
	if i := cfg.Interface; i != nil && (cfg.Mode == v1alpha1.ModeNetdev || cfg.Mode == v1alpha1.ModeAFXDP) {
		d.Pod = &claims.PodInterface{Name: i.Name, MTU: i.MTU, MAC: i.MAC, Addresses: i.Addresses}
		for _, r := range i.Routes {
			d.Pod.Routes = append(d.Pod.Routes, claims.Route{Destination: r.Destination, Gateway: r.Gateway})
		}
	}
	if cfg.IPAM != nil && d.Pod != nil {
		d.IPAM = &claims.IPAMLease{Pool: cfg.IPAM.Pool}
	}
	if cfg.Mode == v1alpha1.ModeVFIO {
		d.VFIO = &claims.VFIO{IOMMUGroup: *dev.PCI.IOMMUGroup}
	}
	if x := cfg.XDP; x != nil && cfg.Mode == v1alpha1.ModeAFXDP {
		d.XDP = &claims.XDP{Program: x.Program, AttachMode: x.AttachMode, Fallback: x.FallbackToGeneric, Queues: x.Queues, ZeroCopy: x.ZeroCopy,
			PinDir: filepath.Join(paths.bpfDir, string(claim.UID)+"-"+req)}
	}
	if m := dev.Memif; m != nil {
		d.Memif = &claims.Memif{Role: m.Role, Mode: m.Mode, Socket: m.SocketPath, Dir: filepath.Join(paths.claimDir, "memif", req)}
		if s := cfg.Memif; s != nil {
			if s.UID != nil {
				d.Memif.UID = *s.UID
			}
			if s.GID != nil {
				d.Memif.GID = *s.GID
			}
		}
	}
	if status.DeviceInfoOf(d) != nil {
		d.DeviceInfoFile = filepath.Join(paths.claimDir, req+"-device.json")
	}
	return d, nil
}

// planDelegate is the record of a device claimed in mode delegate: the
// device stays as it is, for the CNI plugin of the
// NetworkAttachmentDefinition that asks for its resource name, which the
// record keeps with what the plugin is given (its PCI address, else its
// netdev) and where its device-info goes.
func planDelegate(claim *resourceapi.ResourceClaim, res resourceapi.DeviceRequestAllocationResult, dev devices.Device, cfg v1alpha1.InterfaceConfig, paths planPaths) (claims.Device, error) {
	d := claims.Device{Request: res.Request, Pool: res.Pool, Device: res.Device, Kind: string(dev.Kind), Mode: cfg.Mode,
		CDIDevice: cdiKind + "=" + cdiDeviceName(claim.UID, res.Request), ResourceName: cmp.Or(cfg.ResourceName, dev.ResourceName)}
	fail := func(reason string) error {
		return &ClaimError{Claim: klog.KObj(claim).String(), Request: res.Request, Device: dev.Name, Reason: reason}
	}
	switch {
	case paths.deviceInfoDir == "":
		return d, fail("mode delegate hands the device to the CNI plugin of a NetworkAttachmentDefinition the pod selects, and this node does not attach those (fastpathd run --npwg is off)")
	case d.ResourceName == "":
		return d, fail("mode delegate: the device has no resource name for a NetworkAttachmentDefinition to ask for (config resourceName, or fastpathd run --resource-name)")
	}
	if dev.PCI != nil {
		d.PCIAddress, d.Driver = dev.PCI.Address, dev.PCI.Driver
		d.DeviceInfoFile = npwg.DeviceInfoPath(paths.deviceInfoDir, d.ResourceName, d.PCIAddress)
	}
	if dev.VF != nil {
		d.PFPCIAddress = dev.VF.PFPCIAddress
	}
	if dev.Netdev != nil {
		d.Host = &claims.HostNetdev{Name: dev.Netdev.Name, MTU: dev.Netdev.MTU, MAC: dev.Netdev.MAC, Alias: dev.Netdev.Alias}
	}
	return d, nil
}

// vfSettings are the settings to make on a VF through its PF: the vf
// section, and the interface MAC (so that the PF's spoof check lets the
// pod's MAC through). Nil when there are none.
func vfSettings(cfg v1alpha1.InterfaceConfig) *claims.VFSettings {
	var s claims.VFSettings
	if v := cfg.VF; v != nil {
		s = claims.VFSettings{VLAN: v.VLAN, QoS: v.QoS, VLANProto: v.VLANProto, SpoofChk: v.SpoofChk, Trust: v.Trust,
			MinTxRate: v.MinTxRateMbps, MaxTxRate: v.MaxTxRateMbps, LinkState: v.LinkState}
	}
	if cfg.Interface != nil && cfg.Interface.MAC != "" && cfg.Mode == v1alpha1.ModeNetdev {
		s.MAC = cfg.Interface.MAC
	}
	if s == (claims.VFSettings{}) {
		return nil
	}
	return &s
}

// checkResult checks an allocated device of this node's driver: one
// device for its request, from this node's pool.
func checkResult(claim *resourceapi.ResourceClaim, res resourceapi.DeviceRequestAllocationResult, nodeName string, fail failFunc) error {
	if why := exactlyOne(claim, res.Request); why != "" {
		return fail(res.Request, "", why, nil)
	}
	if res.Pool != nodeName {
		return fail(res.Request, res.Device, fmt.Sprintf("allocated from pool %q, but this node's pool is %q", res.Pool, nodeName), nil)
	}
	return nil
}

// requestBase is the request of a request or subrequest name (req/sub).
func requestBase(request string) string {
	base, _, _ := strings.Cut(request, "/")
	return base
}

// exactlyOne says what is wrong unless the request asks for exactly one
// device: each device is configured on its own.
func exactlyOne(claim *resourceapi.ResourceClaim, request string) string {
	base, sub, hasSub := strings.Cut(request, "/")
	for _, r := range claim.Spec.Devices.Requests {
		if r.Name != base {
			continue
		}
		var exact *resourceapi.ExactDeviceRequest
		if hasSub {
			for i := range r.FirstAvailable {
				if r.FirstAvailable[i].Name == sub {
					s := r.FirstAvailable[i]
					exact = &resourceapi.ExactDeviceRequest{AllocationMode: s.AllocationMode, Count: s.Count}
				}
			}
		} else {
			exact = r.Exactly
		}
		if exact == nil {
			return "request not found in the claim's spec"
		}
		mode, count := exact.AllocationMode, exact.Count
		if mode == "" {
			mode = resourceapi.DeviceAllocationModeExactCount
		}
		if count == 0 {
			count = 1
		}
		if mode != resourceapi.DeviceAllocationModeExactCount || count != 1 {
			return fmt.Sprintf("allocationMode %s, count %d: each request must ask for exactly one device (allocationMode ExactCount, count 1); use one request per device", mode, count)
		}
		return ""
	}
	return "request not found in the claim's spec"
}
