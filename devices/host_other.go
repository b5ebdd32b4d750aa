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
