package v1alpha1

import (
	"slices"
	"strings"
)

// hostDeviceFields are the fields of the reference plugins' configs that
// name a device of the host rather than of the pod: an interface to take
// or attach to (host-device device, hwaddr, kernelpath, pciBusID and
// runtimeConfig.deviceID; macvlan, ipvlan and vlan master; bridge and tap
// bridge).
var hostDeviceFields = []string{"bridge", "device", "deviceID", "hwaddr", "kernelpath", "master", "pciBusID"}

// hostPathSuffixes end the names of fields that name files of the host
// (host-local dataDir, resolvConf, a socket path).
var hostPathSuffixes = []string{"dir", "path", "file", "socket", "conf"}

// HostDeviceField says whether a CNI plugin config field of this name
// names a device of the host.
func HostDeviceField(name string) bool { return slices.Contains(hostDeviceFields, name) }

// HostPathField says whether a CNI plugin config field of this name names
// a file of the host. A string that is an absolute path names one too,
// whatever its field.
func HostPathField(name string) bool {
	lower := strings.ToLower(name)
	for _, s := range hostPathSuffixes {
		if strings.HasSuffix(lower, s) {
			return true
		}
	}
	return false
}

// HostObjectField says whether a CNI plugin config field of this name
// names an object of the host: a device or a file. A tenant's config may
// not set such a field unless the operator allows what it names.
func HostObjectField(name string) bool { return HostDeviceField(name) || HostPathField(name) }
