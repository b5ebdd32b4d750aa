package devices

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
)

// DriverName is the DRA driver fastpath publishes its devices under; its
// unqualified attribute names live in this domain.
const DriverName = "fastpath.dev"

// Attribute names outside the driver's own domain.
const (
	// AttributePCIBusID is the standard PCI bus ID attribute.
	AttributePCIBusID resourceapi.QualifiedName = deviceattribute.StandardDeviceAttributePrefix + "pciBusID"
	// AttributeMultusDeviceID and AttributeMultusResourceName are what the
	// Multus DRA bridge reads.
	AttributeMultusDeviceID     resourceapi.QualifiedName = "k8s.cni.cncf.io/deviceID"
	AttributeMultusResourceName resourceapi.QualifiedName = "k8s.cni.cncf.io/resourceName"
)

// Attributes are the DRA attributes of d, as published and as the CEL
// filter sees them. Unknown facts are left out rather than guessed.
func (d Device) Attributes() map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	a := attrs{}
	a.str("kind", string(d.Kind))
	if p := d.PCI; p != nil {
		a.str("pciAddress", p.Address)
		a.str("pciVendor", p.Vendor)
		a.str("pciDevice", p.Device)
		if p.SubsystemVendor != "" {
			a.str("pciSubsystem", p.SubsystemVendor+":"+p.SubsystemDevice)
		}
		a.str("driver", p.Driver)
		if attr, ok := standardNUMANode(p.NUMANode); ok {
			a[deviceattribute.StandardDeviceAttributeNUMANode] = attr
			// Deprecated: fastpath.dev/numaNode is the standard
			// attribute's alias, published beside it for one release.
			a.int("numaNode", p.NUMANode)
		}
		if p.IOMMUGroup != nil {
			a.int("iommuGroup", *p.IOMMUGroup)
		}
		a.bool("vfioCapable", p.VFIOCapable())
		if p.PCIeRoot != "" {
			a[deviceattribute.StandardDeviceAttributePCIeRoot] = resourceapi.DeviceAttribute{StringValue: new(p.PCIeRoot)}
		}
		a[AttributePCIBusID] = resourceapi.DeviceAttribute{StringValue: new(p.Address)}
		a[AttributeMultusDeviceID] = resourceapi.DeviceAttribute{StringValue: new(p.Address)}
	}
	if d.ResourceName != "" {
		a[AttributeMultusResourceName] = resourceapi.DeviceAttribute{StringValue: new(d.ResourceName)}
	}
	if d.Kind == KindSRIOVVF || d.Kind == KindNIC {
		a.bool("sriovVF", d.VF != nil)
	}
	if pf := d.PF; pf != nil {
		a.int("sriovTotalVFs", pf.TotalVFs)
		a.int("sriovNumVFs", pf.NumVFs)
	}
	if vf := d.VF; vf != nil {
		a.str("pfPciAddress", vf.PFPCIAddress)
		a.str("pfName", vf.PFName)
		a.int("vfID", vf.ID)
	}
	if n := d.Netdev; n != nil {
		a.str("ifName", n.Name)
		a.str("mac", n.MAC)
		if n.MTU > 0 {
			a.int("mtu", n.MTU)
		}
		if n.SpeedMbps > 0 {
			a.int("linkSpeedMbps", n.SpeedMbps)
		}
		if d.PCI == nil {
			a.str("driver", n.Driver)
		}
		if n.XDP.Supported != nil {
			a.bool("xdp", *n.XDP.Supported)
		}
		if n.XDP.ZeroCopy != nil {
			a.bool("xdpZeroCopy", *n.XDP.ZeroCopy)
		}
		if n.CombinedChannels > 0 {
			a.int("combinedChannels", n.CombinedChannels)
		}
		a.str("rdmaDevice", n.RDMADevice)
		a.str("rdmaNetnsMode", n.RDMANetnsMode)
	}
	if d.Share != nil {
		a.bool("shareable", true)
	}
	if m := d.Memif; m != nil {
		a.str("memifRole", m.Role)
		a.str("memifMode", m.Mode)
		a.bool("memifHealthy", m.Healthy)
	}
	return a
}

type attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute

func (a attrs) str(name, v string) {
	if v != "" {
		a[resourceapi.QualifiedName(name)] = resourceapi.DeviceAttribute{StringValue: new(v)}
	}
}

func (a attrs) int(name string, v int) {
	a[resourceapi.QualifiedName(name)] = resourceapi.DeviceAttribute{IntValue: new(int64(v))}
}

func (a attrs) bool(name string, v bool) {
	a[resourceapi.QualifiedName(name)] = resourceapi.DeviceAttribute{BoolValue: new(v)}
}
