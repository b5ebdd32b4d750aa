package dra

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
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

// plan computes, without side effects, what preparing claim means: per
// device, the resolved config and the files to write. It validates
// everything the design asks: one pod per claim, exactly one device per
// request, strict configs, interface names unique within the pod.
func plan(claim *resourceapi.ResourceClaim, cp *Checkpoint, inventory map[string]devices.Device, nodeName, claimDir, cdiSpecFile string) (*ClaimState, error) {
	name := klog.KObj(claim).String()
	fail := func(request, device, reason string, errs field.ErrorList) error {
		return &ClaimError{Claim: name, Request: request, Device: device, Reason: reason, Errs: errs}
	}
	if claim.Status.Allocation == nil {
		return nil, fail("", "", "not allocated", nil)
	}
	var pods []resourceapi.ResourceClaimConsumerReference
	for _, r := range claim.Status.ReservedFor {
		if r.Resource == "pods" && r.APIGroup == "" {
			pods = append(pods, r)
		}
	}
	if len(pods) != 1 || len(claim.Status.ReservedFor) != 1 {
		return nil, fail("", "", fmt.Sprintf("reserved for %d consumers (%d pods); a fastpath device serves exactly one pod: use a ResourceClaimTemplate, or one claim per pod",
			len(claim.Status.ReservedFor), len(pods)), nil)
	}
	st := &ClaimState{
		Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID,
		PodUID: pods[0].UID, PodName: pods[0].Name,
		Files: []string{cdiSpecFile, claimDir},
	}
	// Interface names already taken in this pod by its other claims.
	taken := map[string]string{}
	for _, other := range cp.Claims {
		if other.PodUID != st.PodUID || other.UID == claim.UID {
			continue
		}
		for _, d := range other.Devices {
			if d.Config.Interface != nil {
				taken[d.Config.Interface.Name] = fmt.Sprintf("claim %s/%s request %q", other.Namespace, other.Name, d.Request)
			}
		}
	}
	for _, res := range claim.Status.Allocation.Devices.Results {
		if res.Driver != devices.DriverName {
			continue
		}
		if err := exactlyOne(claim, res.Request); err != "" {
			return nil, fail(res.Request, "", err, nil)
		}
		if res.Pool != nodeName {
			return nil, fail(res.Request, res.Device, fmt.Sprintf("allocated from pool %q, but this node's pool is %q", res.Pool, nodeName), nil)
		}
		dev, ok := inventory[res.Device]
		if !ok {
			return nil, fail(res.Request, res.Device, "the device is not (or no longer) on this node", nil)
		}
		cfg, errs := resolveConfig(claim, res.Request)
		if len(errs) == 0 {
			cfg.setDefaults(requestBase(res.Request), dev)
			errs = cfg.validate(dev)
		}
		if cfg.Interface != nil && len(errs) == 0 {
			if where, dup := taken[cfg.Interface.Name]; dup {
				errs = append(errs, field.Duplicate(field.NewPath("interface", "name"),
					fmt.Sprintf("%s (already used by %s)", cfg.Interface.Name, where)))
			}
			taken[cfg.Interface.Name] = fmt.Sprintf("request %q", res.Request)
		}
		if len(errs) > 0 {
			return nil, fail(res.Request, dev.Name, "", errs)
		}
		pd := PreparedDevice{
			Request: res.Request, Pool: res.Pool, Device: res.Device, Kind: dev.Kind, Config: cfg,
			CDIDeviceID: cdiKind + "=" + cdiDeviceName(claim.UID, res.Request),
		}
		if dev.PCI != nil {
			pd.PCIAddress = dev.PCI.Address
			if cfg.Mode == ModeVFIO {
				group := *dev.PCI.IOMMUGroup
				pd.IOMMUGroup = &group
			}
		}
		if dev.VF != nil {
			pd.PFPCIAddress, pd.PFName, pd.VFID = dev.VF.PFPCIAddress, dev.VF.PFName, dev.VF.ID
			if set := vfSettings(cfg); set != nil {
				if pd.PFName == "" {
					return nil, fail(res.Request, dev.Name, "", field.ErrorList{field.Forbidden(field.NewPath("vf"),
						fmt.Sprintf("the PF %s of this VF has no netdev to set it through", dev.VF.PFPCIAddress))})
				}
				pd.VFSet = set
			}
		}
		if dev.Netdev != nil {
			pd.HostIfName, pd.HostMTU, pd.HostMAC, pd.HostAlias = dev.Netdev.Name, dev.Netdev.MTU, dev.Netdev.MAC, dev.Netdev.Alias
		}
		if dev.Memif != nil {
			pd.MemifSocket, pd.MemifRole, pd.MemifMode = dev.Memif.SocketPath, dev.Memif.Role, dev.Memif.Mode
			pd.MemifDir = filepath.Join(claimDir, "memif", strings.ReplaceAll(res.Request, "/", "_"))
		}
		if deviceInfo(pd) != nil {
			pd.DeviceInfoFile = filepath.Join(claimDir, strings.ReplaceAll(res.Request, "/", "_")+"-device.json")
		}
		st.Devices = append(st.Devices, pd)
	}
	if len(st.Devices) == 0 {
		return nil, fail("", "", "no device of driver "+devices.DriverName+" is allocated", nil)
	}
	return st, nil
}

// vfSettings are the settings to make on a VF through its PF: the vf
// section, and the interface MAC (so that the PF's spoof check lets the
// pod's MAC through). Nil when there are none.
func vfSettings(cfg InterfaceConfig) *dataplane.VFSettings {
	var s dataplane.VFSettings
	if v := cfg.VF; v != nil {
		s = dataplane.VFSettings{VLAN: v.VLAN, QoS: v.QoS, VLANProto: v.VLANProto, SpoofChk: v.SpoofChk, Trust: v.Trust,
			MinTxRate: v.MinTxRateMbps, MaxTxRate: v.MaxTxRateMbps, LinkState: v.LinkState}
	}
	if cfg.Interface != nil && cfg.Interface.MAC != "" && cfg.Mode == ModeNetdev {
		s.MAC = cfg.Interface.MAC
	}
	if s == (dataplane.VFSettings{}) {
		return nil
	}
	return &s
}

// requestBase is the request of a request or subrequest name (req/sub).
func requestBase(request string) string {
	base, _, _ := strings.Cut(request, "/")
	return base
}

// exactlyOne says what is wrong unless the request asks for exactly one
// device: each fastpath device is configured on its own.
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

// resolveConfig merges the opaque configs for fastpath.dev that apply to
// request: the DeviceClass's first, then the claim's, later fields winning.
func resolveConfig(claim *resourceapi.ResourceClaim, request string) (InterfaceConfig, field.ErrorList) {
	var cfg InterfaceConfig
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
		if c.Opaque == nil || c.Opaque.Driver != devices.DriverName || !appliesTo(c.Requests, request) {
			continue
		}
		path := field.NewPath("config").Index(i).Key(string(c.Source)).Child("parameters")
		errs = append(errs, decodeConfig(c.Opaque.Parameters.Raw, &cfg, path)...)
	}
	return cfg, errs
}

func sourceRank(s resourceapi.AllocationConfigSource) int {
	if s == resourceapi.AllocationConfigSourceClass {
		return 0
	}
	return 1
}

// appliesTo reports whether a config listing requests covers request (or
// its parent request). No list means every request.
func appliesTo(requests []string, request string) bool {
	if len(requests) == 0 {
		return true
	}
	return slices.Contains(requests, request) || slices.Contains(requests, requestBase(request))
}
