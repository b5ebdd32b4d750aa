package dataplane

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// NetlinkPF sets VFs through their PF with netlink.
type NetlinkPF struct{}

var _ PF = NetlinkPF{}

var linkStates = map[string]uint32{"auto": netlink.VF_LINK_STATE_AUTO, "enable": netlink.VF_LINK_STATE_ENABLE, "disable": netlink.VF_LINK_STATE_DISABLE}

func pfLink(pf string) (netlink.Link, error) {
	l, err := netlink.LinkByName(pf)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		return nil, fmt.Errorf("%w: PF %s: %w", ErrDeviceGone, pf, err)
	case err != nil:
		return nil, fmt.Errorf("PF %s: %w", pf, err)
	}
	return l, nil
}

// VFState reads the VF's settings from the PF's IFLA_VFINFO_LIST.
func (NetlinkPF) VFState(pf string, vf int) (VFState, error) {
	l, err := pfLink(pf)
	if err != nil {
		return VFState{}, err
	}
	for _, v := range l.Attrs().Vfs {
		if v.ID != vf {
			continue
		}
		st := VFState{VLAN: v.Vlan, QoS: v.Qos, VLANProto: "802.1q", MAC: v.Mac.String(), SpoofChk: v.Spoofchk,
			Trust: v.Trust != 0, MinTxRate: int(v.MinTxRate), MaxTxRate: int(v.MaxTxRate), LinkState: "auto"}
		if v.VlanProto == int(netlink.VLAN_PROTOCOL_8021AD) {
			st.VLANProto = "802.1ad"
		}
		for name, s := range linkStates {
			if s == v.LinkState {
				st.LinkState = name
			}
		}
		return st, nil
	}
	return VFState{}, fmt.Errorf("%w: PF %s has no VF %d", ErrDeviceGone, pf, vf)
}

func (NetlinkPF) SetVLAN(pf string, vf, vlan, qos int, proto string) error {
	l, err := pfLink(pf)
	if err != nil {
		return err
	}
	p := netlink.VLAN_PROTOCOL_8021Q
	if proto == "802.1ad" {
		p = netlink.VLAN_PROTOCOL_8021AD
	}
	return netlink.LinkSetVfVlanQosProto(l, vf, vlan, qos, int(p))
}

func (NetlinkPF) SetMAC(pf string, vf int, mac net.HardwareAddr) error {
	l, err := pfLink(pf)
	if err != nil {
		return err
	}
	return netlink.LinkSetVfHardwareAddr(l, vf, mac)
}

func (NetlinkPF) SetRate(pf string, vf, minMbps, maxMbps int) error {
	l, err := pfLink(pf)
	if err != nil {
		return err
	}
	return netlink.LinkSetVfRate(l, vf, minMbps, maxMbps)
}

func (NetlinkPF) SetSpoofChk(pf string, vf int, on bool) error {
	l, err := pfLink(pf)
	if err != nil {
		return err
	}
	return netlink.LinkSetVfSpoofchk(l, vf, on)
}

func (NetlinkPF) SetTrust(pf string, vf int, on bool) error {
	l, err := pfLink(pf)
	if err != nil {
		return err
	}
	return netlink.LinkSetVfTrust(l, vf, on)
}

func (NetlinkPF) SetLinkState(pf string, vf int, state string) error {
	l, err := pfLink(pf)
	if err != nil {
		return err
	}
	s, ok := linkStates[state]
	if !ok {
		return fmt.Errorf("link state %q: want auto, enable or disable", state)
	}
	return netlink.LinkSetVfState(l, vf, s)
}
