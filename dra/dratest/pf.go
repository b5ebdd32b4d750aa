package dratest

import (
	"net"

	"github.com/fastpath-dra/fastpath/dataplane"
)

// NopPF stands in for the PF of a tree's VFs (dra.Options.PF): there is
// no such device on the machine, and the netlink calls to a real PF are
// the driver's time, not fastpath's. Each VF reads as a PF leaves it by
// default, and each setting succeeds, changing nothing.
type NopPF struct{}

func (NopPF) VFState(string, int) (dataplane.VFState, error) {
	return dataplane.VFState{VLANProto: "802.1q", MAC: "00:00:00:00:00:00", LinkState: "auto"}, nil
}
func (NopPF) SetVLAN(string, int, int, int, string) error { return nil }
func (NopPF) SetMAC(string, int, net.HardwareAddr) error  { return nil }
func (NopPF) SetRate(string, int, int, int) error         { return nil }
func (NopPF) SetSpoofChk(string, int, bool) error         { return nil }
func (NopPF) SetTrust(string, int, bool) error            { return nil }
func (NopPF) SetLinkState(string, int, string) error      { return nil }
