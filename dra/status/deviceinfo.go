package status

import (
	"encoding/json"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// DeviceInfo is the Network Plumbing WG device-info document (v1.1.0) that
// CNF tooling reads to find a pod's devices.
type DeviceInfo struct {
	Type    string           `json:"type"`
	Version string           `json:"version"`
	PCI     *DeviceInfoPCI   `json:"pci,omitempty"`
	Memif   *DeviceInfoMemif `json:"memif,omitempty"`
}

// DeviceInfoPCI describes a PCI device.
type DeviceInfoPCI struct {
	PCIAddress   string `json:"pci-address"`
	PFPCIAddress string `json:"pf-pci-address,omitempty"`
}

// DeviceInfoMemif describes a memif endpoint.
type DeviceInfoMemif struct {
	Role string `json:"role"`
	Path string `json:"path"`
	Mode string `json:"mode"`
}

// DeviceInfoVersion is the NPWG device-info spec version written.
const DeviceInfoVersion = "1.1.0"

// DeviceInfoOf is the device-info of a prepared device, or nil for a
// device the spec has no type for (a virtual netdev).
func DeviceInfoOf(d claims.Device) *DeviceInfo {
	switch {
	case d.Memif != nil:
		return &DeviceInfo{Type: "memif", Version: DeviceInfoVersion, Memif: &DeviceInfoMemif{
			Role: d.Memif.Role, Path: MemifContainerSocket(d.Request), Mode: d.Memif.Mode}}
	case d.PCIAddress != "":
		return &DeviceInfo{Type: "pci", Version: DeviceInfoVersion, PCI: &DeviceInfoPCI{
			PCIAddress: d.PCIAddress, PFPCIAddress: d.PFPCIAddress}}
	}
	return nil
}

// Marshal is the document as written to its file.
func (d *DeviceInfo) Marshal() ([]byte, error) { return json.MarshalIndent(d, "", "  ") }
