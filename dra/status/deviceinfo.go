package status

import (
	"encoding/json"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// DeviceInfoOf is the device-info of a prepared device, or nil for a
// device the spec has no type for (a virtual netdev).
func DeviceInfoOf(d claims.Device) *nadv1.DeviceInfo {
	switch {
	case d.Memif != nil:
		return &nadv1.DeviceInfo{Type: nadv1.DeviceInfoTypeMemif, Version: nadv1.DeviceInfoVersion, Memif: &nadv1.MemifDevice{
			Role: d.Memif.Role, Path: MemifContainerSocket(d.SlotName()), Mode: d.Memif.Mode}}
	case d.PCIAddress != "":
		return &nadv1.DeviceInfo{Type: nadv1.DeviceInfoTypePCI, Version: nadv1.DeviceInfoVersion, Pci: &nadv1.PciDevice{
			PciAddress: d.PCIAddress, PfPciAddress: d.PFPCIAddress}}
	}
	return nil
}

// MarshalDeviceInfo is a device-info document as written to its file.
func MarshalDeviceInfo(d *nadv1.DeviceInfo) ([]byte, error) { return json.MarshalIndent(d, "", "  ") }
