package dra

import (
	"cmp"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/claimspec"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// planPaths are where a claim's files go; pools the node's IP pools that
// configs name.
type planPaths struct {
	claimDir, cdiSpec, bpfDir string
	pools                     IPPools
	// deviceInfoDir is Options.DeviceInfoDir.
	deviceInfoDir string
	// sysctls are the interface sysctls claims may set: nil for
	// v1alpha1.DefaultSysctls, else those and Options.InterfaceSysctls.
	sysctls []string
}

// checkSysctls refuses the interface sysctls the node does not allow.
func (p planPaths) checkSysctls(cfg v1alpha1.InterfaceConfig) field.ErrorList {
	if cfg.Interface == nil {
		return nil
	}
	allowed := p.sysctls
	if allowed == nil {
		allowed = v1alpha1.DefaultSysctls
	}
	var errs field.ErrorList
	for _, k := range slices.Sorted(maps.Keys(cfg.Interface.Sysctls)) {
		if !slices.Contains(allowed, k) {
			errs = append(errs, field.Forbidden(field.NewPath("interface", "sysctls").Key(k),
				fmt.Sprintf("not allowed on this node: it allows %s (the operator adds more with --interface-sysctls)", strings.Join(allowed, ", "))))
		}
	}
	return errs
}

// plan computes, without side effects, what preparing claim means: per
// device, the resolved config and what to do with it. It checks everything
// the design asks of one claim: one pod, as many devices per request as it
// asked for, strict and valid configs that can be given to each device of
// a request of several (claimspec.Expand), interface names unique within
// the claim. (The
// claim store checks names against the pod's other claims.)
func plan(claim *resourceapi.ResourceClaim, inventory map[string]devices.Device, nodeName string, paths planPaths) (*claims.Claim, error) {
	name := klog.KObj(claim).String()
	fail := func(request, device, reason string, errs field.ErrorList) error {
		return &claimspec.ClaimError{Claim: name, Request: request, Device: device, Reason: reason, Errs: errs}
	}
	pod, err := claimspec.Consumer(claim, fail)
	if err != nil {
		return nil, err
	}
	c := &claims.Claim{Driver: claims.DriverFastpath, UID: claim.UID, Namespace: claim.Namespace, Name: claim.Name, Pod: pod,
		CDISpec: paths.cdiSpec, Dir: paths.claimDir}
	taken := map[string]string{}
	// The devices of a pod's extended resources, which no config names,
	// are net1, net2, ... in the allocation's order, as Multus names a
	// pod's networks.
	extended, netN := claimspec.ExtendedResources(claim), 0
	// A request of several devices gives each its own interface name,
	// addresses and slot (claimspec.Expand, claimspec.Slot), by its index
	// among the request's devices in the allocation's order.
	total, index := map[string]int{}, map[string]int{}
	for _, res := range claim.Status.Allocation.Devices.Results {
		if res.Driver == devices.DriverName {
			total[res.Request]++
		}
	}
	slots := map[string]string{}
	for _, res := range claim.Status.Allocation.Devices.Results {
		if res.Driver != devices.DriverName {
			continue
		}
		if err := claimspec.CheckResult(claim, res, nodeName, fail); err != nil {
			return nil, err
		}
		if res.AdminAccess != nil && *res.AdminAccess {
			// The device may be another pod's: preparing it would take it.
			// Admin-access claims are given views (prepareAdmin).
			return nil, fail(res.Request, res.Device, "allocated with adminAccess: it gets a read-only view of the device, never the device; claim the pod's own devices apart", nil)
		}
		dev, ok := inventory[res.Device]
		if !ok {
			return nil, fail(res.Request, res.Device, "the device is not (or no longer) on this node", nil)
		}
		count, _ := claimspec.CountOf(claim, res.Request)
		if extended {
			count = claimspec.Count{N: int64(total[res.Request])}
		}
		if !count.All && int64(total[res.Request]) != count.N {
			return nil, fail(res.Request, "", fmt.Sprintf("allocated %d devices for a request of %s", total[res.Request], count), nil)
		}
		i := index[res.Request]
		index[res.Request]++
		slot := claimspec.Slot(res.Request, count, i)
		if other, dup := slots[envName(slot)]; dup {
			return nil, fail(res.Request, res.Device, fmt.Sprintf("its environment variables (suffix %s) would be those of %s: rename one of the requests", envName(slot), other), nil)
		}
		slots[envName(slot)] = fmt.Sprintf("request %q", res.Request)
		cfg, errs := claimspec.ResolveConfig(claim, res.Request)
		if len(errs) == 0 {
			ifName := claimspec.RequestBase(res.Request)
			if extended {
				netN++
				ifName = fmt.Sprintf("net%d", netN)
			} else {
				cfg, ifName, errs = claimspec.Expand(cfg, ifName, count, i, total[res.Request])
			}
			if len(errs) == 0 {
				cfg, errs = claimspec.ConfigFor(cfg, ifName, dev)
			}
		}
		if len(errs) == 0 {
			errs = append(paths.pools.checkPool(cfg), paths.pools.checkAddresses(cfg)...)
			errs = append(errs, paths.checkSysctls(cfg)...)
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
		d, err := planDevice(claim, res, slot, dev, cfg, paths)
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
func planDevice(claim *resourceapi.ResourceClaim, res resourceapi.DeviceRequestAllocationResult, slot string, dev devices.Device, cfg v1alpha1.InterfaceConfig, paths planPaths) (claims.Device, error) {
	d, err := planDeviceOf(claim, res, slot, dev, cfg, paths)
	if slot != res.Request {
		d.Slot = slot
	}
	return d, err
}

// planDeviceOf is planDevice but for the slot's record.
func planDeviceOf(claim *resourceapi.ResourceClaim, res resourceapi.DeviceRequestAllocationResult, slot string, dev devices.Device, cfg v1alpha1.InterfaceConfig, paths planPaths) (claims.Device, error) {
	req := status.RequestFileName(slot)
	cdiDevice := cdiKind + "=" + cdiDeviceName(claim.UID, slot)
	if cfg.Mode == v1alpha1.ModeDelegate {
		return planDelegate(claim, res, cdiDevice, dev, cfg, paths)
	}
	if v1alpha1.Shared(cfg.Mode) {
		d := planShared(res, dev, cfg, cdiDevice)
		if cfg.IPAM != nil {
			// The address is given at admission (IPPools.assign).
			d.IPAM = &claims.IPAMLease{Pool: cfg.IPAM.Pool}
		}
		return d, nil
	}
	d := claims.Device{Request: res.Request, Pool: res.Pool, Device: res.Device, Kind: string(dev.Kind), Mode: cfg.Mode,
		CDIDevice: cdiDevice}
	if dev.PCI != nil {
		d.PCIAddress, d.Driver = dev.PCI.Address, dev.PCI.Driver
		// The containers get PCIDEVICE_<RESOURCE>, as from the SR-IOV
		// device plugin, whatever the mode: a DPDK pod written for it
		// reads its VFs there. Not for fastpath's own default names
		// (fastpath.dev/sriov-vf), whose variable a request named
		// sriov-vf has: PCIDEVICE_FASTPATH_DEV_<REQUEST>.
		if rn := cmp.Or(cfg.ResourceName, dev.ResourceName); !strings.HasPrefix(rn, devices.DriverName+"/") {
			d.ResourceName = rn
		}
	}
	if dev.VF != nil {
		d.PFPCIAddress = dev.VF.PFPCIAddress
		if set := vfSettings(cfg); set != nil {
			if dev.VF.PFName == "" {
				return d, &claimspec.ClaimError{Claim: klog.KObj(claim).String(), Request: res.Request, Device: dev.Name, Errs: field.ErrorList{field.Forbidden(field.NewPath("vf"),
					fmt.Sprintf("the PF %s of this VF has no netdev to set it through", dev.VF.PFPCIAddress))}}
			}
			d.VF = &claims.VF{PFName: dev.VF.PFName, ID: dev.VF.ID, Set: *set}
		}
	}
	if dev.Netdev != nil {
		d.Host = &claims.HostNetdev{Name: dev.Netdev.Name, MTU: dev.Netdev.MTU, MAC: dev.Netdev.MAC, Alias: dev.Netdev.Alias}
	}
	d.Published = recordPublished(dev)
	if i := cfg.Interface; i != nil && (cfg.Mode == v1alpha1.ModeNetdev || cfg.Mode == v1alpha1.ModeAFXDP) {
		d.Pod = &claims.PodInterface{Name: i.Name, MTU: i.MTU, MAC: i.MAC, Addresses: i.Addresses, Sysctls: i.Sysctls}
		for _, r := range i.Routes {
			d.Pod.Routes = append(d.Pod.Routes, claims.Route{Destination: r.Destination, Gateway: r.Gateway, Table: r.Table, Source: r.Source, Scope: r.Scope, Metric: r.Metric})
		}
		for _, r := range i.Rules {
			d.Pod.Rules = append(d.Pod.Rules, claims.Rule(r))
		}
		if i.VRF != nil {
			d.Pod.VRF = &claims.VRF{Name: i.VRF.Name, Table: i.VRF.Table}
		}
		for _, n := range i.Neighbors {
			d.Pod.Neighbors = append(d.Pod.Neighbors, claims.Neighbor(n))
		}
		if set := offloads(i); set != nil && d.Host != nil {
			d.Offloads = &claims.Offloads{Set: *set}
		}
	}
	if cfg.IPAM != nil && d.Pod != nil {
		d.IPAM = &claims.IPAMLease{Pool: cfg.IPAM.Pool}
	}
	if cfg.Mode == v1alpha1.ModeVFIO {
		d.VFIO = &claims.VFIO{IOMMUGroup: *dev.PCI.IOMMUGroup}
	}
	d.RDMA = planRDMA(dev, cfg)
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

// offloads are the device settings of the interface spec Prepare makes in
// the host, nil for none.
func offloads(i *v1alpha1.InterfaceSpec) *claims.OffloadSettings {
	set := claims.OffloadSettings{GSOMaxSize: i.GSOMaxSize, GROMaxSize: i.GROMaxSize, GSOIPv4MaxSize: i.GSOIPv4MaxSize, GROIPv4MaxSize: i.GROIPv4MaxSize}
	if e := i.Ethtool; e != nil {
		set.Features, set.PrivateFlags = e.Features, e.PrivateFlags
	}
	if len(set.Features) == 0 && len(set.PrivateFlags) == 0 && set.GSOMaxSize == 0 && set.GROMaxSize == 0 && set.GSOIPv4MaxSize == 0 && set.GROIPv4MaxSize == 0 {
		return nil
	}
	return &set
}

// planRDMA is the record of the RDMA device a config asks for, nil for
// none; Prepare fills in the rest (observe). ConfigFor checked that the
// device has one.
func planRDMA(dev devices.Device, cfg v1alpha1.InterfaceConfig) *claims.RDMA {
	if cfg.RDMA == nil || dev.Netdev == nil {
		return nil
	}
	return &claims.RDMA{Device: dev.Netdev.RDMADevice, UMAD: cfg.RDMA.UMAD}
}

// planDelegate is the record of a device claimed in mode delegate: the
// device stays as it is, for the CNI plugin of the
// NetworkAttachmentDefinition that asks for its resource name, which the
// record keeps with what the plugin is given (its PCI address, else its
// netdev) and where its device-info goes.
func planDelegate(claim *resourceapi.ResourceClaim, res resourceapi.DeviceRequestAllocationResult, cdiDevice string, dev devices.Device, cfg v1alpha1.InterfaceConfig, paths planPaths) (claims.Device, error) {
	d := claims.Device{Request: res.Request, Pool: res.Pool, Device: res.Device, Kind: string(dev.Kind), Mode: cfg.Mode,
		CDIDevice: cdiDevice, ResourceName: cmp.Or(cfg.ResourceName, dev.ResourceName)}
	fail := func(reason string) error {
		return &claimspec.ClaimError{Claim: klog.KObj(claim).String(), Request: res.Request, Device: dev.Name, Reason: reason}
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
	d.Published = recordPublished(dev)
	return d, nil
}

// vfSettings are the settings to make on a VF through its PF: the vf
// section, and the interface MAC (so that the PF's spoof check lets the
// pod's MAC through). Nil when there are none. It is the one conversion of
// the config API's VF settings (v1alpha1.VFConfig) to the record's;
// pfSettings takes the record's on to the dataplane (TestVFConversions).
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
