package dataplane

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"

	"github.com/safchain/ethtool"
)

// Channels reads and sets a netdev's combined channels, the RX/TX queue
// pairs AF_XDP sockets bind to (ethtool -l / -L combined N).
type Channels interface {
	// Combined returns the current and the most combined channels; max 0
	// means the device has none to set.
	Combined(ifName string) (cur, max int, err error)
	SetCombined(ifName string, n int) error
}

// EthtoolChannels sets channels through the kernel's ethtool interface.
type EthtoolChannels struct{}

// Combined implements Channels.
func (EthtoolChannels) Combined(ifName string) (int, int, error) {
	et, err := ethtool.NewEthtool()
	if err != nil {
		return 0, 0, fmt.Errorf("ethtool: %w", err)
	}
	defer et.Close()
	ch, err := et.GetChannels(ifName)
	if err != nil {
		return 0, 0, fmt.Errorf("channels of %s: %w", ifName, err)
	}
	return int(ch.CombinedCount), int(ch.MaxCombined), nil
}

// SetCombined implements Channels.
func (EthtoolChannels) SetCombined(ifName string, n int) error {
	var notFound netlink.LinkNotFoundError
	if _, err := netlink.LinkByName(ifName); errors.As(err, &notFound) {
		return fmt.Errorf("%w: %s: %w", ErrDeviceGone, ifName, err)
	}
	et, err := ethtool.NewEthtool()
	if err != nil {
		return fmt.Errorf("ethtool: %w", err)
	}
	defer et.Close()
	ch, err := et.GetChannels(ifName)
	if err != nil {
		return fmt.Errorf("channels of %s: %w", ifName, err)
	}
	ch.CombinedCount = uint32(n)
	if _, err := et.SetChannels(ifName, ch); err != nil {
		return fmt.Errorf("set %d combined channels on %s: %w", n, ifName, err)
	}
	return nil
}
