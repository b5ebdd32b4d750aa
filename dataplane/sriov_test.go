//go:build sriov

package dataplane

// The dataplane against a real SR-IOV NIC: QEMU's Intel 82576 (igb PF,
// igbvf VFs) in the test VM (make e2e-sriov). Each test takes a VF of its
// own: 0 attach and detach, 1 VF settings, 2 the pod namespace deleted,
// 3 vfio-pci.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/fastpath-dra/fastpath/test/netnstest"
	"github.com/fastpath-dra/fastpath/test/sriovtest"
)

var sriovSeq atomic.Int32

// sriovNetNS creates a network namespace standing in for a pod's.
func sriovNetNS(t *testing.T) string {
	t.Helper()
	return netnstest.New(t, fmt.Sprintf("%s-%d-%d", sriovtest.Prefix, os.Getpid(), sriovSeq.Add(1)))
}

// sriovVF gives the test VF id of the igb PF, with the PF up and its VFs
// made.
func sriovVF(t *testing.T, id int) (sriovtest.PF, sriovtest.VF) {
	t.Helper()
	pf := sriovtest.RequirePF(t)
	return pf, pf.VFsReady(t, 4)[id]
}

func linkByName(t *testing.T, name string) netlink.Link {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatalf("link %s: %v", name, err)
	}
	return l
}

func attacher(t *testing.T) *Attacher {
	t.Helper()
	a, err := NewAttacher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// vfInPod returns the pod's interface name (nil if none) and a netlink
// handle in the pod's namespace.
func vfInPod(t *testing.T, podNS, name string) (netlink.Link, *netlink.Handle) {
	t.Helper()
	ns, h, err := podHandle(podNS)
	if err != nil {
		t.Fatal(err)
	}
	_ = ns.Close()
	t.Cleanup(h.Close)
	l, err := h.LinkByName(name)
	if err != nil {
		return nil, h
	}
	return l, h
}

// ipVFState reads a VF's settings as iproute2 reads them from the PF
// (ip -j -d link show): a reader of its own beside NetlinkPF.VFState.
func ipVFState(t *testing.T, pf string, vf int) VFState {
	t.Helper()
	out, err := exec.Command("ip", "-j", "-d", "link", "show", pf).Output()
	if err != nil {
		t.Fatalf("ip link show %s: %v", pf, err)
	}
	var links []struct {
		VFs []struct {
			VF      int    `json:"vf"`
			Address string `json:"address"`
			VLANs   []struct {
				VLAN     int    `json:"vlan"`
				QoS      int    `json:"qos"`
				Protocol string `json:"protocol"`
			} `json:"vlan_list"`
			Rate struct {
				Max int `json:"max_tx"`
				Min int `json:"min_tx"`
			} `json:"rate"`
			SpoofChk  bool   `json:"spoofchk"`
			LinkState string `json:"link_state"`
			Trust     bool   `json:"trust"`
		} `json:"vfinfo_list"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		t.Fatalf("ip link show %s: %v: %s", pf, err, out)
	}
	for _, v := range links[0].VFs {
		if v.VF != vf {
			continue
		}
		st := VFState{MAC: v.Address, SpoofChk: v.SpoofChk, Trust: v.Trust, MinTxRate: v.Rate.Min, MaxTxRate: v.Rate.Max,
			LinkState: v.LinkState, VLANProto: "802.1q"}
		if len(v.VLANs) > 0 {
			st.VLAN, st.QoS = v.VLANs[0].VLAN, v.VLANs[0].QoS
			if v.VLANs[0].Protocol == "802.1ad" {
				st.VLANProto = "802.1ad"
			}
		}
		return st
	}
	t.Fatalf("ip link show %s lists no VF %d", pf, vf)
	return VFState{}
}

// vfState reads the VF's settings both ways, and fails the test if the two
// readers disagree.
func vfState(t *testing.T, pf string, vf int) VFState {
	t.Helper()
	st, err := NetlinkPF{}.VFState(pf, vf)
	if err != nil {
		t.Fatal(err)
	}
	if ip := ipVFState(t, pf, vf); ip != st {
		t.Fatalf("VF %d of %s: NetlinkPF reads %+v, iproute2 %+v", vf, pf, st, ip)
	}
	return st
}
