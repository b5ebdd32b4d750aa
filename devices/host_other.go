//go:build !linux

package devices

import (
	"context"
	"errors"

	resourceapi "k8s.io/api/resource/v1"
)

func liveNetdevState(context.Context, []Device, func(error)) ([]Device, error) {
	return nil, errors.New("live device discovery needs Linux; give a sysfs root")
}

func watchLinks(context.Context, func(), func(string) bool) error { return nil }

func discoverPCI(context.Context, sysfs, *pciNames, map[string]string) ([]Device, []error, error) {
	return nil, nil, errors.New("PCI discovery needs Linux")
}

func classNet(sysfs) (map[string]string, []string, error) { return nil, nil, nil }

func pcieRoot(sysfs, string) (string, error) { return "", errors.New("PCI discovery needs Linux") }

// standardNUMANode is the scalar resource.kubernetes.io/numaNode attribute
// of NUMA node n, not there for a node the platform does not report (-1).
// The deviceattribute helper that renders it on Linux is not built
// elsewhere: its rule is applied here.
func standardNUMANode(n int) (resourceapi.DeviceAttribute, bool) {
	if n < 0 {
		return resourceapi.DeviceAttribute{}, false
	}
	return resourceapi.DeviceAttribute{IntValue: new(int64(n))}, true
}

// NUMANodeLists: NUMA distances are read from Linux's sysfs only.
func NUMANodeLists(string) (map[int64][]int64, error) { return nil, nil }
