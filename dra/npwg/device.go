package npwg

import (
	"fmt"

	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
)

// ResourceNameAnnot is the annotation by which a NetworkAttachmentDefinition
// asks for a device of a resource for its CNI plugin (the device plugin
// resource name of Multus and the SR-IOV device plugin).
const ResourceNameAnnot = "k8s.v1.cni.cncf.io/resourceName"

// CapabilityDeviceID is the runtimeConfig capability of the device a
// plugin is given (host-device, sriov-cni).
const CapabilityDeviceID = "deviceID"

// Device is the device an attachment's plugins are given.
type Device struct {
	// PCIAddress is the device's PCI function, "" for a device without
	// one (a virtual NIC).
	PCIAddress string
	// Netdev is its kernel interface in the host, "" for none (a function
	// bound to a userspace driver).
	Netdev string
}

// GiveDevice gives the invocation's plugins the device, as Multus gives
// them a device plugin's: its PCI address as "deviceID" (sriov-cni) and
// "pciBusID" (host-device) in each plugin's configuration, and as the
// runtimeConfig capability "deviceID" for the plugins that declare it. A
// device without a PCI address is given by its netdev as "device", the
// key host-device finds an interface by.
func (inv *Invocation) GiveDevice(dev Device) error {
	keys := map[string]any{}
	given := []string{}
	switch {
	case dev.PCIAddress != "":
		keys["deviceID"], keys["pciBusID"] = dev.PCIAddress, dev.PCIAddress
	case dev.Netdev != "":
		keys["device"] = dev.Netdev
	default:
		return fmt.Errorf("network %s: the device has neither a PCI address nor a netdev to give the plugins", inv.Network)
	}
	list, err := rebuildList(inv.List, nil, func(conf map[string]any, typ string) error {
		for k, v := range keys {
			cnipolicy.Set(conf, k, v)
			given = append(given, k)
		}
		// A plugin making its interface on a master left out would take
		// the node's default-route interface: it gets the device's netdev.
		if !cnipolicy.MakesOnMaster(typ) || !cnipolicy.LeftOut(conf, "master") {
			return nil
		}
		if dev.Netdev == "" {
			return fmt.Errorf("%s makes its interface on a master, which the configuration leaves to the device, and the device has no netdev (bound to a userspace driver?)", typ)
		}
		cnipolicy.Set(conf, "master", dev.Netdev)
		given = append(given, "master")
		return nil
	})
	if err != nil {
		return fmt.Errorf("network %s: %w", inv.Network, err)
	}
	inv.List = list
	inv.given = append(inv.given, given...)
	if dev.PCIAddress != "" {
		if inv.CapabilityArgs == nil {
			inv.CapabilityArgs = map[string]any{}
		}
		inv.CapabilityArgs[CapabilityDeviceID] = dev.PCIAddress
		inv.given = append(inv.given, runtimeConfigKey+"."+CapabilityDeviceID)
	}
	return nil
}
