package attach

import (
	"strings"

	"github.com/fastpath-dra/fastpath/bpf"
	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// SubInterface is the sub-interface a device of a shared device gives its
// pod, false for other devices. Its alias names the claim and the
// device's slot (its request, or request.index).
func SubInterface(c claims.Claim, d claims.Device) (dataplane.SubInterface, bool) {
	sh := d.Shared
	if sh == nil || d.Pod == nil {
		return dataplane.SubInterface{}, false
	}
	s := dataplane.SubInterface{Parent: sh.Parent, Kind: sh.Kind, Mode: sh.Mode, VLANID: sh.VLANID, VLANProto: sh.VLANProto, MaxTxRate: uint64(max(sh.MaxTxRate, 0)),
		Name: d.Pod.Name, MTU: d.Pod.MTU, MAC: d.Pod.MAC, Addresses: d.Pod.Addresses, Alias: "fastpath/" + string(c.UID) + "/" + d.SlotName()}
	for _, r := range d.Pod.Routes {
		s.Routes = append(s.Routes, dataplane.Route{Destination: r.Destination, Gateway: r.Gateway})
	}
	return s, true
}

// Netdev is the attach plan of a device handed over as a kernel
// interface, false for other devices.
func Netdev(d claims.Device) (dataplane.Netdev, bool) {
	if d.Host == nil || d.Pod == nil {
		return dataplane.Netdev{}, false
	}
	nd := dataplane.Netdev{
		HostName: d.Host.Name, HostMTU: d.Host.MTU, HostMAC: d.Host.MAC, HostAlias: d.Host.Alias, PCIAddress: d.PCIAddress,
		Name: d.Pod.Name, MTU: d.Pod.MTU, MAC: d.Pod.MAC, Addresses: d.Pod.Addresses,
	}
	for _, r := range d.Pod.Routes {
		nd.Routes = append(nd.Routes, dataplane.Route(r))
	}
	for _, r := range d.Pod.Rules {
		nd.Rules = append(nd.Rules, dataplane.Rule(r))
	}
	if v := d.Pod.VRF; v != nil {
		nd.VRF = &dataplane.VRF{Name: v.Name, Table: v.Table}
	}
	for _, n := range d.Pod.Neighbors {
		nd.Neighbors = append(nd.Neighbors, dataplane.Neighbor(n))
	}
	nd.Sysctls = d.Pod.Sysctls
	// Prepare had the PF set the interface's MAC as the VF's.
	nd.MACFromPF = d.VF != nil && d.Pod.MAC != "" && strings.EqualFold(d.VF.Set.MAC, d.Pod.MAC)
	if x := d.XDP; x != nil {
		nd.XDP = &dataplane.XDP{Dir: x.PinDir, Mode: bpf.Mode(x.AttachMode), Fallback: x.Fallback}
	}
	if r := d.RDMA; r != nil {
		nd.RDMA = &dataplane.RDMA{Device: r.Device, Link: r.Link, Exclusive: r.Exclusive, UMAD: r.UMAD}
	}
	if d.Attached != nil {
		nd.HostUp = d.Attached.HostUp
	}
	return nd, true
}

// DeviceNodes are character devices as the claim record keeps them.
func DeviceNodes(files []dataplane.CharDevice) []claims.DeviceNode {
	var out []claims.DeviceNode
	for _, f := range files {
		out = append(out, claims.DeviceNode{Path: f.Path, HostPath: f.HostPath})
	}
	return out
}
