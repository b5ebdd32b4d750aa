package npwg

import (
	"fmt"
	"path/filepath"
	"strings"
)

// DefaultDeviceInfoDir is where the NPWG device-info files live on a node
// (device-info spec v1.1, §4): dp/ holds a device plugin's, cni/ a CNI
// plugin's.
const DefaultDeviceInfoDir = "/var/run/k8s.cni.cncf.io/devinfo"

// DeviceInfoPath is the file of the device-info of the device deviceID
// of resource resourceName below dir, named as the SR-IOV device plugin
// names it (the NPWG client library's layout): dp/RESOURCE-ID-device.json,
// each '/' turned into '-'. Multus and sriov-cni read it there.
func DeviceInfoPath(dir, resourceName, deviceID string) string {
	return filepath.Join(dir, "dp", fmt.Sprintf("%s-%s-device.json",
		strings.ReplaceAll(resourceName, "/", "-"), strings.ReplaceAll(deviceID, "/", "-")))
}

// ResourceEnv is the environment variable in which a device plugin gives
// a container the PCI addresses of its devices of resourceName, comma
// separated: PCIDEVICE_ and the name in upper case with '.', '/' and '-'
// as '_' (intel.com/sriov_netdevice: PCIDEVICE_INTEL_COM_SRIOV_NETDEVICE).
func ResourceEnv(resourceName string) string {
	return "PCIDEVICE_" + strings.ToUpper(strings.NewReplacer(".", "_", "/", "_", "-", "_").Replace(resourceName))
}
