package status

import (
	"encoding/json"
	"fmt"

	cni100 "github.com/containernetworking/cni/pkg/types/100"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// The condition of a device in a claim's status, and its reasons
// (KEP-4817).
const (
	ConditionReady = "Ready"
	ReasonReady    = "NetworkInterfaceReady"
	ReasonNotReady = "NetworkInterfaceNotReady"
	// ReasonDeviceGone: the device vanished from the node while prepared.
	ReasonDeviceGone = "DeviceGone"
)

// CNIReadyMessage is the CNI DRA driver design's message for a configured
// device.
const CNIReadyMessage = "CNI-DRA-Driver has configured the device."

// Condition is the Ready condition; its message is cut to
// bounds.MessageBytes (the API allows no more).
func Condition(ready bool, reason, msg string) metav1.Condition {
	status := metav1.ConditionFalse
	if ready {
		status = metav1.ConditionTrue
	}
	return metav1.Condition{Type: ConditionReady, Status: status, Reason: reason, Message: bounds.Message(msg), LastTransitionTime: metav1.Now()}
}

// Interface is a kernel interface as it ended up in a pod.
type Interface struct {
	Name      string
	MAC       string
	MTU       int
	Addresses []string
	// Sandbox is the pod's network namespace.
	Sandbox string
	// XDPMode is how the device's XDP program got attached, "" for none.
	XDPMode string
}

// NetdevReady is the status of a fastpath.dev device attached to its pod
// as a kernel interface: Ready, networkData, and in data the interface and
// its addresses in the CNI result's shape, the device-info and the XDP
// program.
func NetdevReady(dev claims.Device, iface Interface) resourceapi.AllocatedDeviceStatus {
	data := map[string]any{
		"interfaces": []map[string]any{{"name": iface.Name, "mac": iface.MAC, "mtu": iface.MTU, "sandbox": iface.Sandbox}},
	}
	var ips []map[string]any
	for _, a := range iface.Addresses {
		ips = append(ips, map[string]any{"address": a, "interface": 0})
	}
	if len(ips) > 0 {
		data["ips"] = ips
	}
	if info := DeviceInfoOf(dev); info != nil {
		data["device-info"] = info
	}
	if x := dev.XDP; x != nil {
		xdp := map[string]any{"attachMode": iface.XDPMode, "pinPath": x.PinDir, "program": x.Program, "queues": x.Queues}
		if x.Program == v1alpha1.XDPProgramXSKRedirect {
			xdp["mapPath"] = XDPContainerDir(dev.SlotName()) + "/" + XSKMapPin
		}
		data["xdp"] = xdp
	}
	if r := dev.RDMA; r != nil {
		data["rdma"] = RDMAData(r)
	}
	host := ""
	if dev.Host != nil {
		host = dev.Host.Name
	}
	msg := fmt.Sprintf("host interface %s attached as %s", host, iface.Name)
	if sh := dev.Shared; sh != nil {
		share := map[string]any{"parent": sh.Parent, "kind": sh.Kind, "interfaces": 1}
		if sh.Mode != "" {
			share["mode"] = sh.Mode
		}
		if sh.VLANID != 0 {
			share["vlan"], share["vlanProto"] = sh.VLANID, sh.VLANProto
		}
		if dev.IPAM != nil {
			share["ipamPool"], share["ipamAddress"] = dev.IPAM.Pool, dev.IPAM.Address
		}
		if sh.MaxTxRate > 0 {
			share["bandwidth"] = sh.MaxTxRate
		}
		data["share"] = share
		msg = fmt.Sprintf("%s of shared interface %s made in the pod as %s", sh.Kind, sh.Parent, iface.Name)
	}
	return OfShare(dev, resourceapi.AllocatedDeviceStatus{
		Driver: claims.DriverFastpath, Pool: dev.Pool, Device: dev.Device,
		Conditions:  []metav1.Condition{Condition(true, ReasonReady, msg)},
		Data:        rawJSON(data),
		NetworkData: &resourceapi.NetworkDeviceData{InterfaceName: iface.Name, IPs: iface.Addresses, HardwareAddress: iface.MAC},
	})
}

// RDMAData is the status data of a device's RDMA device: its name, the
// namespace mode it was given in, and the character devices the
// containers get.
func RDMAData(r *claims.RDMA) map[string]any {
	mode := "shared"
	if r.Exclusive {
		mode = "exclusive"
	}
	nodes := []string{}
	for _, n := range r.DeviceNodes {
		nodes = append(nodes, n.Path)
	}
	out := map[string]any{"device": r.Device, "netnsMode": mode, "deviceNodes": nodes}
	if r.Link != "" {
		out["link"] = r.Link
	}
	return out
}

// OfShare is st for the allocation's share of a shared device: a device
// allocated many times has one status per share.
func OfShare(dev claims.Device, st resourceapi.AllocatedDeviceStatus) resourceapi.AllocatedDeviceStatus {
	if dev.Shared != nil && dev.Shared.ShareID != "" {
		st.ShareID = new(dev.Shared.ShareID)
	}
	return st
}

// PreparedReady is the status of a fastpath.dev device that Prepare hands
// over whole, with no kernel interface to attach: a function on vfio-pci,
// a memif endpoint, a device delegated to a network's CNI plugin. Nil for
// other devices.
func PreparedReady(dev claims.Device) *resourceapi.AllocatedDeviceStatus {
	data := map[string]any{}
	if info := DeviceInfoOf(dev); info != nil {
		data["device-info"] = info
	}
	var msg string
	switch {
	case dev.VFIO != nil:
		var nodes []string
		for _, n := range dev.VFIO.DeviceNodes {
			nodes = append(nodes, n.Path)
		}
		data["driver"], data["iommuGroup"], data["deviceNodes"] = "vfio-pci", dev.VFIO.IOMMUGroup, nodes
		msg = fmt.Sprintf("PCI function %s bound to vfio-pci, IOMMU group %d", dev.PCIAddress, dev.VFIO.IOMMUGroup)
	case dev.Memif != nil:
		m := dev.Memif
		host := MemifHostSocket(m)
		data["role"], data["mode"], data["socketPath"], data["hostSocketPath"] = m.Role, m.Mode, MemifContainerSocket(dev.SlotName()), host
		if m.Role == v1alpha1.MemifRoleSlave {
			msg = fmt.Sprintf("memif endpoint %s mounted at %s", m.Socket, MemifContainerSocket(dev.SlotName()))
		} else {
			msg = fmt.Sprintf("the pod creates the memif socket at %s, on the node %s", MemifContainerSocket(dev.SlotName()), host)
		}
	case dev.Mode == v1alpha1.ModeDelegate:
		data["resourceName"] = dev.ResourceName
		if dev.DeviceInfoFile != "" {
			data["deviceInfoFile"] = dev.DeviceInfoFile
		}
		msg = fmt.Sprintf("prepared for the CNI plugin of the NetworkAttachmentDefinition the pod selects with resource name %s", dev.ResourceName)
	default:
		return nil
	}
	return &resourceapi.AllocatedDeviceStatus{
		Driver: claims.DriverFastpath, Pool: dev.Pool, Device: dev.Device,
		Conditions: []metav1.Condition{Condition(true, ReasonReady, msg)},
		Data:       rawJSON(data),
	}
}

// MemifHostSocket is where the socket the pod uses is on the node.
func MemifHostSocket(m *claims.Memif) string {
	if m.Role == v1alpha1.MemifRoleSlave {
		return m.Socket
	}
	return m.Dir + "/" + MemifSocketName
}

// NotReady is the status of a device that could not be put in place, or
// was undone: Ready false with the reason and the error as message.
func NotReady(driver, pool, device, reason, msg string) resourceapi.AllocatedDeviceStatus {
	return resourceapi.AllocatedDeviceStatus{
		Driver: driver, Pool: pool, Device: device,
		Conditions: []metav1.Condition{Condition(false, reason, msg)},
	}
}

// NetworkReady is the status of a CNI network added to its pod: Ready with
// the design's message, the CNI result (in the config's version) as data,
// and networkData from the result's interface named ifName.
func NetworkReady(n claims.Network, raw json.RawMessage, res *cni100.Result) resourceapi.AllocatedDeviceStatus {
	return OfNetworkShare(n, resourceapi.AllocatedDeviceStatus{
		Driver: claims.DriverCNI, Pool: n.Pool, Device: n.Device,
		Conditions:  []metav1.Condition{Condition(true, ReasonReady, CNIReadyMessage)},
		Data:        &runtime.RawExtension{Raw: raw},
		NetworkData: networkData(res, n.IfName),
	})
}

// OfNetworkShare is st for the network's share of a shared CNI device.
func OfNetworkShare(n claims.Network, st resourceapi.AllocatedDeviceStatus) resourceapi.AllocatedDeviceStatus {
	if n.ShareID != "" {
		st.ShareID = new(n.ShareID)
	}
	return st
}

// networkData is the result's interface named ifName in the sandbox, with
// its MAC and addresses.
func networkData(res *cni100.Result, ifName string) *resourceapi.NetworkDeviceData {
	nd := &resourceapi.NetworkDeviceData{InterfaceName: ifName}
	if res == nil {
		return nd
	}
	idx := -1
	for i, iface := range res.Interfaces {
		if iface.Name == ifName && (idx < 0 || iface.Sandbox != "") {
			idx = i
		}
	}
	if idx >= 0 {
		nd.HardwareAddress = res.Interfaces[idx].Mac
	}
	for _, ip := range res.IPs {
		if ip.Interface == nil || *ip.Interface == idx {
			nd.IPs = append(nd.IPs, ip.Address.String())
		}
	}
	return nd
}

func rawJSON(v any) *runtime.RawExtension {
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("status: data does not marshal: %v", err))
	}
	return &runtime.RawExtension{Raw: data}
}
