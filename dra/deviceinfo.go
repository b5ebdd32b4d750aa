package dra

import (
	"encoding/json"

	"github.com/fastpath-dra/fastpath/devices"
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

// deviceInfoVersion is the NPWG device-info spec version written.
const deviceInfoVersion = "1.1.0"

// deviceInfo is the device-info of a prepared device, or nil for a device
// the spec has no type for (a virtual netdev).
func deviceInfo(p PreparedDevice) *DeviceInfo {
	switch {
	case p.Kind == devices.KindMemif:
		return &DeviceInfo{Type: "memif", Version: deviceInfoVersion, Memif: &DeviceInfoMemif{
			Role: p.MemifRole, Path: memifContainerSocket(p.Request), Mode: p.MemifMode}}
	case p.PCIAddress != "":
		return &DeviceInfo{Type: "pci", Version: deviceInfoVersion, PCI: &DeviceInfoPCI{
			PCIAddress: p.PCIAddress, PFPCIAddress: p.PFPCIAddress}}
	}
	return nil
}

func (d *DeviceInfo) marshal() ([]byte, error) { return json.MarshalIndent(d, "", "  ") }
