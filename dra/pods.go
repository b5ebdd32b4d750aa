package dra

import (
	"slices"
	"sort"

	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/bpf"
	"github.com/fastpath-dra/fastpath/dataplane"
)

var _ dataplane.Devices = (*Driver)(nil)

// PodNetdevs lists the netdevs prepared for a pod, from the checkpoint, in a
// stable order (claim, then request).
func (d *Driver) PodNetdevs(podUID string) []dataplane.PodNetdev {
	d.mu.Lock()
	defer d.mu.Unlock()
	cp, err := loadCheckpoint(d.checkpointPath())
	if err != nil {
		klog.Background().Error(err, "Reading the checkpoint for a pod", "podUID", podUID)
		return nil
	}
	var out []dataplane.PodNetdev
	for _, st := range sortedClaims(cp) {
		if string(st.PodUID) != podUID {
			continue
		}
		for _, dev := range st.Devices {
			if nd, ok := dev.netdev(); ok {
				out = append(out, dataplane.PodNetdev{
					ClaimNamespace: st.Namespace, ClaimName: st.Name, ClaimUID: string(st.UID),
					Request: dev.Request, Pool: dev.Pool, Device: dev.Device, Netdev: nd,
				})
			}
		}
	}
	return out
}

// PreparedPods lists the pods that have prepared netdevs.
func (d *Driver) PreparedPods() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	cp, err := loadCheckpoint(d.checkpointPath())
	if err != nil {
		klog.Background().Error(err, "Reading the checkpoint")
		return nil
	}
	var out []string
	for _, st := range cp.Claims {
		for _, dev := range st.Devices {
			if _, ok := dev.netdev(); ok && !slices.Contains(out, string(st.PodUID)) {
				out = append(out, string(st.PodUID))
			}
		}
	}
	sort.Strings(out)
	return out
}

func sortedClaims(cp *Checkpoint) []*ClaimState {
	out := make([]*ClaimState, 0, len(cp.Claims))
	for _, st := range cp.Claims {
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// netdev is the attach plan of a device handed over as a kernel interface.
func (p PreparedDevice) netdev() (dataplane.Netdev, bool) {
	if (p.Config.Mode != ModeNetdev && p.Config.Mode != ModeAFXDP) || p.HostIfName == "" || p.Config.Interface == nil {
		return dataplane.Netdev{}, false
	}
	i := p.Config.Interface
	nd := dataplane.Netdev{
		HostName: p.HostIfName, HostMTU: p.HostMTU, HostMAC: p.HostMAC, HostAlias: p.HostAlias, PCIAddress: p.PCIAddress,
		Name: i.Name, MTU: i.MTU, MAC: i.MAC, Addresses: i.Addresses,
	}
	for _, r := range i.Routes {
		nd.Routes = append(nd.Routes, dataplane.Route{Destination: r.Destination, Gateway: r.Gateway})
	}
	if p.XDPDir != "" && p.Config.XDP != nil {
		nd.XDP = &dataplane.XDP{Dir: p.XDPDir, Mode: bpf.Mode(p.Config.XDP.AttachMode), Fallback: p.Config.XDP.FallbackToGeneric}
	}
	return nd, true
}
