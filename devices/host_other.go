//go:build !linux

package devices

import (
	"context"
	"errors"
)

func liveNetdevState(context.Context, []Device, func(error)) ([]Device, error) {
	return nil, errors.New("live device discovery needs Linux; give a sysfs root")
}

func watchLinks(context.Context, func()) error { return nil }

func discoverPCI(context.Context, sysfs, *pciNames, map[string]string) ([]Device, []error, error) {
	return nil, nil, errors.New("PCI discovery needs Linux")
}

func classNet(sysfs) (map[string]string, []string, error) { return nil, nil, nil }

func pcieRoot(sysfs, string) (string, error) { return "", errors.New("PCI discovery needs Linux") }
