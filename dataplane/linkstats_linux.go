package dataplane

import (
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// LinkStats is a link's state and counters, as the kernel has them.
type LinkStats struct {
	OperState string `json:"operState"`
	MTU       int    `json:"mtu"`
	MAC       string `json:"mac,omitempty"`
	RxPackets uint64 `json:"rxPackets"`
	TxPackets uint64 `json:"txPackets"`
	RxBytes   uint64 `json:"rxBytes"`
	TxBytes   uint64 `json:"txBytes"`
	RxErrors  uint64 `json:"rxErrors"`
	TxErrors  uint64 `json:"txErrors"`
	RxDropped uint64 `json:"rxDropped"`
	TxDropped uint64 `json:"txDropped"`
}

// LinkStatsAt reads link name's state and counters in the network
// namespace at nsPath ("" this process's), changing nothing.
func LinkStatsAt(nsPath, name string) (LinkStats, error) {
	var h *netlink.Handle
	var err error
	if nsPath == "" {
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	} else {
		var ns netns.NsHandle
		if ns, err = netns.GetFromPath(nsPath); err != nil {
			return LinkStats{}, fmt.Errorf("open network namespace %s: %w", nsPath, err)
		}
		defer ns.Close()
		h, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	}
	if err != nil {
		return LinkStats{}, fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	link, err := h.LinkByName(name)
	if err != nil {
		return LinkStats{}, fmt.Errorf("find %s: %w", name, err)
	}
	a := link.Attrs()
	st := LinkStats{OperState: a.OperState.String(), MTU: a.MTU, MAC: a.HardwareAddr.String()}
	if s := a.Statistics; s != nil {
		st.RxPackets, st.TxPackets, st.RxBytes, st.TxBytes = s.RxPackets, s.TxPackets, s.RxBytes, s.TxBytes
		st.RxErrors, st.TxErrors, st.RxDropped, st.TxDropped = s.RxErrors, s.TxErrors, s.RxDropped, s.TxDropped
	}
	return st, nil
}
